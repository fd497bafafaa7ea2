"""benchctl: the control plane of the Dynamo aggregated-vs-disaggregated benchmark."""

__version__ = "0.1.0"
