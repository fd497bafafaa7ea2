"""The rehearsals' IAM evaluator (tests/fakes/moto_iam.py) on policy variables, held to the IAM User Guide
("IAM policy elements: Variables and tags"), never laxer: a variable takes the request's value of its key
(a session tag: aws:PrincipalTag/<key>), literally; a key the request lacks makes the element match nothing
(unless the variable gives a default); ${*}, ${?} and ${$} are those characters; in a 2008-10-17 policy a
variable is plain text."""

from __future__ import annotations

import pytest

from tests.fakes.moto_iam import evaluate

SA = "${aws:PrincipalTag/kubernetes-service-account}"


def _doc(resource: str, version: str = "2012-10-17", condition: dict | None = None) -> dict:
    st = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": resource}
    if condition:
        st["Condition"] = condition
    return {"Version": version, "Statement": [st]}


def _tags(sa: str) -> dict[str, str]:
    return {"aws:PrincipalTag/kubernetes-service-account": sa}


@pytest.mark.parametrize(("resource", "tags", "decision"), [
    (f"arn:aws:s3:::b/runner/{SA}/*", _tags("a"), "Allow"),
    (f"arn:aws:s3:::b/runner/{SA}/*", _tags("b"), None),  # another campaign's session
    (f"arn:aws:s3:::b/runner/{SA}/*", {}, None),  # no such tag: the Resource matches nothing
    (f"arn:aws:s3:::b/runner/{SA}/*", _tags("*"), None),  # a tag value's '*' is no wildcard
    (f"arn:aws:s3:::b/runner/{SA}/*", _tags("a/x"), None),  # nor does a value reach into another key
    ("arn:aws:s3:::b/runner/${aws:PrincipalTag/missing, 'a'}/*", {}, "Allow"),  # the default
    ("arn:aws:s3:::b/runner/${*}/*", _tags("a"), None),  # a literal '*'
])
def test_a_policy_variable_takes_the_sessions_tag_literally(resource: str, tags: dict, decision: str | None) -> None:
    assert evaluate([_doc(resource)], "s3:GetObject", "arn:aws:s3:::b/runner/a/step/request.json", tags) == decision


def test_a_2008_policy_reads_a_variable_as_text() -> None:
    doc = _doc(f"arn:aws:s3:::b/runner/{SA}/*", version="2008-10-17")
    assert evaluate([doc], "s3:GetObject", "arn:aws:s3:::b/runner/a/x", _tags("a")) is None
    assert evaluate([doc], "s3:GetObject", f"arn:aws:s3:::b/runner/{SA}/x", _tags("a")) == "Allow"


@pytest.mark.parametrize(("op", "prefix", "decision"), [
    ("StringLike", "lake/raw/campaign_id=a/experiment=e/step_id=s/inputs/", "Allow"),
    ("StringLike", "lake/raw/campaign_id=b/experiment=e/step_id=s/inputs/", None),
    ("StringEquals", "lake/raw/campaign_id=a/", "Allow"),
    ("StringEquals", "lake/raw/campaign_id=b/", None),
])
def test_a_condition_value_takes_the_variable_too(op: str, prefix: str, decision: str | None) -> None:
    value = (f"lake/raw/campaign_id={SA}/experiment=*/step_id=*/inputs/" if op == "StringLike"
             else f"lake/raw/campaign_id={SA}/")
    doc = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket",
                                                   "Resource": "arn:aws:s3:::b", "Condition": {op: {"s3:prefix": value}}}]}
    assert evaluate([doc], "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": prefix, **_tags("a")}) == decision
