"""Planning: a spec into a plan (steps, placement, node counts), its costs, budget, quotas and ceilings, the generated datasets and the load and mocker arguments.

May import: the foundation, the spec and the lake.
"""
