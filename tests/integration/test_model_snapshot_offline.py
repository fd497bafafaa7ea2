"""The model volume as the pods read it, held to huggingface_hub's own code: the prefetch Job's script, run with
the real library (the version the Job pins) against a Hub on loopback that serves the generated offline model
directory at the pinned commit, downloads into an empty HF_HOME exactly the directory the rendered workers serve
(their ``--model``, which Dynamo 1.6.1 loads as is because the path exists), and that directory holds what the
workers and the frontend read (config, tokenizer, chat template). Real processes, so this is the integration
tier."""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from tokenizers import Tokenizer

from benchctl.aws.k8s.common import HF_HOME
from benchctl.aws.k8s.prefetch import PREFETCH_HF_HUB, render_prefetch_job
from benchctl.aws.k8s.render import render_dgd
from benchctl.local import modeldir
from benchctl.spec.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]
CID = "smoke-20261201-000000"


def _spec() -> Any:
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data = copy.deepcopy(data)
    for pool in data["pools"]:
        pool.update(provider="managed-nodegroup", nodegroup="gpu-a100")
    data["model"].update(name=modeldir.TOKENIZER_NAME, revision=modeldir.REVISION)  # the generated snapshot
    return parse_spec(data)


class _Hub:
    """The two Hub endpoints snapshot_download uses for a commit: the tree listing and each file's resolve URL
    (HEAD for its metadata, GET for its bytes), serving the files of ``src`` at ``commit`` only."""

    def __init__(self, src: Path, repo: str, commit: str) -> None:
        self.files = {p.name: p.read_bytes() for p in src.iterdir() if p.is_file() and not p.name.startswith(".")}
        self.requests: list[str] = []
        self.auth: list[str | None] = []  # each request's Authorization header
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return None

            def _answer(self, body: bool) -> None:
                hub.requests.append(self.path)
                hub.auth.append(self.headers.get("Authorization"))
                tree, resolve = f"/api/models/{repo}/tree/{commit}", f"/{repo}/resolve/{commit}/"
                if self.path.startswith(tree):
                    data = json.dumps([{"type": "file", "oid": hashlib.sha1(d).hexdigest(), "size": len(d), "path": n}
                                       for n, d in hub.files.items()]).encode()
                    headers = {"Content-Type": "application/json"}
                elif self.path.startswith(resolve) and self.path[len(resolve):] in hub.files:
                    data = hub.files[self.path[len(resolve):]]
                    headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                for k, v in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(k, v)
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def do_HEAD(self) -> None:
                self._answer(False)

            def do_GET(self) -> None:
                self._answer(True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_prefetch_downloads_the_snapshot_where_the_workers_and_the_frontend_read_it(tmp_path: Path) -> None:
    if not modeldir.is_complete():
        pytest.fail("the offline model directory is missing: run scripts/setup.sh (it generates it)")
    spec = _spec()
    # the Job installs the huggingface_hub this test runs its script with
    installed = importlib.metadata.version("huggingface_hub")
    assert PREFETCH_HF_HUB.split("==") == ["huggingface_hub", installed]
    dgd = render_dgd(spec, CID, "disagg")
    args = [c["podTemplate"]["spec"]["containers"][0]["args"] for c in dgd["spec"]["components"]
            if c["type"] != "frontend"]
    models = {a[a.index("--model") + 1] for a in args}
    (model,) = models
    hf_home = tmp_path / "hf"  # the empty volume
    snapshot = hf_home / model.removeprefix(HF_HOME + "/")
    (c,) = render_prefetch_job(spec.model, spec.kubernetes, CID)["spec"]["template"]["spec"]["containers"]
    job_env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert job_env["SNAPSHOT"] == model and job_env["HF_HOME"] == HF_HOME
    assert job_env["HF_TOKEN_PATH"] == "/var/run/secrets/huggingface/token"  # the secret's key as a file
    token = tmp_path / "token"  # stands in for the mounted secret
    token.write_text("hf_test\n")
    hub = _Hub(modeldir.model_path(), spec.model.name, modeldir.REVISION)
    try:
        run_env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH"))}, **job_env,
                   "HF_HOME": str(hf_home), "SNAPSHOT": str(snapshot), "HF_ENDPOINT": hub.url, "HF_TOKEN_PATH": str(token),
                   "HF_HUB_DISABLE_TELEMETRY": "1", "HOME": str(tmp_path)}
        run_env.pop("PYTHONPATH")  # this venv's huggingface_hub stands in for the one the Job installs
        ok = subprocess.run([sys.executable, "-c", job_env["PREFETCH_SCRIPT"]], capture_output=True, text=True,
                            timeout=120, env=run_env)
        assert ok.returncode == 0, ok.stderr[-2000:]
        assert f"is in {snapshot}" in ok.stdout
        resolved = [r for r in hub.requests if "/resolve/" in r]
        assert resolved and all(f"/resolve/{modeldir.REVISION}/" in r for r in resolved)  # the pinned commit only
        assert hub.auth and set(hub.auth) == {"Bearer hf_test"}  # the token read from the file, on every request
        # a snapshot anywhere else fails the Job, naming both places
        elsewhere = subprocess.run([sys.executable, "-c", job_env["PREFETCH_SCRIPT"]], capture_output=True,
                                   text=True, timeout=120, env={**run_env, "SNAPSHOT": str(tmp_path / "elsewhere")})
        assert elsewhere.returncode == 1 and "where the workers serve it" in elsewhere.stderr
    finally:
        hub.server.shutdown()
    # what the workers (vLLM, a local path) and the frontend (the model card's files) read is there
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (snapshot / name).is_file(), name
    # tokenizers: the library behind Dynamo's frontend tokenizer (HfTokenizer::from_file)
    assert Tokenizer.from_file(str(snapshot / "tokenizer.json")).encode("hello").ids


def test_a_mocker_campaigns_prefetch_downloads_the_config_and_tokenizer_but_no_weights(tmp_path: Path) -> None:
    """``engine: mocker`` (examples/aws-rehearsal.yaml): the mocker loads the model's config and tokenizer, never
    its weights, so its campaign's prefetch leaves the weights on the Hub (a GPU campaign's prefetch of the same
    commit then adds them to the same snapshot)."""
    import shutil

    if not modeldir.is_complete():
        pytest.fail("the offline model directory is missing: run scripts/setup.sh (it generates it)")
    spec = _spec()
    src = tmp_path / "repo"
    shutil.copytree(modeldir.model_path(), src)
    (src / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 4096)  # the weights the mocker never reads
    model = render_dgd(spec, CID, "agg")["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["args"]
    snapshot_dir = model[model.index("--model") + 1]
    hub = _Hub(src, spec.model.name, modeldir.REVISION)
    try:
        for weights in (False, True):
            hf_home = tmp_path / f"hf-{weights}"
            (c,) = render_prefetch_job(spec.model, spec.kubernetes, CID, weights=weights)["spec"]["template"]["spec"][
                "containers"]
            job_env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
            snapshot = hf_home / snapshot_dir.removeprefix(HF_HOME + "/")
            run_env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH"))}, **job_env,
                       "HF_HOME": str(hf_home), "SNAPSHOT": str(snapshot), "HF_ENDPOINT": hub.url,
                       "HF_HUB_DISABLE_TELEMETRY": "1", "HOME": str(tmp_path)}
            ok = subprocess.run([sys.executable, "-c", job_env["PREFETCH_SCRIPT"]], capture_output=True, text=True,
                                timeout=120, env=run_env)
            assert ok.returncode == 0, ok.stderr[-2000:]
            got = {p.name for p in snapshot.iterdir()}
            assert {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= got, got
            assert ("model-00001-of-00001.safetensors" in got) == weights, got
    finally:
        hub.server.shutdown()
