"""The model prefetch's script with an experiment's checkpoint (``MORE_MODELS``), run with the real
huggingface_hub against the loopback Hub of test_model_snapshot_offline: it downloads each listed snapshot after
the campaign model's and fails, naming it, when one lands anywhere but where its workers serve it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.aws.k8s.common import HF_HOME, model_snapshot_dir
from benchctl.aws.k8s.prefetch import render_prefetch_job
from benchctl.local import modeldir
from tests.integration.test_model_snapshot_offline import _Hub, _spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CID = "fp8-20261201-000000"


def test_the_prefetch_downloads_each_checkpoint_where_its_workers_serve_it(tmp_path: Path) -> None:
    if not modeldir.is_complete():
        pytest.fail("the offline model directory is missing: run scripts/setup.sh (it generates it)")
    spec = _spec()
    # the loopback Hub serves one repository: the checkpoint listed is that repository at its commit, which is
    # the second download the script makes, checked against its own snapshot directory
    ckpt = spec.model.model_copy()
    (c,) = render_prefetch_job(spec.model, spec.kubernetes, CID, more=[ckpt])["spec"]["template"]["spec"]["containers"]
    job_env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    hf_home = tmp_path / "hf"

    def local(path: str) -> str:
        return str(hf_home / path.removeprefix(HF_HOME + "/"))

    hub = _Hub(modeldir.model_path(), spec.model.name, modeldir.REVISION)
    try:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH"))}, **job_env,
               "HF_HOME": str(hf_home), "SNAPSHOT": local(model_snapshot_dir(spec.model)), "HF_ENDPOINT": hub.url,
               "HF_HUB_DISABLE_TELEMETRY": "1", "HOME": str(tmp_path)}
        more = json.loads(job_env["MORE_MODELS"])
        ok_env = {**env, "MORE_MODELS": json.dumps([{**m, "snapshot": local(m["snapshot"])} for m in more])}
        ok = subprocess.run([sys.executable, "-c", job_env["PREFETCH_SCRIPT"]], capture_output=True, text=True,
                            timeout=120, env=ok_env)
        assert ok.returncode == 0, ok.stderr[-2000:]
        assert ok.stdout.count(f"at {modeldir.REVISION} is in") == 2, ok.stdout
        wrong = tmp_path / "elsewhere"
        bad_env = {**env, "MORE_MODELS": json.dumps([{**m, "snapshot": str(wrong)} for m in more])}
        bad = subprocess.run([sys.executable, "-c", job_env["PREFETCH_SCRIPT"]], capture_output=True, text=True,
                             timeout=120, env=bad_env)
        assert bad.returncode == 1 and f"not at {wrong} where the workers serve it" in bad.stderr, bad.stderr[-800:]
    finally:
        hub.server.shutdown()
