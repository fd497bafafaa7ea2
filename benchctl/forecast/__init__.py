"""Forecasts: aiconfigurator's predictions, the twin (the mocker's timing from a GPU profile) and its calibration.

May import: the foundation, the spec, the lake, planning and analysis.
"""
