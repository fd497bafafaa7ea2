"""The preflight's AIPerf check script, run for real: the real aiperf of this venv and AIPerf's own tokenizer
loader reading the generated offline model directory (real processes, so this is the integration tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.spec.model import parse_spec
from tests.unit.test_aws_k8s import CID, _spec, _with_image


def test_without_a_prefetch_the_aiperf_check_reads_the_tokenizer_offline_from_the_volume(tmp_path):
    """The real aiperf (0.13.0, this venv) runs the check's script: its version, then the tokenizer loaded
    by AIPerf's own loader offline from a hub cache at the pinned revision, as the load Jobs will."""
    import os
    import subprocess
    import sys

    from benchctl.aws.k8s.preflight_jobs import render_preflight_job
    from benchctl.local import modeldir

    if not modeldir.is_complete():
        pytest.fail("the offline tokenizer directory is missing: run scripts/setup.sh (it generates it)")
    data = _with_image(_spec()).model_dump(mode="json")
    data["model"]["revision"] = modeldir.REVISION  # the generated snapshot stands in for the prefetched model
    job = render_preflight_job(parse_spec(data), CID, "aiperf")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert {"name": "model-cache", "mountPath": "/models", "readOnly": True} in c["volumeMounts"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["REVISION"] == modeldir.REVISION
    import shutil

    hf_home = tmp_path / "hf"  # the volume: the generated snapshot (config, tokenizer), no weights yet
    shutil.copytree(modeldir.hf_home(), hf_home, symlinks=True)
    assert "https://nvcr.io/v2/" in env["BENCHCTL_EGRESS"]  # probed from the cluster; here: nothing to reach
    run_env = {**os.environ, **env, "BENCHCTL_EGRESS": "{}", "HF_HOME": str(hf_home), "HOME": str(tmp_path),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # a volume holding the tokenizer but not the weights (e.g. a mocker rehearsal's prefetch) fails vLLM's
    # campaign before GPUs are scaled
    partial = subprocess.run(["sh", "-c", c["command"][2]], capture_output=True, text=True, timeout=180, env=run_env)
    assert partial.returncode == 8, partial.stdout + partial.stderr[-2000:]
    assert "lacks 1 of the 1 weight files" in partial.stderr and "prefetch_model" in partial.stderr
    (snapshot,) = (hf_home / "hub").glob(f"models--*/snapshots/{modeldir.REVISION}")
    (snapshot / "model.safetensors").write_bytes(b"\0" * 16)
    ok = subprocess.run(["sh", "-c", c["command"][2]], capture_output=True, text=True, timeout=180, env=run_env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "aiperf --version: 0.13.0" in ok.stdout and f"{modeldir.REVISION} read offline" in ok.stdout
    assert "1 files on the volume" in ok.stdout
    missing = subprocess.run(["sh", "-c", c["command"][2]], capture_output=True, text=True, timeout=180,
                             env={**run_env, "REVISION": "0" * 40})
    assert missing.returncode == 5 and "not present in the HuggingFace cache" in missing.stderr
    with_prefetch = parse_spec({**data, "kubernetes": {**data["kubernetes"], "prefetch_model": True}})
    assert "volumeMounts" not in render_preflight_job(with_prefetch, CID, "aiperf")["spec"]["template"]["spec"][
        "containers"][0]  # the volume is filled later, at Deploy


def test_the_egress_probe_passes_on_any_http_answer_and_names_each_endpoint_it_cannot_reach(tmp_path):
    """The AIPerf Job's egress probe, run for real by this venv's python: a registry's 401 is an answer (reached);
    a port nobody listens on is named, with what needs it, and the probe exits 9."""
    import http.server
    import json
    import os
    import socket
    import subprocess
    import sys
    import threading

    from benchctl.aws.k8s.preflight_jobs import EGRESS_CHECK

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # what a registry answers an anonymous /v2/
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="https://auth.example/token"')
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as s:  # a port bound and closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    up, down = f"http://127.0.0.1:{server.server_address[1]}/v2/", f"http://127.0.0.1:{closed}/v2/"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "NO_PROXY": "*"}
    try:
        ok = subprocess.run(["sh", "-c", EGRESS_CHECK], capture_output=True, text=True, timeout=60,
                            env={**env, "BENCHCTL_EGRESS": json.dumps({up: "pulls nvcr.io/x:1"})})
        assert ok.returncode == 0, ok.stderr
        assert f"1 endpoints reached: {up}" in ok.stdout
        bad = subprocess.run(["sh", "-c", EGRESS_CHECK], capture_output=True, text=True, timeout=60,
                             env={**env, "BENCHCTL_EGRESS": json.dumps({up: "pulls a", down: "pulls python:3"})})
        assert bad.returncode == 9, bad.stdout + bad.stderr
        assert f"no egress from the cluster to {down} (" in bad.stderr and "needed: pulls python:3" in bad.stderr
        assert up not in bad.stderr
    finally:
        server.shutdown()
