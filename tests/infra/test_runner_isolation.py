"""One campaign's load runner reaches only that campaign's keys, held against moto's server with IAM enforced
(tests/fakes/moto_iam.py: IAM's condition rules, policy variables substituted from the session's tags, S3's
403 for a missing key where moto is laxer).

Each runner holds the synthesized load Job role as EKS Pod Identity gives it to a pod of its campaign: a
session of that role with Pod Identity's session tags (``kubernetes-service-account`` = the campaign id,
the service account benchctl.aws.runner_identity associates; EKS user guide, pod-id-abac). The Load function
(its own synthesized role) lays out each campaign's step as LaunchLoad and AwaitLoadEnd do: the kept input in
the raw area, the request, its end key and the task token in ``runner/<campaign>/``. Then, for both
directions, campaign A's runner may do everything its own step needs and nothing to campaign B's objects
(inputs, artifacts, request, end record, task token), and B's keys are refused the same way whether they
exist or not.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fakes.moto_iam import (
    Enforcement,
    administrator,
    assume_roles,
    fresh_account,
    function_roles,
    iam_enforced,
    pod_identity_tags,
    role_documents,
    trust_admits,
)
from tests.infra.cfn_resolve import ACCOUNT, REGION, Resolver
from tests.infra.conftest import CONTEXT, CP

pytestmark = [pytest.mark.infra, pytest.mark.timeout(600)]
JSON = dict[str, Any]
NS, CLUSTER = CONTEXT["benchctl:namespace"], CONTEXT["benchctl:cluster_name"]  # the synthesized stack's
CLUSTER_ARN = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}"
A, B = "seed-plan-20261201-101500", "seed-plan-20261201-101501"
EXP, STEP = "agg", "concurrency-sweep-c1-r0"


@dataclass
class World:
    url: str
    bucket: str
    sessions: dict[str, Any]
    enforcement: Enforcement
    keys: dict[str, str]  # campaign -> its step's end key

    def s3(self, who: str) -> Any:
        return self.sessions[who].client("s3", endpoint_url=self.url, region_name=REGION)


def _raw(cid: str) -> str:
    return f"lake/raw/campaign_id={cid}/experiment={EXP}/step_id={STEP}/"


def _handover(cid: str) -> str:
    return f"runner/{cid}/{EXP}/{STEP}/"


@pytest.fixture(scope="module")
def world(templates: dict[str, JSON]) -> Iterator[World]:
    import boto3
    from moto.server import ThreadedMotoServer

    from benchctl.aws.callbacks import RunnerCallbacks
    from benchctl.aws.k8s.jobs import runner_request
    from benchctl.aws.s3 import S3Lake, S3RunStore
    from benchctl.constants import runner_prefix
    from tests.infra.test_runner_rehearsal import _free_port, _function_env

    t = {k: v for k, v in templates.items() if not k.startswith("_")}
    env = _function_env(t, "lambdas.load.handler")
    who = function_roles(t, CP)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    fresh_account(url)
    try:
        root = boto3.session.Session(aws_access_key_id="setup", aws_secret_access_key="setup", region_name=REGION)
        bucket = env["BENCHCTL_BUCKET"]
        root.client("s3", endpoint_url=url).create_bucket(Bucket=bucket)
        resolve = Resolver(t)

        def role(rid: str) -> tuple[JSON, list[JSON]]:
            return (resolve.resolve(t[CP]["Resources"][rid]["Properties"]["AssumeRolePolicyDocument"], CP),
                    role_documents(t, CP, rid))

        runner = role(who["runner"])
        credentials = assume_roles(root.client("iam", endpoint_url=url), root.client("sts", endpoint_url=url), {
            f"runner-{A}": runner, f"runner-{B}": runner, "runner-untagged": runner,
            "load-function": role(who["lambdas.load.handler"])},
            tags={f"runner-{c}": pod_identity_tags(CLUSTER_ARN, NS, c) for c in (A, B)})
        credentials["admin"] = administrator(root.client("iam", endpoint_url=url))
        sessions = {name: boto3.session.Session(
            aws_access_key_id=c["AWS_ACCESS_KEY_ID"], aws_secret_access_key=c["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=c.get("AWS_SESSION_TOKEN"), region_name=REGION) for name, c in credentials.items()}
        with pytest.MonkeyPatch.context() as mp, iam_enforced(url) as enforcement:
            mp.setenv("AWS_ENDPOINT_URL", url)
            fn = sessions["load-function"]
            keys = {}
            for cid in (A, B):  # LaunchLoad and AwaitLoadEnd of each campaign's step, as the Load function
                lake = S3Lake(bucket, "lake", session=fn)
                input_uri = lake.write_raw(cid, EXP, STEP, "inputs.jsonl", f"{cid}\n".encode())
                control = S3RunStore(bucket, runner_prefix(cid), session=fn)
                keys[cid] = secrets.token_hex(32)
                control.write_json(f"{EXP}/{STEP}/key.json", {"end_key": keys[cid]})
                control.write_json(f"{EXP}/{STEP}/request.json", runner_request(
                    STEP, ["profile", "--input-file", input_uri], 10.0, 5.0, input_uri))
                RunnerCallbacks(control, lambda: None).watch(f"token-of-{cid}", "AwaitLoadEnd", (EXP, STEP),
                                                             lambda: None)
            yield World(url, bucket, sessions, enforcement, keys)
    finally:
        fresh_account(url)
        server.stop()


def _denied(call: Any) -> tuple[str, int]:
    """The error S3 answered (code, HTTP status); fails when the call was allowed."""
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as err:
        return str(err.response["Error"]["Code"]), int(err.response["ResponseMetadata"]["HTTPStatusCode"])
    pytest.fail("allowed")


def _own_step(w: World, cid: str) -> JSON:
    """What a campaign's runner does for its step (RUNNER_CONTROL_SCRIPT's calls): list and fetch its inputs,
    read its request, key and task token, upload an artifact, write its signed end record."""
    from benchctl.aws.eks_load import sign_end

    s3 = w.s3(f"runner-{cid}")
    listed = s3.list_objects_v2(Bucket=w.bucket, Prefix=_raw(cid) + "inputs/")["Contents"]
    inputs = [s3.get_object(Bucket=w.bucket, Key=o["Key"])["Body"].read() for o in listed]
    request = json.loads(s3.get_object(Bucket=w.bucket, Key=_handover(cid) + "request.json")["Body"].read())
    key = json.loads(s3.get_object(Bucket=w.bucket, Key=_handover(cid) + "key.json")["Body"].read())["end_key"]
    token = json.loads(s3.get_object(Bucket=w.bucket, Key=_handover(cid) + "token.json")["Body"].read())
    s3.put_object(Bucket=w.bucket, Key=_raw(cid) + "profile_export_aiperf.json", Body=b"{}")
    body = json.dumps({"exit_code": 0, "ended_at": 1, "step": STEP}).encode()
    s3.put_object(Bucket=w.bucket, Key=_handover(cid) + "end.json", Body=sign_end(body, key))
    return {"inputs": inputs, "request": request, "key": key, "token": token["token"]}


@pytest.mark.parametrize(("me", "other"), [(A, B), (B, A)], ids=["A->B", "B->A"])
def test_a_campaigns_runner_does_its_own_step_and_nothing_to_another_campaigns(world: World, me: str,
                                                                               other: str) -> None:
    from benchctl.aws.eks_load import EksLoad
    from benchctl.aws.s3 import S3RunStore
    from benchctl.constants import runner_prefix

    w = world
    before = len(w.enforcement.denied)
    own = _own_step(w, me)  # everything its own step needs is allowed
    assert own["inputs"] == [f"{me}\n".encode()] and own["key"] == w.keys[me]
    assert own["token"] == f"token-of-{me}"
    assert w.enforcement.denied[before:] == []
    # the Load function reads the end record it wrote as the step's end (signed with the step's key)
    load = EksLoad(lambda: None, lambda: None, me, control=S3RunStore(w.bucket, runner_prefix(me),  # type: ignore[arg-type]
                                                                          session=w.sessions["load-function"]),
                   region=REGION)
    assert load.end_record(EXP, STEP) == {"exit_code": 0, "ended_at": 1, "step": STEP}

    s3 = w.s3(f"runner-{me}")
    theirs = {"input": _raw(other) + "inputs/inputs.jsonl", "artifact": _raw(other) + "profile_export_aiperf.json",
              "request": _handover(other) + "request.json", "key": _handover(other) + "key.json",
              "task token": _handover(other) + "token.json",
              "end record": _handover(other) + "end.json"}
    _own_step(w, other)  # the other campaign's artifact and end record exist too
    for what, key in theirs.items():
        assert _denied(lambda k=key: s3.get_object(Bucket=w.bucket, Key=k)) == ("AccessDenied", 403), what
        assert _denied(lambda k=key: s3.put_object(Bucket=w.bucket, Key=k, Body=b"forged")) == ("AccessDenied", 403), what
    assert _denied(lambda: s3.list_objects_v2(Bucket=w.bucket, Prefix=_raw(other) + "inputs/")) == ("AccessDenied", 403)
    assert _denied(lambda: s3.list_objects_v2(Bucket=w.bucket, Prefix=f"runner/{other}/")) == ("AccessDenied", 403)
    # its own hand-over: it writes only its end record, never its request, key or token; never the run store
    for key in (_handover(me) + "request.json", _handover(me) + "key.json", _handover(me) + "token.json",
                f"runs/{me}/loads/runner/x.json"):
        assert _denied(lambda k=key: s3.put_object(Bucket=w.bucket, Key=k, Body=b"{}")) == ("AccessDenied", 403), key
    # the other campaign's keys are intact: its request, token and end record are what it wrote
    admin = w.s3("admin")
    assert json.loads(admin.get_object(Bucket=w.bucket, Key=theirs["key"])["Body"].read())["end_key"] == w.keys[other]
    assert json.loads(admin.get_object(Bucket=w.bucket, Key=theirs["task token"])["Body"].read())["token"] == \
        f"token-of-{other}"


@pytest.mark.parametrize(("me", "other"), [(A, B), (B, A)], ids=["A->B", "B->A"])
def test_a_guessed_key_of_another_campaign_is_refused_alike_whether_it_exists_or_not(world: World, me: str,
                                                                                    other: str) -> None:
    """No 403-vs-404 (or 200) oracle for campaign ids: another campaign's existing and missing keys, and a
    campaign that never ran, all answer AccessDenied (GET and HEAD)."""
    w = world
    s3 = w.s3(f"runner-{me}")
    guesses = [_handover(other) + "request.json",  # exists
               _handover(other) + "nothing.json",  # does not
               _handover("seed-plan-20261201-101502") + "request.json",  # a campaign that never ran
               _raw(other) + "inputs/inputs.jsonl", _raw(other) + "inputs/missing.jsonl"]
    answers = {key: (_denied(lambda k=key: s3.get_object(Bucket=w.bucket, Key=k)),
                     _denied(lambda k=key: s3.head_object(Bucket=w.bucket, Key=k))) for key in guesses}
    assert set(answers.values()) == {(("AccessDenied", 403), ("403", 403))}, answers


def test_a_session_without_pod_identitys_tags_names_no_object(world: World) -> None:
    """The role assumed without EKS Pod Identity's session tags (the policy variable has no value): its
    object statements match nothing, not even a campaign's own keys."""
    s3 = world.s3("runner-untagged")
    for key in (_handover(A) + "request.json", _raw(A) + "inputs/inputs.jsonl"):
        assert _denied(lambda k=key: s3.get_object(Bucket=world.bucket, Key=k)) == ("AccessDenied", 403)
    assert _denied(lambda: s3.list_objects_v2(Bucket=world.bucket, Prefix=_raw(A) + "inputs/")) == ("AccessDenied", 403)


def test_a_forged_end_record_is_refused_by_the_load_function_by_name(world: World) -> None:
    """An end record in a campaign's hand-over that the step's key did not sign (someone who can write there
    without having read the request) is EndRecordForged, not the step's end."""
    from benchctl.aws.eks_load import EksLoad, sign_end
    from benchctl.aws.s3 import S3RunStore
    from benchctl.constants import runner_prefix
    from benchctl.errors import EndRecordForged

    w = world
    w.s3("admin").put_object(Bucket=w.bucket, Key=_handover(A) + "end.json", Body=sign_end(
        json.dumps({"exit_code": 0, "ended_at": 1, "step": STEP}).encode(), secrets.token_hex(32)))
    load = EksLoad(lambda: None, lambda: None, A, control=S3RunStore(w.bucket, runner_prefix(A),  # type: ignore[arg-type]
                                                                     session=w.sessions["load-function"]), region=REGION)
    with pytest.raises(EndRecordForged, match=rf"runner/{A}/{EXP}/{STEP}/end.json: .*forged"):
        load.end_record(EXP, STEP)


@pytest.mark.parametrize(("change", "admitted"), [
    ({}, True), ({"cluster": "arn:aws:eks:us-east-1:123456789012:cluster/other"}, False),
    ({"namespace": "default"}, False), ({"account": "210987654321"}, False)])
def test_the_roles_trust_admits_only_pod_identity_of_this_account_cluster_and_namespace(
        templates: dict[str, JSON], change: dict[str, str], admitted: bool) -> None:
    t = {k: v for k, v in templates.items() if not k.startswith("_")}
    rid = function_roles(t, CP)["runner"]
    trust = Resolver(t).resolve(t[CP]["Resources"][rid]["Properties"]["AssumeRolePolicyDocument"], CP)
    tags = pod_identity_tags(change.get("cluster", CLUSTER_ARN), change.get("namespace", NS), A)
    assert trust_admits(trust, "pods.eks.amazonaws.com", tags, change.get("account", ACCOUNT)) is admitted
    with contextlib.suppress(KeyError):
        assert not trust_admits(trust, "lambda.amazonaws.com", tags, ACCOUNT)  # no other service
