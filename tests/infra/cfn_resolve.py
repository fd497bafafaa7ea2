"""Resolve CloudFormation intrinsics of a synthesized template into plain values, for linters that read
documents (parliament: IAM policies; statelint: the state machine definition). Pseudo parameters take
fixed test values; a resource's Ref/GetAtt takes the form AWS documents for that resource type, named
after its logical id; ``Fn::ImportValue`` follows the export into the other template."""

from __future__ import annotations

import json
from typing import Any

ACCOUNT, REGION, PARTITION = "123456789012", "us-east-1", "aws"
PSEUDO = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION,
          "AWS::URLSuffix": "amazonaws.com", "AWS::NoValue": None,
          "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/benchctl/0a1b2c3d-0000-4000-8000-000000000000",
          "AWS::StackName": "benchctl"}


def _arn(service: str, resource: str, *, region: str = REGION, account: str = ACCOUNT) -> str:
    return f"arn:{PARTITION}:{service}:{region}:{account}:{resource}"


def _ref(kind: str, lid: str) -> str:
    name = lid.lower()
    return {
        "AWS::S3::Bucket": f"bucket-{name}",
        "AWS::SNS::Topic": _arn("sns", lid),
        "AWS::StepFunctions::StateMachine": _arn("states", f"stateMachine:{lid}"),
        "AWS::DynamoDB::Table": lid,
        "AWS::Logs::LogGroup": f"/aws/lambda/{lid}",
        "AWS::Lambda::Function": lid,
        "AWS::IAM::Role": lid,
        "AWS::KMS::Key": "0a1b2c3d-1111-4000-8000-000000000000",
        "AWS::Lambda::LayerVersion": _arn("lambda", f"layer:{lid}:1"),
        "AWS::Athena::WorkGroup": lid,
        "AWS::Glue::Database": lid,
        "AWS::EC2::SecurityGroup": "sg-0123456789abcdef0",
    }.get(kind, lid)


def _getatt(kind: str, lid: str, attr: str) -> str:
    if attr == "Arn":
        return {
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::bucket-{lid.lower()}",
            "AWS::DynamoDB::Table": _arn("dynamodb", f"table/{lid}"),
            "AWS::Logs::LogGroup": _arn("logs", f"log-group:/aws/lambda/{lid}:*"),
            "AWS::Lambda::Function": _arn("lambda", f"function:{lid}"),
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{lid}",
            "AWS::KMS::Key": _arn("kms", "key/0a1b2c3d-1111-4000-8000-000000000000"),
            "AWS::SNS::Topic": _arn("sns", lid),
            "AWS::Events::Rule": _arn("events", f"rule/{lid}"),
            "AWS::StepFunctions::StateMachine": _arn("states", f"stateMachine:{lid}"),
            "AWS::SQS::Queue": _arn("sqs", lid),
        }[kind]
    if attr == "Name":
        return lid
    if attr == "GroupId":
        return "sg-0123456789abcdef0"
    raise KeyError(f"{kind} {lid}.{attr}")


class Resolver:
    def __init__(self, templates: dict[str, dict[str, Any]], region: str = REGION) -> None:
        self.templates = templates
        self.pseudo = {**PSEUDO, "AWS::Region": region}
        self.exports: dict[str, tuple[str, Any]] = {}
        for name, t in templates.items():
            for out in t.get("Outputs", {}).values():
                export = (out.get("Export") or {}).get("Name")
                if export:
                    self.exports[export if isinstance(export, str) else json.dumps(export)] = (name, out["Value"])

    def resolve(self, value: Any, template: str) -> Any:
        t = self.templates[template]
        if isinstance(value, list):
            return [self.resolve(v, template) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Ref":
                if arg in self.pseudo:
                    return self.pseudo[arg]
                if arg in t.get("Parameters", {}):
                    return t["Parameters"][arg].get("Default", arg)
                return _ref(t["Resources"][arg]["Type"], arg)
            if fn == "Fn::GetAtt":
                lid, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                return _getatt(t["Resources"][lid]["Type"], lid, attr)
            if fn == "Fn::Join":
                sep, parts = arg
                return sep.join(str(p) for p in self.resolve(parts, template))
            if fn == "Fn::Select":
                return self.resolve(arg[1], template)[int(arg[0])]
            if fn == "Fn::Split":
                return str(self.resolve(arg[1], template)).split(arg[0])
            if fn == "Fn::FindInMap":
                m, k1, k2 = (self.resolve(a, template) for a in arg)
                return t["Mappings"][m][k1][k2]
            if fn == "Fn::ImportValue":
                other, v = self.exports[self.resolve(arg, template)]
                return self.resolve(v, other)
            if fn == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1], template))
                import re

                def one(m: re.Match[str]) -> str:
                    key = m.group(1)
                    if key in names:
                        return str(names[key])
                    return str(self.resolve({"Ref": key} if "." not in key else {"Fn::GetAtt": key}, template))
                return re.sub(r"\$\{([^}!]+)\}", one, text)
        return {k: self.resolve(v, template) for k, v in value.items()}


def policy_documents(templates: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(template, logical id, kind of document, resolved document) of every policy document: identity
    policies (AWS::IAM::Policy, inline role policies), trust policies, and resource policies (bucket,
    topic, key)."""
    r = Resolver(templates)
    out = []
    for name, t in templates.items():
        for lid, res in t["Resources"].items():
            props, kind = res.get("Properties", {}), res["Type"]
            docs = []
            if kind == "AWS::IAM::Policy":
                docs.append(("identity", props["PolicyDocument"]))
            if kind == "AWS::IAM::Role":
                docs.append(("trust", props["AssumeRolePolicyDocument"]))
                docs += [("identity", p["PolicyDocument"]) for p in props.get("Policies", [])]
            if kind in ("AWS::S3::BucketPolicy", "AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy"):
                docs.append(("resource", props["PolicyDocument"]))
            if kind == "AWS::KMS::Key":
                docs.append(("resource", props["KeyPolicy"]))
            out += [(name, lid, what, r.resolve(doc, name)) for what, doc in docs]
    return out
