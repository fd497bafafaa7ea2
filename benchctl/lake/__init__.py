"""The lake: table schemas, partition paths, the timeline's vocabulary, the query port, the client-load figures and the ingest of AIPerf artifacts into rows.

May import: the foundation only.
"""
