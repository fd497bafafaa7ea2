"""The Kubernetes objects of the cluster's access, applied by the platform stack: the RBAC and admission files of
stacks/kubernetes/ in the benchmark's namespace, and the CronJob that syncs the Hugging Face token into it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from benchctl.aws.k8s.common import HF_TOKEN_KEY

ROOT = Path(__file__).resolve().parents[1]


KUBERNETES_DIR = ROOT / "stacks" / "kubernetes"


DEFAULT_NAMESPACE = "dynamo-bench"  # what stacks/kubernetes/*.yaml name


HF_TOKEN_SECRET = "hf-token"  # noqa: S105  # the Kubernetes secret's name (spec kubernetes.hf_token_secret's default)


TOKEN_SYNC = "benchctl-hf-token-sync"  # noqa: S105  # its CronJob, service account, Role and RoleBinding


TOKEN_SYNC_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.22.0"  # noqa: S105  # the campaign's uploader image


def rbac_manifests(namespace: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """``stacks/kubernetes/*.yaml`` as applied: every document, with the namespace they name
    (:data:`DEFAULT_NAMESPACE`) replaced by ``namespace`` where it stands as one (an object's namespace, a
    namespace resource name, an admission parameter naming it), and the admission parameters replaced by
    ``params`` (the deployment's allow-list, :func:`benchctl.aws.k8s.admission.admission_params`, with the
    load image's registry that the file asks a person to add by hand)."""
    docs: list[dict[str, Any]] = []
    for path in sorted(KUBERNETES_DIR.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    name = params["metadata"]["name"]
    (at,) = [i for i, d in enumerate(docs) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    docs[at] = params
    if namespace == DEFAULT_NAMESPACE:
        return docs

    def swap(node: Any, key: str | None = None) -> Any:
        if isinstance(node, dict):
            return {k: swap(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v, key) for v in node]
        if node == DEFAULT_NAMESPACE and key in ("namespace", "resourceNames", "namespaces", "values"):
            return namespace
        return node

    return [swap(copy.deepcopy(d)) for d in docs]


def token_sync_manifests(namespace: str, secret_arn: str, region: str, k8s_secret: str = HF_TOKEN_SECRET
                         ) -> list[dict[str, Any]]:
    """The HF token's way from Secrets Manager into the Kubernetes secret ``hf-token``: an empty secret of
    that name (the preflight names its missing key until the token arrives), a service account whose pods
    get the token reader role through EKS Pod Identity, a Role that may read and patch that one secret,
    and a CronJob (every 10 minutes; run it at once with ``kubectl create job --from``) that reads the
    secret with the AWS CLI and patches ``HF_TOKEN`` in with the service account's own API token. A value
    that is not a Hugging Face token (``hf_...``: the placeholder the stack generates) is left alone."""
    labels = {"app.kubernetes.io/managed-by": "benchctl", "app.kubernetes.io/name": TOKEN_SYNC}
    script = (
        "set -eu\n"
        f"tok=$(aws secretsmanager get-secret-value --region {region} --secret-id \"$SECRET_ARN\" "
        "--query SecretString --output text)\n"
        "case \"$tok\" in hf_*) ;; *) echo 'the HF token secret is not filled yet (no hf_... value)'; exit 0;; esac\n"
        "sa=/var/run/secrets/kubernetes.io/serviceaccount\n"
        "b64=$(printf %s \"$tok\" | base64 | tr -d '\\n')\n"
        f"printf '{{\"data\":{{\"{HF_TOKEN_KEY}\":\"%s\"}}}}' \"$b64\" > /tmp/patch.json\n"
        "curl -sSf -o /dev/null --cacert $sa/ca.crt -H \"Authorization: Bearer $(cat $sa/token)\" "
        "-H 'Content-Type: application/merge-patch+json' -X PATCH --data @/tmp/patch.json "
        f"https://kubernetes.default.svc/api/v1/namespaces/{namespace}/secrets/{k8s_secret}\n"
        "rm -f /tmp/patch.json\n"
        f"echo 'copied the HF token into {namespace}/{k8s_secret}'\n")
    pod = {
        "serviceAccountName": TOKEN_SYNC, "restartPolicy": "OnFailure",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "sync", "image": TOKEN_SYNC_IMAGE, "command": ["/bin/sh", "-c", script],
            "env": [{"name": "SECRET_ARN", "value": secret_arn}, {"name": "HOME", "value": "/tmp"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}]}
    return [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": k8s_secret, "namespace": namespace, "labels": labels}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": TOKEN_SYNC, "namespace": namespace,
                                                                    "labels": labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": TOKEN_SYNC, "namespace": namespace, "labels": labels},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [k8s_secret],
                    "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": TOKEN_SYNC, "namespace": namespace, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TOKEN_SYNC},
         "subjects": [{"kind": "ServiceAccount", "name": TOKEN_SYNC, "namespace": namespace}]},
        {"apiVersion": "batch/v1", "kind": "CronJob",
         "metadata": {"name": TOKEN_SYNC, "namespace": namespace, "labels": labels},
         "spec": {"schedule": "*/10 * * * *", "concurrencyPolicy": "Forbid", "successfulJobsHistoryLimit": 1,
                  "failedJobsHistoryLimit": 2,
                  "jobTemplate": {"spec": {"backoffLimit": 2, "activeDeadlineSeconds": 300,
                                           "ttlSecondsAfterFinished": 3600,
                                           "template": {"metadata": {"labels": labels}, "spec": pod}}}}},
    ]
