"""Names and prefixes shared by the stacks, the AWS runtime and the tests: one place for each.

The results bucket's layout (``s3://<bucket>/<prefix>/...``), the pool-lock table's attributes, the
service name Powertools logs and counts under, and the EKS add-on the load Jobs need.
May import only the standard library.
"""

from __future__ import annotations

# the results bucket
LAKE_PREFIX = "lake"  # the lake: <table>/<partitions>/<part>.parquet and raw/ (benchctl.lake.paths)
RUNS_PREFIX = "runs"  # each campaign's run state: runs/<campaign id>/ (benchctl.campaign.runstate)
SPECS_PREFIX = "specs"  # campaign specs the state machine is started with (`benchctl start`, a schedule)
ATHENA_PREFIX = "athena-results"  # the Athena workgroup's enforced result location
REPORTS_PREFIX = "reports"  # reports/<campaign id>/report.html, written by the Report state
# What a load runner Job lists (an IAM ``s3:prefix`` pattern): a step's kept inputs, the raw area's
# ``raw/campaign_id=<c>/experiment=<e>/step_id=<s>/inputs/`` (benchctl.lake.paths), fetched with ``aws s3 cp --recursive``
RUNNER_INPUTS_LISTING = f"{LAKE_PREFIX}/raw/campaign_id=*/experiment=*/step_id=*/inputs/"
# The load runner Jobs' hand-over with the Load function, a top-level prefix of its own (not under runs/, whose
# ``runs/*/runner/*`` would also match an experiment named ``runner``): runner/<campaign id>/<experiment>/<step>/
# request.json, token.json (the Load function's), end.json (the runner's). The load Job role reaches only its own
# campaign's (the Pod Identity session's service account, named after the campaign: benchctl.aws.runner_identity).
RUNNER_PREFIX = "runner"


def runner_prefix(campaign_id: str) -> str:
    """A campaign's runner hand-over prefix in the results bucket (``runner/<campaign id>``)."""
    return f"{RUNNER_PREFIX}/{campaign_id}"

# the pool-lock table (DynamoDB): its partition key and its time-to-live attribute
LOCK_KEY_ATTRIBUTE = "pool"
LOCK_TTL_ATTRIBUTE = "expires_at"

SERVICE = "benchctl"  # Powertools' service name and the CloudWatch metrics namespace
POD_IDENTITY_ADDON = "eks-pod-identity-agent"  # gives the load Jobs their S3 credentials (outside Auto Mode)
DEFAULT_NAMESPACE = "dynamo-bench"  # the benchmark's Kubernetes namespace unless configured otherwise


def report_key(campaign_id: str) -> str:
    """The report's object key in the results bucket (what the status notification links)."""
    return f"{REPORTS_PREFIX}/{campaign_id}/report.html"
