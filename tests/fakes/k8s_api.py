"""FakeKubeApi: an in-process Kubernetes API server (HTTP on 127.0.0.1) for the kinds benchctl uses.

It implements what our code relies on, not all of Kubernetes:

* create (POST) -> 409 AlreadyExists for an existing name; get/replace/patch/delete -> 404 when missing;
* list with label selectors ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k`` (comma-joined = AND);
* ``metadata.resourceVersion`` on every write, ``metadata.generation`` bumped when anything but
  metadata/status changes; PUT with a stale resourceVersion -> 409;
* ``status`` is never written by clients (dropped from create/replace/patch): tests set it with
  :meth:`set_status`, :meth:`put`, or hooks (:meth:`on_create`, :meth:`on_get`, :meth:`status_after_gets`);
* delete as Kubernetes does it (the docs' "Garbage Collection" and "Finalizers"; the apiserver's delete
  handler and the garbage collector): every deleted object gets a ``deletionTimestamp`` and stays visible
  (GET and list) while something holds it. ``propagationPolicy: Foreground`` (what our client sends)
  adds the ``foregroundDeletion`` finalizer: the owner stays until every dependent (ownerReferences uid)
  is gone, and the dependents are deleted the same way; ``Background`` (the default) removes the owner at
  once and its dependents on the next request; ``Orphan`` drops their owner reference. A pod is stopped
  gracefully: it stays terminating for ``grace`` more requests to the server (the kubelet's grace period;
  time here is requests, by anyone), so whatever reads after a delete reads lingering objects, under RBAC
  when enforced. ``delete_gets`` (per kind: :meth:`set_delete_gets`) adds a finalizer of the kind's own
  controller that holds the object for that many more requests once nothing else does. :meth:`settle`
  runs the world until nothing lingers;
* server-side dry run of a create (``dryRun=All``): RBAC, field validation, admission and AlreadyExists as for a
  create, nothing stored, no hook run; ``SelfSubjectAccessReview`` (any authenticated user, as the bootstrap
  ``system:basic-user`` role allows) answered by the same RBAC evaluation;
* bearer-token check (401 otherwise), pod logs (``/log`` with ``container`` and ``tailLines``), ``/version``;
* optionally RBAC as the API server does it (:meth:`enforce_rbac`: Roles, ClusterRoles and their
  bindings from a manifest file; the request's attributes derived like apiserver's RequestInfo, e.g. a
  namespace's own GET is authorized in that namespace; ``resourceNames`` never match create or list; a
  denied request is 403 Forbidden), recording which rule allowed each request (``authorized``);
* tokens of users in groups (:meth:`add_token`, as EKS access entries map roles to Kubernetes groups);
* optionally validating admission (:meth:`enforce_admission`): ValidatingAdmissionPolicies and their
  bindings evaluated with a CEL interpreter (tests/fakes/admission.py), a denial a 422 Invalid; a binding's
  parameter ConfigMap stored here is read at each request (the runner grants), else the one given to it;
* optionally strict field validation of created and replaced objects (:meth:`validate_with`): with
  ``fieldValidation=Strict`` in the query, a validator's problems are a 422 Invalid, as on a real server.

Every request is appended to ``requests`` as ``(method, path)`` (query included); deletions to ``deletes``;
the bodies of creates and replaces to ``bodies`` as ``(method, path, body)``.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from benchctl.aws.k8s.client import RESOURCES, Resource

JSON = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name
CreateHook = Callable[["FakeKubeApi", JSON], None]
GetHook = Callable[["FakeKubeApi", JSON, int], None]
Validator = Callable[[JSON], list[str]]


class RequestInfo:
    """What an authorizer sees of a request (k8s.io/apiserver pkg/endpoints/request/requestinfo.go)."""

    def __init__(self, method: str, parts: list[str]) -> None:
        self.resource_request = False
        self.verb = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        self.api_group = self.resource = self.subresource = self.name = self.namespace = ""
        self.path = "/" + "/".join(parts)
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            self.api_group, rest = parts[1], parts[3:]
        else:
            return  # a non-resource URL such as /version
        self.resource_request = True
        if rest[:1] == ["namespaces"] and len(rest) > 1:
            self.namespace = rest[1]
            if len(rest) > 2:  # else: the namespace object itself, authorized IN that namespace
                rest = rest[2:]
        self.resource = rest[0] if rest else ""
        self.name = rest[1] if len(rest) > 1 else ""
        self.subresource = rest[2] if len(rest) > 2 else ""
        if not self.name and self.verb == "get":
            self.verb = "list"

    def key(self) -> tuple[str, str, str]:
        return (self.verb, self.api_group, self.resource + (f"/{self.subresource}" if self.subresource else ""))


class Rbac:
    """Roles, ClusterRoles and their bindings (rbac.authorization.k8s.io/v1), evaluated like the RBAC
    authorizer: allowed when any rule of a role bound to one of the subject's groups matches."""

    def __init__(self, manifests: list[JSON]) -> None:
        self.roles: dict[tuple[str, str], list[JSON]] = {}  # (namespace or "", name) -> rules
        # (binding namespace or "" for cluster, role key, the groups it binds)
        self.bindings: list[tuple[str, tuple[str, str], frozenset[str]]] = []
        for doc in manifests:
            kind, meta = doc.get("kind"), doc.get("metadata") or {}
            if kind == "Role":
                self.roles[(meta["namespace"], meta["name"])] = list(doc.get("rules") or [])
            elif kind == "ClusterRole":
                self.roles[("", meta["name"])] = list(doc.get("rules") or [])
        for doc in manifests:
            kind, meta = doc.get("kind"), doc.get("metadata") or {}
            if kind not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            bound = frozenset(sub["name"] for sub in doc.get("subjects") or [] if sub.get("kind") == "Group")
            ref = doc["roleRef"]
            role_key = (meta["namespace"] if ref["kind"] == "Role" else "", ref["name"])
            self.bindings.append((meta.get("namespace", "") if kind == "RoleBinding" else "", role_key, bound))

    @staticmethod
    def _matches(rule: JSON, info: RequestInfo) -> bool:
        resource = info.resource + (f"/{info.subresource}" if info.subresource else "")
        names = rule.get("resourceNames") or []
        return (bool({"*", info.api_group} & set(rule.get("apiGroups") or []))
                and bool({"*", resource} & set(rule.get("resources") or []))
                and bool({"*", info.verb} & set(rule.get("verbs") or []))
                and (not names or (bool(info.name) and info.name in names)))

    def allowing_rule(self, info: RequestInfo, groups: frozenset[str]) -> tuple[tuple[str, str], int] | None:
        """(role key, rule index) of the first rule that allows ``info`` to a user in ``groups``; None: denied."""
        for binding_ns, role_key, bound in self.bindings:
            if not bound & groups:
                continue
            if binding_ns and binding_ns != info.namespace:
                continue  # a RoleBinding grants in its own namespace only
            for i, rule in enumerate(self.roles.get(role_key, [])):
                if self._matches(rule, info):
                    return role_key, i
        return None


class HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _selector(text: str) -> Callable[[dict[str, str]], bool]:
    terms: list[tuple[str, str, str]] = []  # (op, key, value)
    for term in filter(None, (t.strip() for t in text.split(","))):
        if " in " in term or " notin " in term or "(" in term:
            raise HttpError(400, "BadRequest", f"set-based selector {term!r} not supported by the fake")
        if "!=" in term:
            k, v = term.split("!=", 1)
            terms.append(("!=", k.strip(), v.strip()))
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            terms.append(("=", k.strip(), v.strip()))
        elif term.startswith("!"):
            terms.append(("!", term[1:].strip(), ""))
        else:
            terms.append(("exists", term, ""))

    def match(labels: dict[str, str]) -> bool:
        checks = {"!=": lambda k, v: labels.get(k) != v, "=": lambda k, v: labels.get(k) == v,
                  "!": lambda k, _: k not in labels, "exists": lambda k, _: k in labels}
        return all(checks[op](k, v) for op, k, v in terms)

    return match


def _spec_part(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class FakeKubeApi:
    def __init__(self, token: str = "test-token", *, grace: int = 6, delete_gets: int = 0) -> None:
        self.tokens = {token}
        # the groups of each token's user (as an EKS access entry's kubernetesGroups); others: default_groups
        self.token_groups: dict[str, frozenset[str]] = {}
        self.default_groups: frozenset[str] = frozenset({"benchctl"})
        self.admission: Any = None  # tests.fakes.admission.Admission when enforced
        self.refused: list[str] = []  # what admission refused
        self.admitted = 0  # writes the admission policies let through
        # (caller's groups, verb, API group, resource, namespace, name) of every resource request under RBAC
        self.calls: list[tuple[frozenset[str], str, str, str, str, str]] = []
        self.grace = grace
        self.delete_gets = delete_gets
        self.requests: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, JSON]] = []  # creates and replaces: (method, path with query, body)
        self.deletes: list[tuple[str, str, str, str | None]] = []  # kind, namespace, name, propagation
        self.rbac: Rbac | None = None
        # (role key, rule index, verb, resource, name) of every request RBAC allowed
        self.authorized: list[tuple[tuple[str, str], int, str, str, str]] = []
        self.denied: list[str] = []
        self.dry_runs: list[tuple[str, str, str]] = []  # (kind, namespace, name) of every dryRun=All create admitted
        # (groups, verb, API group, resource, namespace, name, allowed) of every SelfSubjectAccessReview
        self.reviews: list[tuple[tuple[str, ...], str, str, str, str, str, bool]] = []
        self.validators: dict[str, Validator] = {}
        self._objects: dict[Key, JSON] = {}
        self._logs: dict[tuple[str, str, str], str] = {}
        self._create_hooks: dict[str, list[CreateHook]] = {}
        self._get_hooks: dict[str, list[GetHook]] = {}
        self._get_counts: dict[Key, int] = {}
        self._delete_gets_by_kind: dict[str, int] = {}
        self._terminating: dict[Key, int] = {}  # key -> requests left before its kind's finalizer lets it go
        self._stopping: dict[Key, int] = {}  # pods -> requests left of their grace period
        self._orphaned: list[tuple[Key, str]] = []  # dependents the GC deletes on the next request (background)
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> FakeKubeApi:
        api = self

        class Handler(_Handler):
            fake = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None, "use FakeKubeApi as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ------------------------------------------------------------ test hooks

    def enforce_rbac(self, manifests: list[JSON], groups: set[str] | None = None) -> None:
        """Authorize every resource request as the RBAC authorizer would for the caller's groups (its
        token's, :meth:`add_token`; else ``groups``, default ``{"benchctl"}``), with the Roles/ClusterRoles/
        bindings in ``manifests``; non-resource URLs (``/version``) stay allowed (Kubernetes' default
        ``system:public-info-viewer``)."""
        self.rbac = Rbac(manifests)
        if groups is not None:
            self.default_groups = frozenset(groups)

    def add_token(self, token: str, groups: set[str] | frozenset[str]) -> None:
        """Accept ``token`` as a user in ``groups`` (what an access entry maps a role to)."""
        self.tokens.add(token)
        self.token_groups[token] = frozenset(groups)

    def enforce_admission(self, admission: Any) -> None:
        """Admit every create, update and delete through ``admission`` (tests.fakes.admission.Admission:
        ValidatingAdmissionPolicies and their bindings, evaluated with a CEL interpreter) after RBAC and
        strict validation, as the API server does; a denial is its 422 Invalid (or the policy's reason)."""
        self.admission = admission

    def groups_of(self, token: str) -> frozenset[str]:
        return self.token_groups.get(token, self.default_groups)

    def validate_with(self, kind: str, validator: Validator) -> None:
        """Creates and replaces of ``kind`` with ``fieldValidation=Strict`` must pass ``validator`` (422)."""
        self.validators[kind] = validator

    def put(self, obj: JSON) -> JSON:
        """Store ``obj`` as is (status included), filling metadata; replaces an existing one."""
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            r = RESOURCES[obj["kind"]]
            key = (r.kind, meta.get("namespace", "") if r.namespaced else "", meta["name"])
            old = self._objects.get(key)
            meta.setdefault("uid", old["metadata"]["uid"] if old else f"uid-{next(self._uid)}")
            meta.setdefault("creationTimestamp", _now())
            meta.setdefault("generation", old["metadata"].get("generation", 1) if old else 1)
            meta["resourceVersion"] = str(next(self._rv))
            self._objects[key] = obj
            return copy.deepcopy(obj)

    def stored(self, kind: str, name: str, namespace: str | None = None) -> JSON | None:
        """The object as stored (a copy), without counting as a GET; None when absent."""
        with self.lock:
            obj = self._objects.get((kind, namespace or "", name))
            return copy.deepcopy(obj) if obj else None

    def all_stored(self, kind: str) -> list[JSON]:
        """Every stored object of ``kind`` (copies), as a controller's informer sees them."""
        with self.lock:
            return [copy.deepcopy(o) for (k, _, _), o in sorted(self._objects.items()) if k == kind]

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Take an object away as a cluster admin would (no RBAC, nothing lingers)."""
        with self.lock:
            self._gone((kind, namespace or "", name))

    def set_status(self, kind: str, namespace: str | None, name: str, status: JSON) -> None:
        with self.lock:
            obj = self._objects[(kind, namespace or "", name)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def on_create(self, kind: str, callback: CreateHook) -> None:
        """``callback(api, obj)`` after each create of ``kind`` (may set status, add pods, ...)."""
        self._create_hooks.setdefault(kind, []).append(callback)

    def on_get(self, kind: str, callback: GetHook) -> None:
        """``callback(api, obj, n)`` before answering the n-th GET (1-based) of an object of ``kind``."""
        self._get_hooks.setdefault(kind, []).append(callback)

    def status_after_gets(self, kind: str, gets: int, status: JSON | Callable[[JSON], JSON]) -> None:
        """From the ``gets``-th GET of each ``kind`` object on, its status is ``status`` (or ``status(obj)``)."""
        def hook(api: FakeKubeApi, obj: JSON, n: int) -> None:
            if n == gets:
                meta = obj["metadata"]
                api.set_status(kind, meta.get("namespace"), meta["name"], status(obj) if callable(status) else status)
        self.on_get(kind, hook)

    def set_delete_gets(self, kind: str, gets: int) -> None:
        """Deleted objects of ``kind`` stay visible (terminating) for ``gets`` more requests to the server once
        nothing else holds them (a finalizer of the kind's own controller, e.g. an operator's cleanup)."""
        self._delete_gets_by_kind[kind] = gets

    def add_node(self, name: str, labels: dict[str, str] | None = None, allocatable_gpus: int = 0,
                 ready: bool = True, unschedulable: bool = False, allocatable_efa: int = 0) -> JSON:
        efa = {"vpc.amazonaws.com/efa": str(allocatable_efa)} if allocatable_efa else {}
        return self.put({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(allocatable_gpus), **efa},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        })

    def add_pod(self, namespace: str, name: str, *, labels: dict[str, str] | None = None, phase: str = "Running",
                owner: JSON | None = None, logs: str = "", containers: tuple[str, ...] = ("main",)) -> JSON:
        """A pod (optionally owned by ``owner``, e.g. a Job or DGD passed to an on_create hook)."""
        meta: JSON = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
        for c in containers:
            self.set_logs(namespace, name, logs, container=c)
        return self.put({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                         "spec": {"containers": [{"name": c, "image": "fake"} for c in containers]},
                         "status": {"phase": phase}})

    def add_job_pod(self, job: JSON, name: str, *, phase: str = "Running", logs: str = "",
                    waiting: str | None = None) -> JSON:
        """A pod as the Job controller creates it: the Job's pod template labels plus the controller's own
        (``job-name``, ``batch.kubernetes.io/job-name``), its containers, owned by the Job; ``waiting``
        sets a container waiting reason (e.g. ImagePullBackOff)."""
        tmpl = job["spec"]["template"]
        spec = tmpl["spec"]
        containers = tuple(c["name"] for c in [*(spec.get("initContainers") or []), *spec["containers"]])
        lbl = {**(tmpl.get("metadata") or {}).get("labels", {}), "job-name": job["metadata"]["name"],
               "batch.kubernetes.io/job-name": job["metadata"]["name"]}
        pod = self.add_pod(job["metadata"]["namespace"], name, labels=lbl, phase=phase, owner=job, logs=logs,
                           containers=containers)
        if waiting:
            pod["status"]["containerStatuses"] = [{"name": containers[0], "state": {"waiting": {
                "reason": waiting, "message": f"{waiting} for image {spec['containers'][0]['image']}"}}}]
            pod = self.put(pod)
        return pod

    def set_logs(self, namespace: str, pod: str, text: str, container: str | None = None) -> None:
        self._logs[(namespace, pod, container or "")] = text

    # ------------------------------------------------------------ API semantics

    def _key(self, r: Resource, ns: str | None, name: str) -> Key:
        return (r.kind, (ns or "") if r.namespaced else "", name)

    def _existing(self, r: Resource, ns: str | None, name: str) -> tuple[Key, JSON]:
        key = self._key(r, ns, name)
        if key not in self._objects:
            raise HttpError(404, "NotFound", f'{r.plural}.{r.api_version.split("/")[0]} "{name}" not found')
        return key, self._objects[key]

    def _dependents(self, uid: str) -> list[Key]:
        return [k for k, o in self._objects.items()
                if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])]

    def _delete(self, key: Key, policy: str | None) -> None:
        """Start deleting ``key`` as the API server and the garbage collector do (see the module docstring)."""
        obj = self._objects.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return  # gone, or already being deleted: a repeated delete changes nothing
        meta = obj["metadata"]
        meta["deletionTimestamp"] = _now()
        meta["resourceVersion"] = str(next(self._rv))
        deps = self._dependents(meta["uid"])
        if key[0] == "Pod":
            meta["deletionGracePeriodSeconds"] = 30
            if self.grace > 0:
                self._stopping[key] = self.grace
                return
        elif policy == "Orphan":
            for d in deps:
                ref_uid = meta["uid"]
                dm = self._objects[d]["metadata"]
                dm["ownerReferences"] = [r for r in dm.get("ownerReferences") or [] if r.get("uid") != ref_uid]
        elif policy == "Foreground" and deps:
            meta["finalizers"] = [*(meta.get("finalizers") or []), "foregroundDeletion"]
            for d in deps:
                self._delete(d, "Foreground")
            return
        self._release(key)

    def _release(self, key: Key) -> None:
        """Nothing of the API's holds ``key`` any more: its kind's own finalizer (``delete_gets``), else gone."""
        gets = self._delete_gets_by_kind.get(key[0], self.delete_gets)
        if gets > 0 and key not in self._terminating:
            self._terminating[key] = gets
            return
        self._gone(key)

    def _gone(self, key: Key) -> None:
        obj = self._objects.pop(key, None)
        self._terminating.pop(key, None)
        self._stopping.pop(key, None)
        if obj is None:
            return
        # background: what it owned is the garbage collector's, on the next request
        self._orphaned += [(d, "Background") for d in self._dependents(obj["metadata"]["uid"])]

    def tick(self) -> None:
        """One step of the cluster's own work, before each request: the kubelet ends grace periods, the
        garbage collector deletes orphaned dependents and lets go of foreground owners with none left."""
        with self.lock:
            for key in list(self._terminating):  # a kind's own finalizer lets go after its requests
                if self._terminating[key] <= 0:
                    self._gone(key)
                else:
                    self._terminating[key] -= 1
            for key in list(self._stopping):
                self._stopping[key] -= 1
                if self._stopping[key] <= 0:
                    self._gone(key)
            orphaned, self._orphaned = self._orphaned, []
            for key, policy in orphaned:
                self._delete(key, policy)
            for key, obj in list(self._objects.items()):
                meta = obj["metadata"]
                if "foregroundDeletion" in (meta.get("finalizers") or []) and not self._dependents(meta["uid"]):
                    meta["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
                    if not meta["finalizers"]:
                        del meta["finalizers"]
                    self._release(key)

    def lingering(self) -> list[str]:
        """``Kind/name`` of every object being deleted and not gone yet."""
        with self.lock:
            return sorted(f"{k[0]}/{k[2]}" for k, o in self._objects.items() if o["metadata"].get("deletionTimestamp"))

    def settle(self, limit: int = 100) -> None:
        """Let the cluster work (as many requests' worth of ticks as it takes) until nothing lingers."""
        for _ in range(limit):
            if not self.lingering():
                return
            self.tick()
        raise AssertionError(f"still being deleted after {limit} steps: {self.lingering()}")

    def authorize(self, method: str, parts: list[str], groups: frozenset[str] | None = None) -> None:
        """403 unless RBAC (when enforced) allows the request to a user in ``groups``; records the allowing rule."""
        if self.rbac is None:
            return
        info = RequestInfo(method, parts)
        if not info.resource_request:
            return
        groups = self.default_groups if groups is None else groups
        self.calls.append((groups, info.verb, info.api_group, info.key()[2], info.namespace, info.name))
        found = self.rbac.allowing_rule(info, groups)
        where = f' in the namespace "{info.namespace}"' if info.namespace else ""
        if found is None:
            what = info.resource + (f"/{info.subresource}" if info.subresource else "")
            message = (f'{what} "{info.name}" is forbidden: User in groups {sorted(groups)} cannot {info.verb} resource '
                       f'"{what}" in API group "{info.api_group}"{where}')
            self.denied.append(message)
            raise HttpError(403, "Forbidden", message)
        verb, _, resource = info.key()
        self.authorized.append((found[0], found[1], verb, resource, info.name))

    def handle(self, method: str, r: Resource, ns: str | None, name: str | None, query: dict[str, str],
               body: Any, content_type: str, groups: frozenset[str] | None = None) -> tuple[int, Any]:
        if method in ("POST", "PUT") and r.kind in self.validators and query.get("fieldValidation") == "Strict":
            problems = self.validators[r.kind](body)
            if problems:
                raise HttpError(422, "Invalid", f"{r.kind} {((body or {}).get('metadata') or {}).get('name')} is "
                                                f"invalid: " + "; ".join(problems))
        if self.admission is not None and method in ("POST", "PUT", "PATCH", "DELETE"):
            self._admit(method, r, ns, name, body, groups if groups is not None else self.default_groups)
        with self.lock:
            if method == "GET" and name is None:
                match = _selector(query.get("labelSelector", ""))
                items = [{k: v for k, v in copy.deepcopy(o).items() if k not in ("kind", "apiVersion")}
                         for (kind, o_ns, _), o in sorted(self._objects.items())
                         if kind == r.kind and (not ns or o_ns == ns)
                         and match(o["metadata"].get("labels") or {})]
                return 200, {"kind": f"{r.kind}List", "apiVersion": r.api_version, "items": items,
                             "metadata": {"resourceVersion": str(next(self._rv))}}
            if method == "POST" and name is None:
                if query.get("dryRun") == "All":  # authorized, validated and admitted above: nothing persisted
                    return self._dry_create(r, ns, body)
                return self._create(r, ns, body)
            if name is None:
                raise HttpError(405, "MethodNotAllowed", f"{method} on a collection")
            key, obj = self._existing(r, ns, name)
            if method == "GET":
                return 200, self._get(key, obj)
            if method == "DELETE":
                policy = (body or {}).get("propagationPolicy")
                if not obj["metadata"].get("deletionTimestamp"):
                    self.deletes.append((r.kind, key[1], name, policy))
                self._delete(key, policy)
                return 200, copy.deepcopy(obj)
            if method == "PUT":
                body.setdefault("metadata", {})
                rv = body["metadata"].get("resourceVersion")
                if rv and rv != obj["metadata"]["resourceVersion"]:
                    raise HttpError(409, "Conflict", f'Operation cannot be fulfilled on {r.plural} "{name}": '
                                                     "the object has been modified")
                return 200, self._update(key, obj, body)
            if method == "PATCH":
                if content_type != "application/merge-patch+json":
                    raise HttpError(415, "UnsupportedMediaType", f"patch content type {content_type!r}")
                return 200, self._update(key, obj, _merge(obj, {k: v for k, v in body.items() if k != "status"}))
            raise HttpError(405, "MethodNotAllowed", method)

    def _admit(self, method: str, r: Resource, ns: str | None, name: str | None, body: Any,
               groups: frozenset[str]) -> None:
        """Validating admission of a write: the request's object and the stored one (UPDATE, DELETE)."""
        operation = {"POST": "CREATE", "PUT": "UPDATE", "PATCH": "UPDATE", "DELETE": "DELETE"}[method]
        with self.lock:
            old = copy.deepcopy(self._objects.get(self._key(r, ns, name))) if name is not None else None
        if operation != "CREATE" and old is None:
            return  # 404 follows
        if method == "PATCH":
            new: Any = _merge(old, {k: v for k, v in (body or {}).items() if k != "status"})
        else:
            new = None if operation == "DELETE" else copy.deepcopy(body)
        if new is not None and r.namespaced:
            new.setdefault("metadata", {})["namespace"] = ns
        problems = self.admission.admit(operation=operation, api_version=r.api_version, plural=r.plural,
                                        namespace=ns or "", groups=sorted(groups), obj=new, old=old,
                                        stored=self._stored_param)
        if problems:
            code, reason, message = problems[0]
            self.refused.append(message)
            raise HttpError(code, reason, message)
        self.admitted += 1

    def _stored_param(self, namespace: str, name: str) -> JSON | None:
        """A policy binding's parameter as stored now (a ConfigMap), read at each request as the API server does:
        the runner grants change while campaigns run (stacks/kubernetes/benchctl-identities.yaml)."""
        with self.lock:
            found = self._objects.get(("ConfigMap", namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def _dry_create(self, r: Resource, ns: str | None, body: JSON) -> tuple[int, JSON]:
        """A create with ``dryRun=All``: every check a create makes (AlreadyExists included), no write, no hook."""
        self._check_create(r, ns, body)
        self.dry_runs.append((r.kind, ns or "", body["metadata"]["name"]))
        return 201, copy.deepcopy(body)

    def access_review(self, body: JSON, groups: frozenset[str]) -> JSON:
        """A SelfSubjectAccessReview answered by the same RBAC evaluation as a request (allowed when RBAC is off)."""
        attrs = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
        group, ns = attrs.get("group", ""), attrs.get("namespace", "")
        info = RequestInfo("GET", ["api", "v1", "x"])  # then the review's own attributes, as the authorizer gets them
        info.verb, info.api_group, info.namespace = attrs.get("verb", ""), group, ns
        info.resource, info.name, info.subresource = attrs.get("resource", ""), attrs.get("name", ""), attrs.get("subresource", "")
        allowed = self.rbac is None or self.rbac.allowing_rule(info, groups) is not None
        self.reviews.append((tuple(sorted(groups)), info.verb, group, info.key()[2], ns, attrs.get("name", ""), allowed))
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": body.get("spec"),
                "status": {"allowed": allowed, **({} if allowed else {"reason": "no RBAC rule allows it"})}}

    def _check_create(self, r: Resource, ns: str | None, body: JSON) -> Key:
        meta = body.get("metadata") or {}
        if body.get("kind") != r.kind or body.get("apiVersion") != r.api_version:
            raise HttpError(400, "BadRequest", f"body is {body.get('apiVersion')}/{body.get('kind')}, path is {r.kind}")
        if not meta.get("name"):
            raise HttpError(422, "Invalid", f"{r.kind}: metadata.name is required")
        if r.namespaced and meta.get("namespace", ns) != ns:
            raise HttpError(400, "BadRequest", f"namespace {meta.get('namespace')} does not match the path's {ns}")
        key = self._key(r, ns, meta["name"])
        if key in self._objects:
            raise HttpError(409, "AlreadyExists", f'{r.plural} "{meta["name"]}" already exists')
        return key

    def _create(self, r: Resource, ns: str | None, body: JSON) -> tuple[int, JSON]:
        key = self._check_create(r, ns, body)
        meta = body.get("metadata") or {}
        obj = {k: v for k, v in copy.deepcopy(body).items() if k != "status"}
        obj["metadata"] = {k: v for k, v in meta.items() if k not in ("uid", "resourceVersion", "generation")}
        if r.namespaced:
            obj["metadata"]["namespace"] = ns
        self.put(obj)
        for hook in self._create_hooks.get(r.kind, []):
            hook(self, copy.deepcopy(self._objects[key]))
        return 201, copy.deepcopy(self._objects[key])

    def _get(self, key: Key, obj: JSON) -> JSON:
        self._get_counts[key] = n = self._get_counts.get(key, 0) + 1
        for hook in self._get_hooks.get(key[0], []):
            hook(self, copy.deepcopy(obj), n)
        return copy.deepcopy(self._objects[key])

    def _update(self, key: Key, old: JSON, new: JSON) -> JSON:
        new = copy.deepcopy(new)
        if new.get("metadata", {}).get("name") != key[2]:
            raise HttpError(400, "BadRequest", f"metadata.name {new.get('metadata', {}).get('name')!r} != {key[2]!r}")
        for k in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
            if k in old["metadata"]:
                new["metadata"][k] = old["metadata"][k]
        new["status"] = copy.deepcopy(old.get("status"))
        if new["status"] is None:
            del new["status"]
        changed = _spec_part(new) != _spec_part(old)
        new["metadata"]["generation"] = old["metadata"].get("generation", 1) + (1 if changed else 0)
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        self._objects[key] = new
        return copy.deepcopy(new)

    def pod_logs(self, ns: str, pod: str, query: dict[str, str]) -> str:
        with self.lock:
            self._existing(RESOURCES["Pod"], ns, pod)
            container = query.get("container", "")
            text = self._logs.get((ns, pod, container), self._logs.get((ns, pod, ""), ""))
        if "tailLines" in query:
            text = "".join(text.splitlines(keepends=True)[-int(query["tailLines"]):])
        return text


_BY_PATH = {(r.api_version, r.plural): r for r in RESOURCES.values()}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKubeApi

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.fake.requests.append((method, self.path))
        query = dict(urllib.parse.parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.fake.tick()
        try:
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if token not in self.fake.tokens:
                raise HttpError(401, "Unauthorized", "Unauthorized")
            groups = self.fake.groups_of(token)
            body = json.loads(raw) if raw else None
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
            if method in ("POST", "PUT"):
                self.fake.bodies.append((method, self.path, json.loads(raw) if raw else {}))
            if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and method == "POST":
                return self._send(201, self.fake.access_review(body, groups))  # system:basic-user: everyone may
            self.fake.authorize(method, parts, groups)
            if parts == ["version"] and method == "GET":
                return self._send(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})
            if parts[:2] == ["api", "v1"]:
                api_version, rest = "v1", parts[2:]
            elif parts[0] == "apis" and len(parts) >= 4:
                api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
            else:
                raise HttpError(404, "NotFound", f"no API at {url.path}")
            ns = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                ns, rest = rest[1], rest[2:]
            r = _BY_PATH.get((api_version, rest[0]))
            if r is None or len(rest) > 3 or (ns and not r.namespaced):
                raise HttpError(404, "NotFound", f"the server could not find the requested resource {url.path}")
            name = rest[1] if len(rest) > 1 else None
            if len(rest) == 3:
                if (r.kind, rest[2], method) != ("Pod", "log", "GET") or ns is None or name is None:
                    raise HttpError(404, "NotFound", f"no subresource {rest[2]} of {r.plural}")
                return self._send(200, self.fake.pod_logs(ns, name, query), "text/plain")
            code, out = self.fake.handle(method, r, ns, name, query, body,
                                         self.headers.get("Content-Type", "").split(";")[0], groups)
            self._send(code, out)
        except HttpError as err:
            self._send(err.code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "message": err.message, "reason": err.reason, "code": err.code})
