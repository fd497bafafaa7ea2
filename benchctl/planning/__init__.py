"""Planning: a spec into a plan (steps, search probes, placement, node counts), what one Step Functions execution of it holds (history), its costs, budget, quotas and ceilings, the generated datasets and the load and mocker arguments.

May import: the foundation, the spec and the lake.
"""
