"""AWS providers (EKS node groups, DynamoGraphDeployment, AIPerf Jobs, S3/Glue lake).

Not built yet: the handlers, the ASL and the schema are shared with the local engine, and these
adapters are the remaining piece (tracked as the AWS deployment and EKS issues). Until then a
deployed function fails loudly instead of pretending.
"""

from __future__ import annotations

from typing import Any


def providers_from_env(ctx: Any) -> Any:
    raise NotImplementedError(
        "benchctl AWS providers are not implemented yet; run campaigns locally with `benchctl run`"
    )
