"""The AWS engine: the adapters the Lambda functions wire in (S3 lake and run store, DynamoDB locks, EKS
pools, Kubernetes serving/load/smoke/preflight, Athena report) and the start/sweep entry points. The
core never imports it; it never imports ``benchctl.local``."""
