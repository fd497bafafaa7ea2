"""Every local process on loopback: an ``LD_PRELOAD`` shim that turns a wildcard ``bind()`` into a
loopback one (``loopback_bind.c``), and sets ``TCP_NODELAY`` on the mocker's handoff connections.

Our own flags and variables already put Dynamo's HTTP server, request plane, response streams and system
(metrics) server on 127.0.0.1 (``serving.py``), and AIPerf talks to its services over IPC. What no flag
reaches, in Dynamo 1.6.1: the event plane's direct-mode ZMQ PUB sockets (forward-pass metrics, KV metrics,
KV events, active sequences) bind ``tcp://0.0.0.0:0`` and advertise ``DYN_EVENT_PLANE_HOST``
(ai-dynamo/dynamo ``lib/runtime/src/transports/event_plane/mod.rs``), and the mocker's prefill bootstrap
server binds ``0.0.0.0:<port>`` (``lib/llm/src/mocker``, ``BootstrapServer::start``). Both are Rust in
``dynamo/_core.abi3.so``, which calls libc's ``bind`` through the dynamic linker, so the shim catches them.

The same shim sets ``TCP_NODELAY`` on TCP connections to, or accepted on, the ports listed in
``BENCHCTL_NODELAY_PORTS`` (:func:`nodelay_env`; the local engine lists a deployment's prefill bootstrap
ports). The 1.6.1 mocker's prefill -> decode rendezvous is a framed exchange over a fresh TCP connection per
request with ``TCP_NODELAY`` on neither end; the decode writes two frames back to back and Nagle's algorithm
holds the second until the prefill's delayed ACK (at least 40 ms on Linux): ~45 ms on every disaggregated first
token that no GPU deployment has (docs/FACTS.md, "The mocker's handoff and Nagle's algorithm").

The shim is built once from its C source with the system C compiler (``cc``) into
``<sys.prefix>/share/benchctl/lib/`` (named after the source's hash: an edited source is rebuilt), and a
deployment refuses to start without it (:class:`benchctl.errors.ServingFailed`: no listener on every
interface, ever). ``python -m benchctl.local.loopback`` builds it and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from benchctl.errors import ServingFailed

SOURCE = Path(__file__).with_name("loopback_bind.c")


def shim_dir() -> Path:
    """``$BENCHCTL_LIB_DIR`` or ``<sys.prefix>/share/benchctl/lib`` (inside the venv)."""
    override = os.environ.get("BENCHCTL_LIB_DIR")
    return Path(override) if override else Path(sys.prefix) / "share" / "benchctl" / "lib"


def shim_path() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return shim_dir() / f"loopback_bind-{digest}.so"


def ensure_shim() -> Path:
    """The built shim (built now if missing); ServingFailed naming what is missing when it cannot be."""
    target = shim_path()
    if target.is_file():
        return target
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ServingFailed(
            f"no C compiler (cc) to build {SOURCE.name}, the shim that keeps Dynamo's listeners on loopback: "
            f"install one (e.g. apt-get install gcc), or build it elsewhere into {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out), str(SOURCE), "-ldl"],
                             capture_output=True, text=True, timeout=120, check=False)
        if res.returncode != 0:
            raise ServingFailed(f"building {SOURCE.name} with {cc} failed: {res.stderr.strip()[-800:]}")
        out.replace(target)  # atomic: a concurrent builder's copy is the same bytes
    return target


def preload_env(existing: str | None = None) -> dict[str, str]:
    """The ``LD_PRELOAD`` value putting the shim first (before whatever the caller's environment had)."""
    current = os.environ.get("LD_PRELOAD") if existing is None else existing
    shim = str(ensure_shim())
    return {"LD_PRELOAD": f"{shim}:{current}" if current else shim}


NODELAY_PORTS_VAR = "BENCHCTL_NODELAY_PORTS"


def nodelay_env(ports: Iterable[int]) -> dict[str, str | None]:
    """The shim's list of TCP ports whose connections get ``TCP_NODELAY`` (a deployment's prefill bootstrap
    ports: the mocker's handoff rendezvous), or the variable unset (None) when there are none, so a caller's
    stray value never reaches a process."""
    listed = ",".join(str(int(p)) for p in ports)
    return {NODELAY_PORTS_VAR: listed or None}


REDIRECT_PORTS_VAR = "BENCHCTL_REDIRECT_PORTS"


def redirect_env(pairs: dict[int, int]) -> dict[str, str | None]:
    """The shim's ``FROM:TO`` port pairs (a loopback connection to FROM goes to TO: the frontend reaching an
    aggregated twin worker through its dispatch hold, :mod:`benchctl.local.hold`), or the variable unset (None)."""
    listed = ",".join(f"{int(a)}:{int(b)}" for a, b in pairs.items())
    return {REDIRECT_PORTS_VAR: listed or None}


if __name__ == "__main__":
    print(ensure_shim())
