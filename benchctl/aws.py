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


def read_s3_uri(uri: str, *, s3: Any = None) -> bytes:
    """The object's bytes. A missing one is a FileNotFoundError naming the specs that are there: S3 says
    AccessDenied, not NoSuchKey, to a reader that may not list the bucket, so on either the prefix is
    listed (the Plan role may list ``specs/``) before anything is concluded."""
    import boto3
    from botocore.exceptions import ClientError

    bucket, key = split_s3_uri(uri)
    s3 = s3 or boto3.client("s3")
    try:
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404", "AccessDenied", "403"):
            raise
        prefix = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        try:
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1000).get("Contents", [])
        except ClientError:
            raise err from None  # cannot tell: the original answer stands
        there = sorted(o["Key"] for o in listed)
        if key in there:
            raise
        raise FileNotFoundError(
            f"{uri}: no such spec; under s3://{bucket}/{prefix} there are: {', '.join(there) or 'none'} "
            "(upload one with `benchctl start SPEC --upload-only`)") from None


def _athena_report(env: dict[str, str]) -> Any:
    database, workgroup = env.get("BENCHCTL_DATABASE"), env.get("BENCHCTL_WORKGROUP")
    if not database or not workgroup:
        return None

    def report(campaign_id: str) -> dict[str, str]:
        from benchctl.aws_report import athena_report

        return athena_report(campaign_id, database=database, workgroup=workgroup, bucket=env.get("BENCHCTL_BUCKET"))

    return report


POD_IDENTITY_ADDON = "eks-pod-identity-agent"


def _allowed(env: dict[str, str]) -> list[str]:
    return [n for n in env.get("BENCHCTL_NODEGROUPS", "").split(",") if n]


def _allowed_pools_only(spec: Any, env: dict[str, str]) -> Any:
    """The spec without pools on node groups this deployment may not touch (named apart, not as AccessDenied)."""
    allowed = _allowed(env)
    keep = [p for p in spec.pools if p.provider != "managed-nodegroup" or not p.nodegroup or p.nodegroup in allowed]
    return spec if len(keep) == len(spec.pools) else spec.model_copy(update={"pools": keep})


def deployment_preflight(spec: Any, env: dict[str, str], cluster: str, eks: Any) -> list[str]:
    """What this deployment itself must allow, checked before anything is scaled: the spec's node groups
    are among those the stack may scale (``benchctl:nodegroups``), and, outside Auto Mode, the EKS Pod
    Identity Agent add-on is installed (the load Jobs get their S3 credentials through it)."""
    problems = []
    allowed = _allowed(env)
    for pool in spec.pools:
        if pool.provider == "managed-nodegroup" and pool.nodegroup and pool.nodegroup not in allowed:
            problems.append(
                f"pool {pool.name}: node group {pool.nodegroup!r} is not one this deployment may scale "
                f"(CDK context benchctl:nodegroups = {allowed}); add it there and deploy again, or use one of those")
    if not any(p.provider == "auto-mode" for p in spec.pools):
        try:
            eks.describe_addon(clusterName=cluster, addonName=POD_IDENTITY_ADDON)
        except Exception as err:
            if str(getattr(err, "response", {}).get("Error", {}).get("Code")) == "ResourceNotFoundException":
                problems.append(
                    f"cluster {cluster}: the EKS add-on {POD_IDENTITY_ADDON} is not installed; the load Jobs get "
                    "their S3 credentials through EKS Pod Identity (aws eks create-addon --cluster-name "
                    f"{cluster} --addon-name {POD_IDENTITY_ADDON})")
            # any other answer (no permission, an API that cannot say): the Jobs' own uploads would tell
    return problems


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
        preflight=lambda s: deployment_preflight(s, env, cluster, session.client("eks"))
        + preflight(with_load_image(_allowed_pools_only(s, env), load_image), kube(), eks=session.client("eks"),
                    cluster_name=cluster, campaign_id=ctx.campaign_id),
        locks=DynamoLocks(env["BENCHCTL_LOCK_TABLE"], session=session) if env.get("BENCHCTL_LOCK_TABLE") else None,
        versions={"benchctl_engine": "aws", **({"load_image": load_image} if load_image else {})},
    )
