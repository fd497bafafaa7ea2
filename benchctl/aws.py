"""AWS providers, built from the Lambda environment and the campaign context.

The run store and the lake on S3 (``benchctl.aws_lake``, partitions registered in Glue); GPU pools
as EKS managed node groups or Auto Mode NodePools (``benchctl.eks_pools``); serving, load and smoke
as Kubernetes objects rendered from the spec (``benchctl.aws_k8s``, ``benchctl.k8s``); a preflight
of the cluster before anything is scaled; the report in Athena.
"""

from __future__ import annotations

import os
from typing import Any

from benchctl.campaign import JSON, Ctx, Providers


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


def _athena_report(env: dict[str, str]) -> Any:
    database, workgroup = env.get("BENCHCTL_DATABASE"), env.get("BENCHCTL_WORKGROUP")
    if not database or not workgroup:
        return None

    def report(campaign_id: str) -> dict[str, str]:
        from benchctl.aws_report import athena_report

        return athena_report(campaign_id, database=database, workgroup=workgroup, bucket=env.get("BENCHCTL_BUCKET"))

    return report


def with_load_image(spec: Any, load_image: str) -> Any:
    """``spec`` with ``kubernetes.aiperf_image`` set to the deployment's load image where it names none."""
    if spec.kubernetes.aiperf_image or not load_image:
        return spec
    return spec.model_copy(update={"kubernetes": spec.kubernetes.model_copy(update={"aiperf_image": load_image})})


def providers_from_env(ctx: Ctx, env: dict[str, str] | None = None) -> Providers:
    """Providers of one campaign on AWS. The campaign spec is read from the run store when first needed
    (the Plan state writes it), the Kubernetes client is built when first used (endpoint + CA from
    ``describe_cluster``, a presigned token that refreshes itself)."""
    import boto3

    from benchctl.aws_k8s import EksLoad, EksServing, EksSmoke, preflight
    from benchctl.aws_lake import S3Lake, S3RunStore
    from benchctl.eks_pools import pools_for
    from benchctl.k8s.eks import kube_for_cluster
    from benchctl.locks import DynamoLocks
    from benchctl.spec import CampaignSpec, parse_spec

    env = dict(os.environ if env is None else env)
    cluster = env.get("BENCHCTL_CLUSTER", "")
    run_bucket, run_prefix = split_s3_uri(ctx.run_uri)
    lake_bucket, lake_prefix = split_s3_uri(ctx.lake_uri)
    store = S3RunStore(run_bucket, run_prefix)
    session = boto3.session.Session()
    cache: dict[str, Any] = {}

    load_image = env.get("BENCHCTL_LOAD_IMAGE", "")

    def spec() -> CampaignSpec:
        """The campaign's spec, the deployment's load image filled in where the spec names none."""
        if "spec" not in cache:
            data = store.read_json("spec.json")
            if data is None:
                raise FileNotFoundError(f"{store.uri}/spec.json is missing: the Plan state writes it")
            cache["spec"] = with_load_image(parse_spec(data, f"{store.uri}/spec.json"), load_image)
        result: CampaignSpec = cache["spec"]
        return result

    def kube() -> Any:
        if "kube" not in cache:
            if not cluster:
                raise ValueError("BENCHCTL_CLUSTER is not set: the control-plane stack sets it from "
                                 "context benchctl:cluster_name")
            cache["kube"] = kube_for_cluster(cluster, session)
        return cache["kube"]

    class _Pools:  # the spec is known only after Plan; build the pool adapters on first use
        provider = "eks"

        def _real(self) -> Any:
            if "pools" not in cache:
                cache["pools"] = pools_for(spec(), ctx.campaign_id, cluster_name=cluster, session=session, kube=kube)
            return cache["pools"]

        def scale(self, pool: str, nodes: int, owner: str, *, before_change: Any = None) -> JSON:
            result: JSON = self._real().scale(pool, nodes, owner, before_change=before_change)
            return result

        def ready(self, record: JSON) -> bool:
            return bool(self._real().ready(record))

        def restore(self, record: JSON) -> JSON:
            result: JSON = self._real().restore(record)
            return result

    return Providers(
        engine="aws",
        store=store,
        pools=_Pools(),
        serving=EksServing(kube, spec, ctx.campaign_id),
        load=EksLoad(kube, spec, ctx.campaign_id),
        lake=S3Lake(lake_bucket, lake_prefix, database=env.get("BENCHCTL_DATABASE") or None),
        tokenizer=env.get("BENCHCTL_TOKENIZER", ""),  # "": the model's own, offline from the model volume
        smoke=EksSmoke(kube, spec, ctx.campaign_id),
        read_uri=read_s3_uri,
        report=_athena_report(env),
        preflight=lambda s: preflight(with_load_image(s, load_image), kube(), eks=session.client("eks"),
                                      cluster_name=cluster, campaign_id=ctx.campaign_id),
        locks=DynamoLocks(env["BENCHCTL_LOCK_TABLE"], session=session) if env.get("BENCHCTL_LOCK_TABLE") else None,
        versions={"benchctl_engine": "aws", **({"load_image": load_image} if load_image else {})},
    )
