"""Analysis: the statistics under the verdicts, the verdicts, the SLO-edge search, the transfer fabric, output quality, the view catalog and formatting.

May import: the foundation, the spec, the lake and planning.
"""
