"""The Lambda functions' configuration: one typed model, built by the control-plane stack and parsed once
by the runtime.

The stack sets exactly :meth:`LambdaEnv.to_env` on every function (``stacks/control_plane.py``); the
runtime reads exactly :meth:`LambdaEnv.from_env` (``lambdas/_runtime.py``, through
``benchctl.aws.providers``). A test holds the stack's variables to this model's, so no variable is set
but never read, or read but never set. May import only the standard library and ``benchctl.constants``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from benchctl.constants import DEFAULT_NAMESPACE

# field -> environment variable
VARIABLES: dict[str, str] = {
    "bucket": "BENCHCTL_BUCKET",  # the results bucket: the report is written to reports/<campaign>/
    "lake_uri": "BENCHCTL_LAKE_URI",  # s3://<bucket>/lake
    "runs_uri": "BENCHCTL_RUNS_URI",  # s3://<bucket>/runs: run state of campaign C under <runs_uri>/C
    "database": "BENCHCTL_DATABASE",  # the Glue database (partitions registered as written)
    "workgroup": "BENCHCTL_WORKGROUP",  # the Athena workgroup (the Report state's views and queries)
    "cluster": "BENCHCTL_CLUSTER",  # the EKS cluster
    "nodegroups": "BENCHCTL_NODEGROUPS",  # comma-separated: the managed node groups the functions may scale
    "namespace": "BENCHCTL_NAMESPACE",  # where the sweeper looks for labelled objects
    "lock_table": "BENCHCTL_LOCK_TABLE",  # the pool-lock table (DynamoDB)
    "load_image": "BENCHCTL_LOAD_IMAGE",  # the deployment's load image (AIPerf 0.13.0)
    "load_role_arn": "BENCHCTL_LOAD_ROLE_ARN",  # the load Job role each campaign's runner service account gets
    "log_level": "POWERTOOLS_LOG_LEVEL",  # read by Powertools' Logger itself (lambdas/_runtime.py)
    # the platform stack's monitoring as the run record's provenance (scrape interval, dashboards' hash): JSON
    "platform_json": "BENCHCTL_PLATFORM_JSON",
    # the campaign state machine's ARN: a stop event is verified against it (benchctl.campaign.stopped)
    "campaign_machine_arn": "BENCHCTL_CAMPAIGN_MACHINE_ARN",
}


@dataclass(frozen=True)
class LambdaEnv:
    """What a function knows about its deployment. Empty text: not configured (then the part that needs it
    says so when it is used, e.g. no cluster name)."""

    runs_uri: str
    lake_uri: str
    bucket: str = ""
    database: str = ""
    workgroup: str = ""
    cluster: str = ""
    nodegroups: tuple[str, ...] = ()
    namespace: str = DEFAULT_NAMESPACE
    lock_table: str = ""
    load_image: str = ""
    load_role_arn: str = ""
    log_level: str = "INFO"
    platform_json: str = ""
    campaign_machine_arn: str = ""

    @staticmethod
    def from_env(env: Mapping[str, str]) -> LambdaEnv:
        """The model from the process environment; ValueError naming what is missing."""
        missing = [VARIABLES[k] for k in ("runs_uri", "lake_uri") if not env.get(VARIABLES[k])]
        if missing:
            raise ValueError(f"this function's environment has no {missing}: the control-plane stack sets them "
                             "(benchctl.aws.env.LambdaEnv)")
        values: dict[str, object] = {}
        for f in dataclasses.fields(LambdaEnv):
            raw = env.get(VARIABLES[f.name])
            if raw is None or raw == "":
                continue
            values[f.name] = tuple(n for n in raw.split(",") if n) if f.name == "nodegroups" else raw
        return LambdaEnv(**values)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """Every variable of the model (what the stack sets)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[VARIABLES[f.name]] = ",".join(value) if isinstance(value, tuple) else str(value)
        return out
