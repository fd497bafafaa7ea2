"""What the deployment itself must allow, named before anything is scaled (not a raw AccessDenied later):
node groups outside ``benchctl:nodegroups``, a missing Pod Identity Agent add-on, a mistyped spec URI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from moto import mock_aws

from benchctl.aws.preflight import deployment_preflight
from benchctl.aws.providers import read_s3_uri
from benchctl.spec.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def _spec(provider: str = "managed-nodegroup", nodegroup: str = "gpu-p4d") -> Any:
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    pool = data["pools"][0]
    pool["provider"] = provider
    if provider == "managed-nodegroup":
        pool["nodegroup"] = nodegroup
    else:
        pool.pop("nodegroup", None)
    return parse_spec(data)


class Eks:
    def __init__(self, code: str | None) -> None:
        self.code, self.calls = code, 0

    def describe_addon(self, **kw: Any) -> dict[str, Any]:
        self.calls += 1
        assert kw == {"clusterName": "bench", "addonName": "eks-pod-identity-agent"}
        if self.code:
            raise ClientError({"Error": {"Code": self.code, "Message": "x"}}, "DescribeAddon")
        return {"addon": {"addonName": "eks-pod-identity-agent", "status": "ACTIVE"}}


def test_a_node_group_the_stack_may_not_scale_is_named_with_the_configured_ones():
    env = ("gpu-g6e", "gpu-a100")  # LambdaEnv.nodegroups: the stack's benchctl:nodegroups
    (problem,) = deployment_preflight(_spec(nodegroup="gpu-p4d"), env, "bench", Eks(None))
    assert "node group 'gpu-p4d' is not one this deployment may scale" in problem
    assert "benchctl:nodegroups = ['gpu-g6e', 'gpu-a100']" in problem
    assert deployment_preflight(_spec(nodegroup="gpu-a100"), env, "bench", Eks(None)) == []


def test_the_pod_identity_agent_add_on_is_required_outside_auto_mode():
    env = ("gpu-p4d",)
    (problem,) = deployment_preflight(_spec(), env, "bench", Eks("ResourceNotFoundException"))
    assert "add-on eks-pod-identity-agent is not installed" in problem and "aws eks create-addon" in problem
    # an answer that cannot tell (no permission, an API that does not know) blocks nothing
    assert deployment_preflight(_spec(), env, "bench", Eks("AccessDeniedException")) == []
    auto = Eks("ResourceNotFoundException")
    assert deployment_preflight(_spec("auto-mode"), env, "bench", auto) == [] and auto.calls == 0  # built in


def test_a_mistyped_spec_uri_reads_as_no_such_spec_naming_those_there(monkeypatch: pytest.MonkeyPatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="bench-specs")
        s3.put_object(Bucket="bench-specs", Key="specs/seed-plan.yaml", Body=b"name: x\n")
        assert read_s3_uri("s3://bench-specs/specs/seed-plan.yaml") == b"name: x\n"
        with pytest.raises(FileNotFoundError, match=r"s3://bench-specs/specs/seed-plam.yaml: no such spec; under s3://bench-specs/specs/ "
                                                    r"there are: specs/seed-plan.yaml"):
            read_s3_uri("s3://bench-specs/specs/seed-plam.yaml")

        class Denied:  # what S3 answers a reader without s3:ListBucket (a 403, not a 404)
            def get_object(self, **kw: Any) -> Any:
                raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")

            def list_objects_v2(self, **kw: Any) -> Any:
                return s3.list_objects_v2(**kw)

        with pytest.raises(FileNotFoundError, match="no such spec"):
            read_s3_uri("s3://bench-specs/specs/nope.yaml", s3=Denied())
