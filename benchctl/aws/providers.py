"""The AWS engine: the providers of one campaign, built from the function's configuration (``LambdaEnv``).

The run store and the lake on S3 (``benchctl.aws.s3``, partitions registered in Glue); GPU pools as EKS
managed node groups or Auto Mode NodePools (``benchctl.aws.pools``); serving, load and smoke as Kubernetes
objects (``benchctl.aws.eks``, rendered by ``benchctl.aws.k8s``); a preflight of the cluster before
anything is scaled (``benchctl.aws.preflight``); pool locks in DynamoDB (``benchctl.aws.locks``); the
report through Athena (``benchctl.aws.athena``). May import the core and ``benchctl.aws``, never
``benchctl.local`` (the Lambda code asset does not hold it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from benchctl.aws.env import LambdaEnv
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import JSON, PoolPort, Providers
from benchctl.campaign.runstate import RunState
from benchctl.constants import runner_prefix
from benchctl.planning.ceilings import Ceilings
from benchctl.spec.model import CampaignSpec
from benchctl.spec.text import read_capped


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; ValueError otherwise."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    return bucket, prefix.strip("/")


def read_s3_uri(uri: str, *, s3: Any = None) -> bytes:
    """The object's bytes, at most benchctl.spec.text.MAX_SPEC_BYTES (a larger object is a SpecError before its
    body is read: its ContentLength is checked first). A missing one is a FileNotFoundError naming the specs
    that are there: S3 says AccessDenied, not NoSuchKey, to a reader that may not list the bucket, so on either the prefix is
    listed (the Plan role may list ``specs/``) before anything is concluded."""
    import boto3
    from botocore.exceptions import ClientError

    bucket, key = split_s3_uri(uri)
    s3 = s3 or boto3.client("s3")
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
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
    body = got["Body"]
    try:  # the size S3 declares is checked before the body is read, and no more than the limit is read
        return read_capped(body, uri, got.get("ContentLength"))
    finally:
        body.close()


class _LazyPools:
    """The campaign's ``PoolPort``: the spec is known only after Plan, so its adapters are built on first use."""

    provider = "eks"

    def __init__(self, build: Callable[[], PoolPort]) -> None:
        self._build = build
        self._real: PoolPort | None = None

    def real(self) -> PoolPort:
        if self._real is None:
            self._real = self._build()
        return self._real

    def scale(self, pool: str, nodes: int, owner: str, *,
              before_change: Callable[[JSON], None] | None = None) -> JSON:
        return self.real().scale(pool, nodes, owner, before_change=before_change)

    def ready(self, record: JSON) -> bool:
        return self.real().ready(record)

    def launches(self, record: JSON) -> None:
        self.real().launches(record)

    def restore(self, record: JSON) -> JSON:
        return self.real().restore(record)

    def observe(self, record: JSON) -> JSON:
        return self.real().observe(record)


class AwsEngine:
    """The AWS engine of one deployment: its configuration (``LambdaEnv``) and the providers of a campaign."""

    name = "aws"

    def __init__(self, env: LambdaEnv, *, session: Any = None, ceilings: Ceilings | None = None) -> None:
        self.env = env
        self.ceilings = ceilings  # the deployment's (BENCHCTL_CEILINGS on the Plan and Pools functions)
        self.runs_uri = env.runs_uri.rstrip("/")
        self.lake_uri = env.lake_uri
        self._session = session

    def session(self) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.session.Session()
        return self._session

    def providers(self, ctx: Ctx) -> Providers:
        """Providers of one campaign. Its spec is read from the run state when first needed (the Plan state
        writes it; parsed once per invocation), the Kubernetes client is built when first used (endpoint +
        CA from ``describe_cluster``, a presigned token that refreshes itself)."""
        from benchctl.aws.athena import AthenaReport
        from benchctl.aws.callbacks import RunnerCallbacks
        from benchctl.aws.eks import EksServing, EksSmoke
        from benchctl.aws.eks_load import EksLoad
        from benchctl.aws.eks_token import kube_for_cluster
        from benchctl.aws.locks import DynamoLocks
        from benchctl.aws.pools import pools_for
        from benchctl.aws.preflight import EksPreflight, with_load_image
        from benchctl.aws.runner_identity import RunnerIdentity
        from benchctl.aws.s3 import S3Lake, S3RunStore

        env, session = self.env, self.session()
        run_bucket, run_prefix = split_s3_uri(ctx.run_uri)
        lake_bucket, lake_prefix = split_s3_uri(ctx.lake_uri)
        store = S3RunStore(run_bucket, run_prefix, session=session)
        control = S3RunStore(run_bucket, runner_prefix(ctx.campaign_id), session=session)  # the runner's hand-over
        state = RunState(store)
        cache: dict[str, Any] = {}

        def spec() -> CampaignSpec:
            """The campaign's spec, the deployment's load image filled in where the spec names none."""
            if "spec" not in cache:
                cache["spec"] = with_load_image(state.spec(), env.load_image)
            result: CampaignSpec = cache["spec"]
            return result

        def kube() -> Any:
            if "kube" not in cache:
                if not env.cluster:
                    raise ValueError("BENCHCTL_CLUSTER is not set: the control-plane stack sets it from "
                                     "context benchctl:cluster_name")
                cache["kube"] = kube_for_cluster(env.cluster, session)
            return cache["kube"]

        identity = RunnerIdentity(kube, lambda: session.client("eks"), cluster=env.cluster,
                                  namespace=lambda: spec().kubernetes.namespace if state.has_spec() else env.namespace,
                                  role_arn=env.load_role_arn, campaign_id=ctx.campaign_id)
        report = (AthenaReport(session, database=env.database, workgroup=env.workgroup, bucket=env.bucket or None,
                               lake_uri=ctx.lake_uri) if env.database and env.workgroup else None)
        return Providers(
            engine=self.name,
            state=state,
            pools=_LazyPools(lambda: pools_for(spec(), ctx.campaign_id, cluster_name=env.cluster, session=session,
                                               kube=kube)),
            serving=EksServing(kube, ctx.campaign_id),
            load=EksLoad(kube, spec, ctx.campaign_id, control=control, region=session.region_name or ""),
            smoke=EksSmoke(kube, spec, ctx.campaign_id),
            lake=S3Lake(lake_bucket, lake_prefix, database=env.database or None, session=session),
            read_uri=lambda uri: read_s3_uri(uri, s3=session.client("s3")),
            tokenizer="",  # the model's own, offline from the model volume at model.revision
            report=report,
            preflight=EksPreflight(kube, session, identity, cluster=env.cluster, nodegroups=env.nodegroups,
                                   load_image=env.load_image, campaign_id=ctx.campaign_id, run_uri=store.uri,
                                   lake_uri=ctx.lake_uri),
            locks=DynamoLocks(env.lock_table, session=session) if env.lock_table else None,
            callbacks=RunnerCallbacks(control, lambda: session.client("stepfunctions")),
            identity=identity,
            versions={"benchctl_engine": "aws", **({"load_image": env.load_image} if env.load_image else {}),
                      **_platform(env)},
            ceilings=self.ceilings,
        )


def _platform(env: LambdaEnv) -> JSON:
    """The platform stack's monitoring provenance (BENCHCTL_PLATFORM_JSON), when a platform stack made it."""
    try:
        data = json.loads(env.platform_json) if env.platform_json else None
    except ValueError:
        return {"platform": {"error": f"BENCHCTL_PLATFORM_JSON is not JSON: {env.platform_json[:200]}"}}
    return {"platform": data} if isinstance(data, dict) else {}


_ENGINES: dict[tuple[tuple[str, str], ...], AwsEngine] = {}


def engine_from_env(environ: Mapping[str, str]) -> AwsEngine:
    """The AWS engine of this function, its configuration parsed once (again only when it changed)."""
    from benchctl.aws.env import VARIABLES
    from benchctl.planning import ceilings

    key = tuple((name, environ.get(name, "")) for name in sorted({*VARIABLES.values(), ceilings.ENV_VAR}))
    if key not in _ENGINES:
        _ENGINES.clear()
        # every function holds specs to the ceilings; the stack records them on Plan and Pools, the two that
        # check them, and an unset variable means the defaults (fail closed)
        _ENGINES[key] = AwsEngine(LambdaEnv.from_env(environ), ceilings=ceilings.from_env(environ))
    return _ENGINES[key]


def providers_from_env(ctx: Ctx, env: Mapping[str, str]) -> Providers:
    """The providers of one campaign on AWS, from a function's environment (the sweeper's path)."""
    return engine_from_env(env).providers(ctx)
