"""AWS providers, built from the Lambda environment and the campaign context.

What exists: the run store and the lake on S3 (``benchctl.aws_lake``, partitions registered in Glue)
and reading a spec by ``s3://`` URI, so the Plan state works on AWS as it does locally. The EKS side
(scaling node groups, applying the DynamoGraphDeployment, AIPerf Jobs) is the next piece; until it
lands, those ports raise :class:`NotImplementedError` naming what is missing, the state machine's
Catch takes the campaign through teardown (nothing was scaled, so nothing needs restoring) to a
failed end, and the failure is recorded in the lake: loud, never pretending.
"""

from __future__ import annotations

import os
from typing import Any

from benchctl.campaign import Ctx, Providers


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; ValueError otherwise."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    if not bucket:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    return bucket, prefix.strip("/")


def read_s3_uri(uri: str) -> bytes:
    import boto3
    from botocore.exceptions import ClientError

    bucket, key = split_s3_uri(uri)
    try:
        return bytes(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            raise FileNotFoundError(f"{uri}: no such object (upload the spec: `benchctl start --upload-only`)") from None
        raise


class NotBuiltYet:
    """A port whose AWS adapter is not built yet: every call raises, naming the port and the call."""

    provider = "eks"

    def __init__(self, port: str) -> None:
        self.port = port

    def __getattr__(self, name: str) -> Any:
        def fail(*_args: Any, **_kwargs: Any) -> Any:
            raise NotImplementedError(
                f"AWS {self.port}.{name}: the EKS adapters (node groups, DynamoGraphDeployment, AIPerf "
                f"Jobs) are not built yet; run campaigns locally with `benchctl run`"
            )

        return fail


def _athena_report(env: dict[str, str]) -> Any:
    database, workgroup = env.get("BENCHCTL_DATABASE"), env.get("BENCHCTL_WORKGROUP")
    if not database or not workgroup:
        return None

    def report(campaign_id: str) -> dict[str, str]:
        from benchctl.aws_report import athena_report

        return athena_report(campaign_id, database=database, workgroup=workgroup)

    return report


def providers_from_env(ctx: Ctx, env: dict[str, str] | None = None) -> Providers:
    from benchctl.aws_lake import S3Lake, S3RunStore

    env = dict(os.environ if env is None else env)
    run_bucket, run_prefix = split_s3_uri(ctx.run_uri)
    lake_bucket, lake_prefix = split_s3_uri(ctx.lake_uri)
    return Providers(
        engine="aws",
        store=S3RunStore(run_bucket, run_prefix),
        pools=NotBuiltYet("pools"),
        serving=NotBuiltYet("serving"),
        load=NotBuiltYet("load"),
        lake=S3Lake(lake_bucket, lake_prefix, database=env.get("BENCHCTL_DATABASE") or None),
        tokenizer=env.get("BENCHCTL_TOKENIZER", "Qwen/Qwen3-30B-A3B"),
        smoke=NotBuiltYet("smoke"),
        read_uri=read_s3_uri,
        report=_athena_report(env),
        versions={"benchctl_engine": "aws"},
    )
