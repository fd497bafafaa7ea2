"""The campaign spec: its model, the deployment (model, pools, workers, experiments), fields, settings, text limits, workloads, object names and comparisons.

May import: the foundation (benchctl's top-level modules) only.
"""
