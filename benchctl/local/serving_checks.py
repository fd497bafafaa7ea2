"""What the local serving adapter checks and reads beside its processes: a request it can serve, free loopback
ports, a worker's KV-transfer settings from its log, and why a process died."""

from __future__ import annotations

import random
import re
import socket
from pathlib import Path
from typing import Any

from benchctl import logtext
from benchctl.campaign.ports import JSON, DeploymentRequest
from benchctl.errors import ServingFailed
from benchctl.local import processes
from benchctl.planning.mocker import ROLES, mocker_flags

ROUTERS = ("round-robin", "kv")
MODES = ("aggregated", "disaggregated")
_PORT_LOW, _PORT_HIGH = 20000, 32767  # see _free_ports



def validate_spec(spec: DeploymentRequest) -> None:
    problems = []
    if spec.mode not in MODES:
        problems.append(f"mode {spec.mode!r} (valid: {', '.join(MODES)})")
    if spec.router not in ROUTERS:
        problems.append(f"router {spec.router!r} (valid: {', '.join(ROUTERS)})")
    roles = [g.role for g in spec.groups]
    for g in spec.groups:
        if g.role not in ROLES:
            problems.append(f"group role {g.role!r} (valid: {', '.join(ROLES)})")
        if g.replicas < 1:
            problems.append(f"group {g.role} replicas {g.replicas} (must be >= 1)")
    if spec.mode == "aggregated" and (not roles or set(roles) != {"worker"}):
        problems.append(f"aggregated needs only 'worker' groups, got {roles}")
    if spec.mode == "disaggregated" and (set(roles) != {"prefill", "decode"}):
        problems.append(f"disaggregated needs 'prefill' and 'decode' groups, got {roles}")
    if not spec.deployment_id or "/" in spec.deployment_id or spec.deployment_id.startswith("."):
        problems.append(f"deployment_id {spec.deployment_id!r} (must be a plain file name)")
    if problems:
        raise ValueError("invalid deployment spec: " + "; ".join(problems))
    mocker_flags(spec.mocker, "worker")  # raises on unknown knobs


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports in [20000, 32767] (all held open while choosing, so they differ).

    Dynamo 1.6.1 parses ``DYN_SYSTEM_PORT`` as a signed 16-bit integer: ports above 32767 (all of
    Linux's default ephemeral range, which ``bind(0)`` would return) are rejected at start-up. Staying
    below the ephemeral range also keeps outgoing connections from grabbing them before the
    process binds. Random order makes clashes between concurrent deployments unlikely.
    """
    candidates = list(range(_PORT_LOW, _PORT_HIGH + 1))
    random.SystemRandom().shuffle(candidates)
    socks: list[socket.socket] = []
    try:
        for port in candidates:
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise ServingFailed(f"no {n} free loopback ports in {_PORT_LOW}-{_PORT_HIGH}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_TRANSFER_FIELDS = re.compile(r"\b(kv_transfer_bandwidth|kv_transfer_bytes_per_token|kv_transfer_timing_mode): "
                              r"(Some\(([^)]*)\)|None|[A-Za-z]+)")


def worker_transfer_config(log: Path) -> JSON:
    """The transfer settings a ``dynamo.mocker`` worker logged at start-up (its effective config, e.g.
    ``kv_transfer_bandwidth: Some(9.6), kv_transfer_bytes_per_token: Some(98304), kv_transfer_timing_mode:
    FullPrompt``), as numbers where they are; {} when the log holds none."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return {}
    out: JSON = {}
    for m in _TRANSFER_FIELDS.finditer(text):
        raw = m.group(3) if m.group(3) is not None else m.group(2)
        try:
            value: Any = float(raw) if "." in raw else int(raw)
        except ValueError:
            value = None if raw == "None" else raw
        out[m.group(1)] = value
    return out


def _tail(path: str | Path, n: int = logtext.MAX_LINES) -> str:
    """The lines of a log that explain an end (``benchctl.logtext.tail``: escapes stripped, from the last error)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return logtext.tail(text, n) or "(empty log)"


def _describe_dead(rec: JSON) -> str:
    """How a process ended first (its exit code or signal), then the log lines that explain it."""
    how = logtext.exit_text(processes.exit_code(rec))
    return f"{rec['name']} (pid {rec['pid']}) {how}; last lines of {rec['log']}:\n{_tail(rec['log'])}"
