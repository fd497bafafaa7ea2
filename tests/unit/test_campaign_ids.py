"""A campaign id names exactly one campaign, in exactly one spelling.

Every entry checks it with ``benchctl.campaign.context.check_campaign_id`` (never rewritten into the normal form:
``Seed_Plan-1`` is refused, not taken as ``seed-plan-1``); locally ``benchctl run --campaign-id`` is refused
before anything is made. On AWS the entry states claim the id for their execution with a create-only write
(``claim.json``, S3 ``If-None-Match: *`` on moto, which answers 412 like S3): another execution with the same
id fails Plan with ``CampaignIdInUse`` and touches nothing of that campaign (no spec, lock, pool record,
failure record, preflight Job); a redelivery of the same execution goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from benchctl.aws.s3 import S3RunStore
from benchctl.campaign.context import StartInput, check_campaign_id, start_context
from benchctl.cli.main import main
from benchctl.local.runstore import LocalRunStore
from tests.unit.test_aws_start import BUCKET, _eks_smoke_spec, _scaling, aws, cluster  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
EXEC_A = "arn:aws:states:us-east-1:123456789012:execution:campaign:first"
EXEC_B = "arn:aws:states:us-east-1:123456789012:execution:campaign:second"
HOSTILE_IDS = ["../../x", "..", ".", "a/b", "Seed_Plan-1", "seed_plan-1", "SEED-PLAN-1", "-seed", "seed-", "",
               "a" * 81, "seed plan", "séed", "seed\n1", "a.b", "/abs"]


@pytest.mark.parametrize("cid", HOSTILE_IDS)
def test_an_id_not_in_its_normal_form_is_refused_never_rewritten(cid):
    with pytest.raises(ValueError, match=r"--campaign-id: .* is not a campaign id: use lowercase letters"):
        check_campaign_id(cid, "--campaign-id")
    with pytest.raises(ValueError, match=r"execution input 'campaign_id'"):
        StartInput.parse({"spec_uri": "s3://b/specs/x.yaml", "campaign_id": cid})


@pytest.mark.parametrize("cid", ["seed-plan-1", "a", "0", "seed-plan-20261201-101500", "a" * 80, "x--y"])
def test_an_id_in_its_normal_form_is_kept_as_it_is(cid):
    assert check_campaign_id(cid, "here") == cid
    assert StartInput.parse({"spec_uri": "s3://b/s.yaml", "campaign_id": cid}).campaign_id == cid


def test_an_execution_name_is_the_id_only_in_its_normal_form():
    inp = StartInput.parse({"spec_uri": "s3://b/s.yaml"})
    ok = start_context(inp, "arn:aws:states:r:1:execution:campaign:seed-plan-1", runs_uri="s3://b/runs",
                       lake_uri="s3://b/lake")
    assert ok.campaign_id == "seed-plan-1" and ok.run_uri == "s3://b/runs/seed-plan-1"
    # formerly lowercased to seed-plan-1: the same campaign under a second spelling
    with pytest.raises(ValueError, match=r"execution name .*'Seed_Plan-1' is not a campaign id"):
        start_context(inp, "arn:aws:states:r:1:execution:campaign:Seed_Plan-1", runs_uri="s3://b/runs",
                      lake_uri="s3://b/lake")


@pytest.mark.parametrize("cid", ["../../x", "Seed_Plan-1", "a/b", "-x"])
def test_run_refuses_a_campaign_id_not_in_its_normal_form_before_anything_is_made(tmp_path, capsys, cid):
    out = tmp_path / "ws" / "runs"
    assert main(["run", str(ROOT / "examples" / "smoke.yaml"), "--out", str(out), f"--campaign-id={cid}"]) == 2
    assert f"--campaign-id: {cid!r} is not a campaign id" in capsys.readouterr().err
    assert list(tmp_path.rglob("*")) == []  # not the workspace, not ../../x beside it


def test_render_refuses_a_campaign_id_not_in_its_normal_form(tmp_path, capsys):
    assert main(["render", str(ROOT / "examples" / "smoke.yaml"), "--out", str(tmp_path / "r"),
                 "--campaign-id", "../x"]) == 2
    assert "is not a campaign id" in capsys.readouterr().err
    assert list(tmp_path.rglob("*")) == []


def test_start_refuses_a_campaign_id_not_in_its_normal_form_before_uploading(aws, capsys):  # noqa: F811
    assert main(["start", "examples/seed-plan.yaml", "--bucket", BUCKET, "--state-machine-arn", aws,
                 "--campaign-id", "Seed_Plan-1"]) == 2
    assert "is not a campaign id" in capsys.readouterr().err
    assert boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


# ---------------------------------------------------------------------------------------- create-only


def test_a_local_create_only_write_keeps_the_first_and_leaves_no_temporary_file(tmp_path):
    store = LocalRunStore(tmp_path / "c")
    assert store.create_json("claim.json", {"execution": "a"}) is None
    assert store.create_json("claim.json", {"execution": "b"}) == {"execution": "a"}
    assert store.read_json("claim.json") == {"execution": "a"}
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["claim.json"]


def test_an_s3_create_only_write_is_a_conditional_put_that_keeps_the_first():
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bench-runs")
        store = S3RunStore("bench-runs", "runs/c", session=boto3.session.Session(region_name="us-east-1"))
        assert store.create_json("claim.json", {"execution": "a"}) is None
        assert store.create_json("claim.json", {"execution": "b"}) == {"execution": "a"}
        assert store.read_json("claim.json") == {"execution": "a"}


# ---------------------------------------------------------------------------------------- Plan on AWS


def _bucket() -> dict[str, bytes]:
    s3 = boto3.client("s3")
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def _locks() -> list[dict]:
    return sorted(boto3.client("dynamodb").scan(TableName="locks")["Items"], key=lambda i: i["pool"]["S"])


@pytest.fixture
def locked(cluster, monkeypatch):  # noqa: F811
    """The cluster of test_aws_start with the deployment's pool-lock table (moto DynamoDB)."""
    boto3.client("dynamodb").create_table(
        TableName="locks", KeySchema=[{"AttributeName": "pool", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pool", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    monkeypatch.setenv("BENCHCTL_LOCK_TABLE", "locks")
    from lambdas._runtime import use_engine

    use_engine(None)  # the AWS providers, built from the environment
    yield cluster


def _plan(execution: str, spec_key: str, cid: str = "shared-1") -> dict:
    from lambdas import plan as plan_handler

    return plan_handler.handler({"action": "plan", "state": "Plan", "execution": execution,
                                 "input": {"spec_uri": f"s3://{BUCKET}/{spec_key}", "campaign_id": cid}})


def test_a_reused_campaign_id_fails_plan_with_campaign_id_in_use_and_touches_nothing(locked, capsys):
    from lambdas import teardown as teardown_handler

    s3 = boto3.client("s3")
    s3.put_object(Bucket=BUCKET, Key="specs/a.yaml", Body=_eks_smoke_spec())
    other = yaml.safe_load(_eks_smoke_spec())
    other["name"] = "intruder"
    s3.put_object(Bucket=BUCKET, Key="specs/b.yaml", Body=yaml.safe_dump(other).encode())
    first = _plan(EXEC_A, "specs/a.yaml")
    claim = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/shared-1/claim.json")["Body"].read())
    assert claim["execution"] == EXEC_A
    objects, locks, jobs = _bucket(), _locks(), len(locked.bodies)
    assert locks and all(i["campaign_id"]["S"] == "shared-1" for i in locks)
    capsys.readouterr()

    # Another execution with the same id: a named error, nothing of the first campaign read into it or changed
    with pytest.raises(Exception, match=r"campaign id 'shared-1' belongs to execution .*:first") as err:
        _plan(EXEC_B, "specs/b.yaml")
    assert type(err.value).__name__ == "CampaignIdInUse"
    assert _bucket() == objects  # no spec overwritten, no failure record, no lake row
    assert _locks() == locks  # no lock taken re-entrantly, none released
    assert len(locked.bodies) == jobs  # no preflight Job, no Kubernetes call that changes anything
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [(m["state"], m["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]) for m in emf] == [
        ("Plan", "TaskFailed")]

    # RecordPlanFailure of that execution (should it run: the ASL ends it in a Fail state first) touches nothing,
    # whatever error it is handed: its own claim fails, so the first campaign's locks stay held
    for error in ({"Error": "CampaignIdInUse", "Cause": "x"}, {"Error": "SpecError", "Cause": "x"}):
        with pytest.raises(Exception, match="belongs to execution") as err:
            teardown_handler.handler({"action": "plan_failed", "state": "RecordPlanFailure", "execution": EXEC_B,
                                      "input": {"spec_uri": f"s3://{BUCKET}/specs/b.yaml", "campaign_id": "shared-1"},
                                      "error": error})
        assert type(err.value).__name__ == "CampaignIdInUse"
    assert _bucket() == objects and _locks() == locks

    # A redelivery of the first execution's Plan goes on, with its own spec
    again = _plan(EXEC_A, "specs/a.yaml")
    assert again == first
    spec = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/shared-1/spec.json")["Body"].read())
    assert spec["name"] == "smoke"
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/shared-1/claim.json")["Body"].read()) == claim


def test_a_campaign_from_before_claims_is_its_recorded_executions(locked):
    """A run store with a campaign record and no claim (written before claims existed): another execution is
    refused by reading only; the one the record names claims it and goes on."""
    s3 = boto3.client("s3")
    s3.put_object(Bucket=BUCKET, Key="specs/a.yaml", Body=_eks_smoke_spec())
    s3.put_object(Bucket=BUCKET, Key="runs/old-1/campaign.json",
                  Body=json.dumps({"campaign_id": "old-1", "execution": EXEC_A, "status": "succeeded"}).encode())
    with pytest.raises(Exception, match="belongs to execution") as err:
        _plan(EXEC_B, "specs/a.yaml", cid="old-1")
    assert type(err.value).__name__ == "CampaignIdInUse"
    assert sorted(_bucket()) == ["runs/old-1/campaign.json", "specs/a.yaml"] and _locks() == []
    _plan(EXEC_A, "specs/a.yaml", cid="old-1")
    assert "runs/old-1/claim.json" in _bucket()


# ---------------------------------------------------------------------------------------- the local sweeper


def test_local_sweep_goes_on_past_a_campaign_it_cannot_read_and_exits_1(tmp_path, capsys):
    """`benchctl sweep`: the first campaign's plan record is broken; the one after it is still looked at
    (before, the sweep ended at the first), the broken one is named on stderr, the exit status is 1. (The AWS
    sweeper's test, test_aws_sweep.py, shows the campaigns after a broken one torn down.)"""
    import json as _json

    out = tmp_path / "runs"
    (out / "campaigns" / "a-broken").mkdir(parents=True)
    (out / "campaigns" / "a-broken" / "plan.json").write_text('{"experiments": [')
    (out / "campaigns" / "b-ended").mkdir(parents=True)
    (out / "campaigns" / "b-ended" / "result.json").write_text(_json.dumps({"status": "FAILED"}))
    assert main(["sweep", "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert "a-broken: failed" in cap.out and "b-ended: nothing left" in cap.out
    assert "a-broken: not swept: JSONDecodeError" in cap.err


def test_start_with_an_existing_campaigns_id_replaces_nothing_and_starts_nothing(aws, capsys):  # noqa: F811
    s3, sfn = boto3.client("s3"), boto3.client("stepfunctions")
    assert main(["start", "examples/seed-plan.yaml", "--bucket", BUCKET, "--state-machine-arn", aws,
                 "--campaign-id", "seed-1"]) == 0
    before = s3.get_object(Bucket=BUCKET, Key="specs/seed-1.yaml")["Body"].read()
    capsys.readouterr()
    # its spec is there: the conditional write is refused
    assert main(["start", "examples/smoke.yaml", "--bucket", BUCKET, "--state-machine-arn", aws,
                 "--campaign-id", "seed-1"]) == 2
    assert "campaign id 'seed-1' is in use (s3://bench-results/specs/seed-1.yaml exists)" in capsys.readouterr().err
    assert s3.get_object(Bucket=BUCKET, Key="specs/seed-1.yaml")["Body"].read() == before
    # its run store is claimed (its Plan ran): refused before anything is written (the claim is read first)
    s3.put_object(Bucket=BUCKET, Key="runs/seed-1/claim.json", Body=b'{"execution": "x"}')
    s3.delete_object(Bucket=BUCKET, Key="specs/seed-1.yaml")
    assert main(["start", "examples/seed-plan.yaml", "--bucket", BUCKET, "--state-machine-arn", aws,
                 "--campaign-id", "seed-1"]) == 2
    assert "runs/seed-1 is claimed by an execution" in capsys.readouterr().err
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="specs/")
    assert len(sfn.list_executions(stateMachineArn=aws)["executions"]) == 1
