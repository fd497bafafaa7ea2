"""A real Prometheus on loopback (Debian's ``prometheus``, installed by scripts/setup.sh) scraping a local run with
the platform's own scrape jobs (``benchctl.monitors``, written by ``benchctl.local.scrape``), and recorded
expositions (``tests/data/recorded/``) served on loopback for what the local engine cannot expose (DCGM on GPUs,
KVBM, vLLM's NIXL and prefix-cache counters).

A recorded exposition is one scrape of a real exporter. Served as is, its counters would never move and every
``rate()`` over them would be 0 (and every ``histogram_quantile`` NaN), so each scrape of it serves the recorded
snapshot's counters, histograms and summaries multiplied by the number of scrapes so far: a constant rate that
keeps the recorded distribution (its quantiles) and the recorded labels; gauges are served as recorded. Each
recorded target carries the label ``exposition=<file>``, which is how a query's data is told live or recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from benchctl import monitors
from benchctl.dashboards import HttpPrometheus
from benchctl.local import scrape

RECORDED_DIR = Path(__file__).resolve().parent / "data" / "recorded"
GROWING = {"counter", "histogram", "summary"}
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\d+)?$")


def families(text: str) -> dict[str, str]:
    """{family: type} from an exposition's ``# TYPE`` lines."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def family_of(name: str, types: dict[str, str]) -> str | None:
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return None


def grown(text: str, n: int) -> str:
    """The exposition with every counter/histogram/summary sample multiplied by ``n`` (gauges as recorded)."""
    types = families(text)
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        fam = family_of(m.group(1), types) if m else None
        if m and fam and types[fam] in GROWING:
            out.append(f"{m.group(1)}{m.group(2) or ''} {float(m.group(3)) * n!r}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@dataclass
class Recorded:
    """A recorded exposition served on 127.0.0.1 as one target of a platform monitor."""

    path: Path
    monitor: str  # the benchctl.monitors name whose scrape job scrapes it
    labels: dict[str, str]  # what the operator would give its target (namespace, pod, ...)
    scrapes: int = 0
    server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        text = self.path.read_text()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                rec.scrapes += 1
                body = grown(text, rec.scrapes).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus(HttpPrometheus):
    """The harness's Prometheus: its API (benchctl.dashboards.HttpPrometheus), process and recorded targets."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes], recorded: list[Recorded]) -> None:
        super().__init__(url)
        self.proc = proc
        self.recorded = recorded
        self.window: tuple[float, float] | None = None  # the campaign's start and end (set by whoever ran it)


def config(run_dir: Path, namespace: str, recorded_dir: Path) -> dict[str, Any]:
    """The run's own ``prometheus.yml`` (benchctl.local.scrape), each job also reading the recorded targets."""
    cfg = yaml.safe_load(scrape.config_text(run_dir, namespace))
    for job in cfg["scrape_configs"]:
        monitor = job["job_name"].split("/")[2]
        job["file_sd_configs"][0]["files"].append(f"{recorded_dir}/{monitor}/*.json")
    return cfg


@contextlib.contextmanager
def running(run_dir: Path, namespace: str, workdir: Path, recorded: list[Recorded]) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port scraping ``run_dir``'s targets and the ``recorded`` expositions; stopped
    (its process group) on the way out, whatever happened."""
    binary = shutil.which("prometheus")
    assert binary, ("Debian's prometheus is not installed: run scripts/setup.sh as root "
                    "(or apt-get install -y --no-install-recommends prometheus)")
    rec_dir = workdir / "recorded-targets"
    for r in recorded:
        addr = r.start()
        target = rec_dir / r.monitor / f"{r.path.stem}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps([{"targets": [addr], "labels": {**r.labels, "exposition": r.path.name}}]))
    cfg_path = workdir / "prometheus.yml"
    cfg_path.write_text(yaml.safe_dump(config(run_dir, namespace, rec_dir), sort_keys=False))
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen([binary, f"--config.file={cfg_path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, recorded)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2):
                break
            assert proc.poll() is None and time.monotonic() < deadline, (
                f"prometheus did not come up: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield prom
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        for r in recorded:
            r.stop()


RECORDED_POD = "recorded-worker-0"  # the one worker pod the recorded KVBM and vLLM expositions stand for


def recorded_expositions(namespace: str) -> list[Recorded]:
    """The recorded expositions (tests/data/recorded/README.md), each as the target its monitor would give it:
    dcgm-exporter's Service in ``monitoring``; KVBM's exporter and the vLLM worker's system port on one worker
    pod of the campaign's namespace (the KVBM dashboard selects the vLLM series by the KVBM pods)."""
    pod = {"namespace": namespace, "pod": RECORDED_POD, "container": monitors.CONTAINER}
    return [
        Recorded(RECORDED_DIR / "dcgm-exporter-l4.prom", monitors.DCGM.name,
                 {"namespace": monitors.MONITORING_NAMESPACE, "service": monitors.DCGM.name,
                  "pod": "dcgm-exporter-recorded", "container": "exporter", "endpoint": monitors.DCGM.port}),
        Recorded(RECORDED_DIR / "kvbm-1.6.1.prom", monitors.KVBM.name, {**pod, "endpoint": monitors.KVBM.port}),
        Recorded(RECORDED_DIR / "vllm-0.31.0-worker.prom", monitors.WORKER.name,
                 {**pod, "endpoint": monitors.WORKER.port, "dynamo_component_type": "worker"}),
    ]
