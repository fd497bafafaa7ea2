"""moto's IAM enforcement, held to IAM's own evaluation where a rehearsal relies on it.

moto enforces IAM in server mode once its ``INITIAL_NO_AUTH_ACTION_COUNT`` is used up
(``moto/core/authorization.py``; ``POST /moto-api/reset-auth`` sets it): every later request is signed by an
IAM user's or an assumed role's keys (checked: ``check_signature``) and checked against that identity's
policies (``moto/iam/access_control.py``). What moto's check does, and what :func:`iam_enforced` changes:

* **Which calls.** S3 names the resource of each call (``arn:aws:s3:::bucket`` for a bucket's calls,
  ``arn:aws:s3:::bucket/key`` for an object's; ``_authenticate_and_authorize_s3_action``); every other
  service is checked in ``BaseResponse.call_action`` against the resource ``"*"`` (only SQS, IAM and STS
  name theirs). moto then matches a statement's ``Resource`` against ``"*"`` literally, so a grant on a
  specific ARN never matches there. Here such a call is matched on its action alone, and recorded in
  ``Enforcement.unnamed`` (its resource is not checked: say so where it matters).
* **Conditions.** moto evaluates no condition of an identity policy (it passes none of the request's keys,
  and an unknown operator passes), and a statement whose condition fails is an explicit Deny there. Here
  the request's keys that our policies test are evaluated with IAM's rules (StringEquals/StringLike/Arn*
  and their Not/IfExists forms; all operators and keys of a block must hold, any value of a key; a key
  absent from the request fails a positive operator): ``s3:prefix`` (and ``s3:delimiter``, ``s3:max-keys``)
  of a ListObjects(V2) call, from its query. An operator outside that set fails the call and is recorded in
  ``Enforcement.problems``.
* **A missing key.** S3 answers a GET or HEAD of a missing key with 403 to a caller that may not
  ``s3:ListBucket`` the bucket, and with 404 only to one that may (S3 user guide, GetObject permissions);
  moto always answers 404. Here the 403 comes first, and a ListBucket grant conditioned on ``s3:prefix``
  does not count for it (a GET carries no ``s3:prefix``; S3 does not document either way: the stricter
  reading).

* **Signatures.** moto recomputes a request's signature over its parsed parameters when its body is empty,
  so a REST GET (EKS's DescribeCluster, ListClusters) never matches (``SignatureDoesNotMatch``); here it is
  recomputed over the body as it was sent, empty or not. A query-protocol POST (EC2's Describe* calls) reaches
  the check with its body already consumed by moto's parser: its form is re-encoded from the parsed
  parameters, in the order sent, as botocore encodes it (else every EC2 call fails ``AuthFailure``).

* **S3's action names.** moto 5.2.6 names an S3 call by its API operation (``HeadObject``, ``ListObjectsV2``)
  where IAM checks the action that operation needs (the S3 API reference's "Permissions" of each operation:
  ``s3:GetObject``, ``s3:ListBucket``); moto up to 5.2.5 named the action. Here the operation is mapped to its
  IAM action (:data:`S3_OPERATION_ACTIONS`), so either moto is held to IAM's names.

Everything else is moto's (the signature check itself, sessions, explicit Deny over Allow, STS
GetCallerIdentity always allowed). Every refusal is recorded in ``Enforcement.denied`` (principal, action,
resource).
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
# condition operators evaluated here (their ...IfExists forms too); Arn* compare as strings (a key's ARN)
_POSITIVE = {"StringEquals": False, "StringLike": True, "ArnEquals": True, "ArnLike": True,
             "StringEqualsIgnoreCase": False}
_NEGATIVE = {"StringNotEquals": False, "StringNotLike": True, "ArnNotEquals": True, "ArnNotLike": True,
             "StringNotEqualsIgnoreCase": False}


# S3 API operation -> the IAM action it needs (S3 API reference, each operation's "Permissions"); operations
# named by their action already (GetObject, PutObject, DeleteObject, ...) map to themselves
S3_OPERATION_ACTIONS = {
    "HeadObject": "GetObject", "GetObjectAttributes": "GetObject", "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket", "HeadBucket": "ListBucket", "ListObjectVersions": "ListBucketVersions",
    "CreateMultipartUpload": "PutObject", "UploadPart": "PutObject", "CompleteMultipartUpload": "PutObject",
    "CopyObject": "PutObject", "ListParts": "ListMultipartUploadParts",
    "ListMultipartUploads": "ListBucketMultipartUploads", "DeleteObjects": "DeleteObject",
    "ListBuckets": "ListAllMyBuckets",
}


def iam_action(action: str) -> str:
    """The IAM action of a call as moto names it (``s3:HeadObject`` -> ``s3:GetObject``)."""
    service, _, name = action.partition(":")
    return f"s3:{S3_OPERATION_ACTIONS.get(name, name)}" if service == "s3" else action


@dataclass
class Enforcement:
    url: str
    denied: list[tuple[str, str, str]] = field(default_factory=list)
    unnamed: set[str] = field(default_factory=set)  # actions checked without their resource (moto names none)
    problems: list[str] = field(default_factory=list)
    checked: list[tuple[str, str, str]] = field(default_factory=list)  # every call checked: (principal, action, resource)

    def set_free_requests(self, count: float) -> None:
        """``INITIAL_NO_AUTH_ACTION_COUNT`` of the running server (0: every request from now on is checked)."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset-auth", data=str(count).encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()


# A policy variable: ${key}, ${key, 'default'}; ${*}, ${?} and ${$} are the literal characters
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_UNRESOLVED = object()


def _pattern(text: str, variables: dict[str, str] | None) -> str | None:
    """``text`` as a regular expression: IAM's ``*`` (any run of characters) and ``?`` (one character), and, when
    ``variables`` is given (a 2012-10-17 policy), each policy variable replaced by the request's value of its key,
    matched literally (a ``*`` in a tag value is no wildcard: stricter than trusting it). None when a variable's
    key is not in the request and has no default: the element that holds it matches nothing (IAM User Guide,
    "IAM policy elements: Variables and tags": a missing key's variable makes the Resource element not match
    and the condition false)."""
    out, pos = [], 0
    for m in (_VARIABLE.finditer(text) if variables is not None else ()):
        out.append(_glob(text[pos:m.start()]))
        inner = m[1].strip()
        if inner in ("*", "?", "$"):
            out.append(re.escape(inner))
        else:
            key, _, default = inner.partition(",")
            value = variables.get(key.strip()) if variables is not None else None
            if value is None and default.strip():
                value = default.strip().strip("'")
            if value is None:
                return None
            out.append(re.escape(value))
        pos = m.end()
    out.append(_glob(text[pos:]))
    return "".join(out)


def _glob(text: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)


def _wildcard(pattern: str, value: str, *, ignore_case: bool = False, variables: dict[str, str] | None = None) -> bool:
    """IAM's ``*`` and ``?`` (and policy variables: :func:`_pattern`)."""
    rx = _pattern(pattern, variables)
    return rx is not None and re.fullmatch(rx, value, flags=re.IGNORECASE | re.DOTALL if ignore_case
                                           else re.DOTALL) is not None


def _equals(pattern: str, value: str, *, ignore_case: bool, variables: dict[str, str] | None) -> bool:
    """A StringEquals-like comparison: no wildcards, but policy variables substituted."""
    if variables is not None and _VARIABLE.search(pattern):
        rx = _pattern(pattern.replace("*", "${*}").replace("?", "${?}"), variables)
        return rx is not None and re.fullmatch(rx, value, flags=re.IGNORECASE if ignore_case else 0) is not None
    return pattern.lower() == value.lower() if ignore_case else pattern == value


def _listed(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _condition_holds(block: JSON, context: dict[str, str], problems: list[str],
                     variables: dict[str, str] | None = None) -> bool:
    for op, keys in block.items():
        base, if_exists = (op[: -len("IfExists")], True) if op.endswith("IfExists") else (op, False)
        if base not in _POSITIVE and base not in _NEGATIVE:
            problems.append(f"condition operator {op} is not evaluated by this rehearsal")
            return False
        like = {**_POSITIVE, **_NEGATIVE}[base]
        nocase = base.endswith("IgnoreCase")
        for key, values in keys.items():
            actual = context.get(key)
            if actual is None:  # the request does not carry the key
                if base in _NEGATIVE or if_exists:
                    continue
                return False
            hit = any(_wildcard(str(v), actual, ignore_case=nocase, variables=variables) if like
                      else _equals(str(v), actual, ignore_case=nocase, variables=variables) for v in _listed(values))
            if hit == (base in _NEGATIVE):
                return False
    return True


def evaluate(documents: list[JSON], action: str, resource: str, context: dict[str, str],
             problems: list[str] | None = None) -> str | None:
    """IAM's decision for one request over identity policies: "Deny" (an explicit Deny applies), "Allow"
    (an Allow applies, no Deny does) or None (implicitly denied). ``resource`` "*": unknown (see above)."""
    problems = problems if problems is not None else []
    allowed = False
    for doc in documents:
        # policy variables are variables only in a 2012-10-17 policy (literal text in 2008-10-17's)
        variables = context if doc.get("Version") == "2012-10-17" else None
        for st in _listed(doc.get("Statement", [])):
            if "Action" in st:
                acts = any(_wildcard(a, action, ignore_case=True) for a in _listed(st["Action"]))
            else:
                acts = not any(_wildcard(a, action, ignore_case=True) for a in _listed(st.get("NotAction", [])))
            if not acts:
                continue
            if resource != "*":
                if "Resource" in st:
                    hits = any(_wildcard(r, resource, variables=variables) for r in _listed(st["Resource"]))
                else:
                    hits = not any(_wildcard(r, resource, variables=variables)
                                   for r in _listed(st.get("NotResource", [])))
                if not hits:
                    continue
            if not _condition_holds(st.get("Condition") or {}, context, problems, variables):
                continue
            if st.get("Effect") == "Deny":
                return "Deny"
            allowed = True
    return "Allow" if allowed else None


def _request_context(action: str, path: str) -> dict[str, str]:
    """The condition keys of a request that our policies test: a listing's ``s3:prefix`` and friends."""
    if action != "s3:ListBucket":
        return {}
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query, keep_blank_values=True)
    return {f"s3:{k}": v[0] for k, v in query.items() if k in ("prefix", "delimiter", "max-keys")}


def _missing_object(account_id: str, resource: str) -> bool:
    from moto.s3.models import s3_backends

    bucket, _, key = resource.removeprefix("arn:aws:s3:::").partition("/")
    try:
        return s3_backends[account_id]["aws"].get_object(bucket, key) is None
    except Exception:  # no such bucket: S3's own error follows
        return False


@contextlib.contextmanager
def iam_enforced(url: str) -> Iterator[Enforcement]:
    """moto's server at ``url`` (in this process) checks every request from now on, as described above;
    both undone on exit."""
    from moto.iam import access_control as ac

    enforcement = Enforcement(url)
    original = ac.IAMRequestBase.check_action_permitted

    def check_action_permitted(self: Any, resource: str) -> None:
        self._action = iam_action(self._action)
        if self._action == "sts:GetCallerIdentity" or self._action.startswith("sts:AssumeRole"):
            original(self, resource)  # moto's own rules (GetCallerIdentity always; a role's trust policy)
            return
        documents = [ac.IAMPolicy(p)._policy_json for p in self._access_key.collect_policies()]
        who = self._access_key.arn
        enforcement.checked.append((who, self._action, resource))
        if resource == "*":
            enforcement.unnamed.add(self._action)
        context = {**_request_context(self._action, self._path),
                   **principal_tags(getattr(self._access_key, "_access_key_id", ""))}
        decision = evaluate(documents, self._action, resource, context, enforcement.problems)
        if decision != "Allow":
            enforcement.denied.append((who, self._action, resource))
            self._raise_access_denied()
        if self._action == "s3:GetObject" and _missing_object(self.account_id, resource):
            bucket = resource.removeprefix("arn:aws:s3:::").split("/")[0]
            tags = principal_tags(getattr(self._access_key, "_access_key_id", ""))
            if evaluate(documents, "s3:ListBucket", f"arn:aws:s3:::{bucket}", tags, enforcement.problems) != "Allow":
                enforcement.denied.append((who, "s3:ListBucket (a missing key's 404)", f"arn:aws:s3:::{bucket}"))
                self._raise_access_denied()

    original_request = ac.IAMRequestBase._create_aws_request

    def create_aws_request(self: Any) -> Any:
        request = original_request(self)
        if isinstance(self._body, bytes | bytearray):  # what was signed: the body as sent, even an empty one
            request.data = self._body
        form = str(self._headers.get("Content-Type", "")).startswith("application/x-www-form-urlencoded")
        if not self._body and form and isinstance(self._data, dict) and self._data:
            # a query-protocol POST (EC2) whose body moto's parser consumed: its parameters, in the order sent,
            # encoded as botocore encoded them
            from botocore.utils import percent_encode_sequence

            request.data = percent_encode_sequence(
                [(k, v) for k, values in self._data.items() for v in (values if isinstance(values, list) else [values])])
        return request

    ac.IAMRequestBase.check_action_permitted = check_action_permitted  # type: ignore[method-assign]
    ac.IAMRequestBase._create_aws_request = create_aws_request  # type: ignore[method-assign]
    try:
        enforcement.set_free_requests(0)
        yield enforcement
    finally:
        with contextlib.suppress(Exception):
            enforcement.set_free_requests(float("inf"))
        ac.IAMRequestBase.check_action_permitted = original  # type: ignore[method-assign]
        ac.IAMRequestBase._create_aws_request = original_request  # type: ignore[method-assign]


def role_documents(templates: dict[str, JSON], template: str, role_id: str) -> list[JSON]:
    """Every identity policy document of one synthesized role (its inline policies and the
    AWS::IAM::Policy resources attached to it), intrinsics resolved (tests/infra/cfn_resolve.py)."""
    from tests.infra.cfn_resolve import Resolver

    t, r = templates[template], Resolver(templates)
    role = t["Resources"][role_id]
    docs = [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
    for res in t["Resources"].values():
        if res["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in res["Properties"].get("Roles", []):
            docs.append(res["Properties"]["PolicyDocument"])
    out = [r.resolve(d, template) for d in docs]
    assert out, f"{template}: role {role_id} has no identity policy"
    return json.loads(json.dumps(out))


def fresh_account(url: str) -> None:
    """Empty every backend of moto's server at ``url`` (they live in this process: another module's server
    shares them)."""
    with urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30) as r:
        r.read()


def function_roles(templates: dict[str, JSON], template: str) -> dict[str, str]:
    """Who acts with which synthesized role: each function's handler -> its role's logical id, and "runner"
    -> the role the load Jobs get through EKS Pod Identity (the one role that trusts pods.eks.amazonaws.com;
    each campaign's association with it is made at run time: benchctl.aws.runner_identity)."""
    out = {}
    for rid, res in templates[template]["Resources"].items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::Lambda::Function":
            out[props["Handler"]] = props["Role"]["Fn::GetAtt"][0]
        if res["Type"] == "AWS::IAM::Role" and "pods.eks.amazonaws.com" in json.dumps(props["AssumeRolePolicyDocument"]):
            assert "runner" not in out, f"{template}: more than one role trusts EKS Pod Identity"
            out["runner"] = rid
    return out


# the session tags of each assumed role's session (moto keeps none): access key id -> aws:PrincipalTag/<key>
_SESSION_TAGS: dict[str, dict[str, str]] = {}


def principal_tags(access_key_id: str) -> dict[str, str]:
    """The ``aws:PrincipalTag/<key>`` condition keys of the session with this access key (none: no tags)."""
    return {f"aws:PrincipalTag/{k}": v for k, v in _SESSION_TAGS.get(access_key_id, {}).items()}


def pod_identity_tags(cluster_arn: str, namespace: str, service_account: str, pod: str = "pod-0") -> dict[str, str]:
    """The session tags EKS Pod Identity passes when it assumes a role for a pod (EKS user guide, pod-id-abac:
    "List of session tags added by EKS Pod Identity")."""
    return {"eks-cluster-arn": cluster_arn, "eks-cluster-name": cluster_arn.rsplit("/", 1)[-1],
            "kubernetes-namespace": namespace, "kubernetes-service-account": service_account,
            "kubernetes-pod-name": pod, "kubernetes-pod-uid": f"uid-{pod}"}


def trust_admits(trust: JSON, service: str, tags: dict[str, str], source_account: str) -> bool:
    """Whether a role's trust policy lets ``service`` assume it with these session tags (sts:AssumeRole and
    sts:TagSession, each with ``aws:RequestTag/<key>`` and ``aws:SourceAccount`` in the request), as IAM
    decides a role trust policy: a statement naming that service principal, its conditions held."""
    context = {**{f"aws:RequestTag/{k}": v for k, v in tags.items()}, "aws:SourceAccount": source_account}
    for action in ("sts:AssumeRole", "sts:TagSession"):
        docs = [{**trust, "Statement": [st for st in _listed(trust.get("Statement", []))
                                        if service in _listed((st.get("Principal") or {}).get("Service", []))]}]
        if evaluate(docs, action, "*", context) != "Allow":
            return False
    return True


def assume(sts: Any, role_arn: str, session_name: str, tags: dict[str, str] | None = None) -> dict[str, str]:
    """One session of a role (``sts`` of a caller that may assume it), its ``tags`` kept for
    :func:`principal_tags`: its keys as a process environment gets them."""
    c = sts.assume_role(RoleArn=role_arn, RoleSessionName=session_name.replace(".", "-")[:64])["Credentials"]
    if tags:
        _SESSION_TAGS[c["AccessKeyId"]] = dict(tags)
    return {"AWS_ACCESS_KEY_ID": c["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": c["SecretAccessKey"],
            "AWS_SESSION_TOKEN": c["SessionToken"]}


def assume_as_service(role_arn: str, session_name: str, tags: dict[str, str], region: str = "us-east-1",
                      account_id: str = "123456789012") -> dict[str, str]:
    """A session of a role as an AWS service makes it for someone (EKS Pod Identity for a pod): in moto's
    STS backend of this process, no caller's request to authorize (IAM may be enforced meanwhile); its
    ``tags`` kept for :func:`principal_tags`. The role's trust is not evaluated here (:func:`trust_admits`)."""
    from moto.sts.models import sts_backends

    role = sts_backends[account_id]["aws"].assume_role(region_name=region, role_session_name=session_name,
                                                       role_arn=role_arn, policy=None, duration=3600,
                                                       external_id=None)
    _SESSION_TAGS[role.access_key_id] = dict(tags)
    return {"AWS_ACCESS_KEY_ID": role.access_key_id, "AWS_SECRET_ACCESS_KEY": role.secret_access_key,
            "AWS_SESSION_TOKEN": role.session_token}


def assume_roles(iam: Any, sts: Any, roles: dict[str, tuple[JSON, list[JSON]]],
                 tags: dict[str, dict[str, str]] | None = None,
                 arns: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Create each role in moto (``name -> (trust policy, identity policies)``), before IAM is enforced, and
    assume it: its session's keys as a process environment gets them, per name; ``tags[name]``: the session's
    tags (what EKS Pod Identity passes: :func:`pod_identity_tags`), kept for :func:`principal_tags`; ``arns``
    (given): filled with each name's role ARN, for later sessions (:func:`assume`)."""
    out = {}
    made: dict[tuple[str, str], str] = {}
    for name, (trust, docs) in roles.items():
        key = (json.dumps(trust, sort_keys=True), json.dumps(docs, sort_keys=True))
        if key not in made:  # one role per distinct (trust, policies): sessions of one role differ by their tags
            role = f"rehearsal-{len(made)}-{name}".replace(".", "-")[:64]
            made[key] = iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
            for i, doc in enumerate(docs):
                iam.put_role_policy(RoleName=role, PolicyName=f"policy{i}", PolicyDocument=json.dumps(doc))
        arn = made[key]
        if arns is not None:
            arns[name] = arn
        out[name] = assume(sts, arn, name, (tags or {}).get(name))
    return out


def administrator(iam: Any) -> dict[str, str]:
    """An IAM user allowed everything, for a test's own set-up and reads once IAM is enforced."""
    iam.create_user(UserName="rehearsal-admin")
    iam.put_user_policy(UserName="rehearsal-admin", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="rehearsal-admin")["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
