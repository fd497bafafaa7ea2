"""`benchctl dashboards`' answer checks (benchctl.dashboards.HttpPrometheus) are no stricter than a real Prometheus:
Debian's prometheus (scripts/setup.sh installs it), on loopback, scraping itself."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from benchctl import dashboards as dq
from tests.prometheus_harness import free_port


def test_a_real_prometheus_answers_pass_the_shape_checks(tmp_path: Path) -> None:
    """The checks are no stricter than the real API: every endpoint the command reads, on a real Prometheus."""
    assert shutil.which("prometheus"), "Debian's prometheus is missing: scripts/setup.sh installs it"
    port = free_port()
    (tmp_path / "p.yml").write_text("global: {scrape_interval: 1s}\nscrape_configs:\n"
                                    f"  - job_name: self\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    proc = subprocess.Popen([shutil.which("prometheus") or "", f"--config.file={tmp_path / 'p.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        prom = dq.HttpPrometheus(base)
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{base}/-/ready", timeout=2).close()
                if prom.get("/api/v1/label/job/values", **{"match[]": "up"})["data"]:
                    break  # scraped itself once
            assert proc.poll() is None and time.monotonic() < deadline, "prometheus did not come up"
            time.sleep(0.3)
        now = time.time()
        assert prom.get("/api/v1/status/buildinfo")["data"]["version"]
        assert prom.get("/api/v1/label/job/values", **{"match[]": "up", "start": now - 60, "end": now})["data"] == [
            "self"]
        assert prom.get("/api/v1/series", **{"match[]": "up", "start": now - 60, "end": now})["data"]
        ok = prom.get("/api/v1/query_range", query="up", start=now - 30, end=now, step=1)
        assert ok["data"]["result"][0]["values"]
        bad = prom.get("/api/v1/query_range", query="up{", start=now - 30, end=now, step=1)
        assert bad["status"] == "error" and bad["errorType"] == "bad_data"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
