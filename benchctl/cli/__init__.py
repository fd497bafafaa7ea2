"""The command line: the composition root that wires an engine in; a module per command group.

May import: every wing and both engines.
"""
