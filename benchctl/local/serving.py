"""``ServingPort`` on this machine: a real Dynamo frontend plus Dynamo mocker workers (no GPU).

Layout of one deployment, under ``<workdir>/deployments/<deployment_id>/``:

* ``state.json``   the state dict returned by ``deploy`` (also what ``teardown`` updates);
* ``discovery/``   the private file-discovery directory (``DYN_FILE_KV``); a stale directory from an
  earlier deployment makes the frontend answer 404 for the model, so it is wiped on deploy and
  removed on teardown;
* ``logs/<name>.log`` stdout+stderr of each process (``frontend``, ``worker-0``, ``prefill-0``, ...).

Processes (all bound to 127.0.0.1: by the flags and variables below, and, for the listeners Dynamo 1.6.1
binds on 0.0.0.0 whatever it is told (event-plane ZMQ PUB sockets, the prefill bootstrap server), by the
``LD_PRELOAD`` shim of ``loopback.py``):

* ``python -m dynamo.frontend --http-host 127.0.0.1 --http-port P --discovery-backend file
  --request-plane tcp --router-mode {round-robin|kv}``;
* one ``python -m dynamo.mocker`` process PER WORKER REPLICA (``--model-path <snapshot> --model-name
  <model> --discovery-backend file --request-plane tcp`` + knobs; disaggregated: ``--disaggregation-mode
  prefill --bootstrap-ports B`` or ``--disaggregation-mode decode``), each with its own metrics port
  (``DYN_SYSTEM_PORT``, ``DYN_SYSTEM_HOST=127.0.0.1``). Why not ``--num-workers N`` in one process:
  all N workers of a process share its single system port, the second one fails to bind it ("Address
  already in use") and its metrics are lost, so per-worker metrics need one process per worker. A
  mocker process costs about 100 MB RSS and little CPU, so this stays light at benchmark scale.

Teardown order: frontend first, then all workers at once. Stopping the frontend first means no new
request reaches a worker that is going away (clients get a clean connection refusal instead of
5xx errors from half-dead routes), and the workers' de-registrations go to a discovery directory that
nobody watches any more; the workers are then stopped together so their grace periods overlap.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchctl.atomic import atomic_write
from benchctl.campaign.ports import JSON, DeploymentRequest, WorkerGroupSpec
from benchctl.errors import ServingFailed
from benchctl.local import cpu_engine, engine_model, loopback, modeldir, processes, scrape
from benchctl.local.serving_checks import (
    _describe_dead,
    _free_ports,
    validate_spec,
    worker_transfer_config,
)
from benchctl.local.smoke import loopback_http, parse_completion
from benchctl.planning.mocker import MOCKER_PRECISION, mocker_flags

# Dynamo component under which each role registers its `generate` endpoint (frontend /health).
_COMPONENT_OF_ROLE = {"worker": "backend", "decode": "backend", "prefill": "prefill"}
_HTTP_TIMEOUT_S = 2.0
_CHAT_TIMEOUT_S = 5.0
SERVING_NICENESS = 5  # the load generator gets the cores first, as on its own node on EKS


class LocalServing:
    """Dynamo frontend + mocker processes on 127.0.0.1, one directory per deployment under ``workdir``."""

    def __init__(self, workdir: Path | str, twin_store: Path | None = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.twin_store = twin_store  # the workspace whose twin/ holds the timing profiles (None: no twin)

    # -- helpers -----------------------------------------------------------------------------
    def deployment_dir(self, deployment_id: str) -> Path:
        return self.workdir / "deployments" / deployment_id

    def _state_file(self, deployment_id: str) -> Path:
        return self.deployment_dir(deployment_id) / "state.json"

    def load_state(self, deployment_id: str) -> JSON | None:
        try:
            return json.loads(self._state_file(deployment_id).read_text())
        except (OSError, ValueError):
            return None

    def _save_state(self, state: JSON) -> None:
        atomic_write(self._state_file(state["deployment_id"]), json.dumps(state, indent=2, sort_keys=True) + "\n")

    @staticmethod
    def _all_alive(state: JSON) -> bool:
        return bool(state.get("processes")) and all(processes.is_alive(r) for r in state["processes"])

    # -- ServingPort ---------------------------------------------------------------------------
    def prepare(self, request: DeploymentRequest) -> None:
        """Nothing to start before the pools: the local model directory is generated at plan time."""

    def deploy(self, spec: DeploymentRequest) -> JSON:
        """Start frontend and workers; return the state. Idempotent per deployment id:
        a live deployment with the same id is returned as is, a dead or torn-down one is replaced."""
        validate_spec(spec)
        old = self.load_state(spec.deployment_id)
        if old is not None and not old.get("torn_down") and self._all_alive(old):
            return old
        if old is not None:
            self.teardown(old)

        ddir = self.deployment_dir(spec.deployment_id)
        discovery = ddir / "discovery"
        logs = ddir / "logs"
        shutil.rmtree(discovery, ignore_errors=True)
        discovery.mkdir(parents=True)
        logs.mkdir(parents=True, exist_ok=True)
        model_dir = modeldir.ensure_model_dir()
        cpu = spec.target is not None and cpu_engine.is_cpu_engine(spec.target.experiment,
                                                                     {p.name: p for p in spec.target.pools})
        try:
            engine_dir = engine_model.ensure() if cpu else None
        except (OSError, RuntimeError) as e:
            raise ServingFailed(f"deploy {spec.deployment_id}: the CPU engine's model: {e}") from e
        knobs, twins = ({}, {}) if cpu else self._twin_knobs(spec)

        workers: list[tuple[str, WorkerGroupSpec]] = []
        for g in spec.groups:
            workers += [(g.role, g)] * g.replicas
        n_prefill = 0 if cpu else sum(1 for role, _ in workers if role == "prefill")  # the mocker's bootstrap ports
        # the twin's dispatch hold (benchctl.local.hold): the frontend's response-stream port and the hold's
        hold_ms = {r: float(t["dispatch_ms"]) for r, t in twins.items() if t.get("dispatch_ms")}
        delay_ms = max(hold_ms.values(), default=0.0)
        ports = _free_ports(1 + len(workers) + n_prefill + (2 if delay_ms else 0) + (len(workers) if cpu else 0))
        cpu_ports = iter(ports[1 + len(workers):] if cpu else [])  # each CPU engine worker's KV events
        http_port, system_ports, bootstrap_ports = (
            ports[0],
            ports[1 : 1 + len(workers)],
            ports[1 + len(workers) : 1 + len(workers) + n_prefill],
        )
        held = {ports[-2]: ports[-1]} if delay_ms else {}  # {frontend's response-stream port: the hold's port}

        base_env: dict[str, str | None] = {
            **modeldir.tokenizer_env(),
            **loopback.preload_env(),  # the listeners no flag reaches (event plane PUBs, bootstrap) on loopback
            "DYN_FILE_KV": str(discovery),
            "DYN_TCP_RPC_HOST": "127.0.0.1",
            "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
            "DYN_EVENT_PLANE_HOST": "127.0.0.1",
            "DYN_SYSTEM_HOST": "127.0.0.1",
            "DYN_SYSTEM_PORT": None,  # only workers get a system (metrics) port
            # TCP_NODELAY on the prefill -> decode handoff connections (the shim, loopback_bind.c): without it
            # Nagle + the delayed ACK add ~45 ms to every disaggregated first token (nodelay_env)
            **loopback.nodelay_env(bootstrap_ports),
            **loopback.redirect_env({}),  # unset: only a held worker's answers go through the hold (below)
            "PYTHONUNBUFFERED": "1",
        }
        common = ["--discovery-backend", "file", "--request-plane", "tcp"]
        url = f"http://127.0.0.1:{http_port}"
        state: JSON = {
            "deployment_id": spec.deployment_id,
            "url": url,
            "model": spec.model_name,
            "mode": spec.mode,
            "router": spec.router,
            "labels": dict(spec.labels),
            "workdir": str(ddir),
            "discovery_dir": str(discovery),
            "model_path": str(model_dir),
            "metrics_urls": {"frontend": f"{url}/metrics"},
            "components": [],
            "processes": [],
            "expected_instances": {},
            "started_at": time.time(),
            "torn_down": False,
            "twins": twins,
            "worker_engine": cpu_engine.LABEL if cpu else "Dynamo mocker (SIMULATED)",
        }
        try:
            if held:
                hold_argv = [sys.executable, "-m", "benchctl.local.hold", "--delay-ms", f"{delay_ms:.3f}",
                             *(f"{h}:{f}" for f, h in held.items())]
                rec = processes.start("dispatch-hold", hold_argv, {"PYTHONUNBUFFERED": "1"}, logs / "dispatch-hold.log",
                                      cwd=ddir, niceness=SERVING_NICENESS)
                state["processes"].append(rec)
                state["components"].append({"name": "dispatch-hold", "role": "dispatch-hold",
                                             "dispatch_ms": delay_ms, "ports": held})
                self._save_state(state)
            fe_argv = [
                sys.executable, "-m", "dynamo.frontend",
                "--http-host", "127.0.0.1", "--http-port", str(http_port),
                *common, "--router-mode", spec.router,
            ]  # fmt: skip
            fe_env = {**base_env, **({"DYN_TCP_RESPONSE_STREAM_PORT": str(next(iter(held)))} if held else {})}
            rec = processes.start("frontend", fe_argv, fe_env, logs / "frontend.log", cwd=ddir, niceness=SERVING_NICENESS)
            state["processes"].append(rec)
            self._save_state(state)  # records on disk at once: a crash mid-deploy stays tear-down-able
            state["components"].append({"name": "frontend", "role": "frontend", "http_port": http_port})

            counters: dict[str, int] = {}
            bootstrap_iter = iter(bootstrap_ports)
            for (role, group), sys_port in zip(workers, system_ports, strict=True):
                idx = counters.get(role, 0)
                counters[role] = idx + 1
                name = f"{role}-{idx}"
                component: JSON = {
                    "name": name,
                    "role": role,
                    "pool": group.pool,
                    "system_port": sys_port,
                    "tensor_parallel": group.tensor_parallel,
                }
                extra: dict[str, str] = {}
                if cpu and spec.target is not None and engine_dir is not None:  # Dynamo's vLLM worker, on CPU
                    events = next(cpu_ports)
                    argv, extra = cpu_engine.process(spec.target, role, group.pool, model_dir=engine_dir,
                                                     kv_events_port=events,
                                                     core=len(state["components"]) % (os.cpu_count() or 1))
                    component["kv_events_port"] = events
                else:
                    argv = [
                        sys.executable, "-m", "dynamo.mocker",
                        "--model-path", str(model_dir), "--model-name", spec.model_name,
                        *common, *mocker_flags(knobs, role),
                    ]  # fmt: skip
                    if role == "prefill":
                        bport = next(bootstrap_iter)
                        argv += ["--disaggregation-mode", "prefill", "--bootstrap-ports", str(bport)]
                        component["bootstrap_port"] = bport
                    elif role == "decode":
                        argv += ["--disaggregation-mode", "decode"]
                env = {**base_env, "DYN_SYSTEM_PORT": str(sys_port), **extra}
                if role in hold_ms:  # its answers reach the frontend through the hold
                    env.update(loopback.redirect_env(held))
                    component["dispatch_ms"] = hold_ms[role]
                rec = processes.start(name, argv, env, logs / f"{name}.log", cwd=ddir, niceness=SERVING_NICENESS)
                state["processes"].append(rec)
                metrics_url = f"http://127.0.0.1:{sys_port}/metrics"
                component["metrics_url"] = metrics_url
                state["components"].append(component)
                state["metrics_urls"][name] = metrics_url
                comp = _COMPONENT_OF_ROLE[role]
                state["expected_instances"][comp] = state["expected_instances"].get(comp, 0) + 1
                self._save_state(state)
        except BaseException as e:
            processes.stop(state["processes"], grace_s=2.0)
            shutil.rmtree(discovery, ignore_errors=True)
            state["torn_down"] = True
            self._save_state(state)
            if isinstance(e, Exception):
                raise ServingFailed(f"deploy {spec.deployment_id}: could not start processes: {e}") from e
            raise
        namespace = spec.target.kubernetes.namespace if spec.target is not None else "local"
        scrape.write_targets(self.workdir, spec.deployment_id, namespace, state["components"])
        self._save_state(state)
        return state

    def _twin_knobs(self, spec: DeploymentRequest) -> tuple[JSON, JSON]:
        """The mocker knobs with each role's twin (``benchctl.forecast.twin``: its profile, KV blocks, speedup 1; what the
        spec set explicitly wins), and per role what times it (name, label, profile, or a note)."""
        if self.twin_store is None or spec.target is None:
            return dict(spec.mocker), {}
        from benchctl.forecast import twin

        t = spec.target
        exp = t.experiment
        twins = twin.resolve(self.twin_store, {p.name: p for p in t.pools}, (t.weights or t.model).name, exp)
        knobs = twin.mocker_knobs(spec.mocker, twins)
        return knobs, {r: {"name": v.name, "label": v.label, "profile": v.npz, "num_gpu_blocks": v.num_gpu_blocks,
                           "note": v.note, "dispatch_ms": v.dispatch_ms} for r, v in twins.items()}

    def probe_ready(self, state: JSON) -> bool:
        """One quick check: all processes alive (else ServingFailed), every worker registered with the
        frontend, /v1/models lists the model and one tiny chat completion succeeds."""
        if state.get("torn_down"):
            raise ServingFailed(f"deployment {state['deployment_id']} was torn down")
        self.check_alive(state)
        url = state["url"]
        cpu = state.get("worker_engine") == cpu_engine.LABEL
        try:
            status, raw = loopback_http("GET", url + "/health", None, _HTTP_TIMEOUT_S)
            if status != 200:
                return False
            counts: dict[str, set[Any]] = {}
            for inst in json.loads(raw).get("instances") or []:
                if inst.get("endpoint") == "generate":
                    counts.setdefault(inst.get("component"), set()).add(inst.get("instance_id"))
            for comp, want in (state.get("expected_instances") or {}).items():
                if len(counts.get(comp, ())) < want:
                    return False
            status, raw = loopback_http("GET", url + "/v1/models", None, _HTTP_TIMEOUT_S)
            if status != 200 or state["model"] not in {
                m.get("id") for m in json.loads(raw).get("data") or []
            }:
                return False
            body = {
                "model": state["model"],
                "messages": [{"role": "user", "content": "ping"}],
                "max_tokens": 2,
            }
            status, raw = loopback_http("POST", url + "/v1/chat/completions", body,
                                        cpu_engine.FIRST_ANSWER_S if cpu else _CHAT_TIMEOUT_S)
            if status != 200:
                return False
            parse_completion(raw)
        except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError, TypeError):
            return False
        return True

    def versions(self, state: JSON) -> JSON:
        """Processes, not images: nothing beyond the run's package versions (``runner.versions``); the precision
        run is not applicable (the mocker loads no weights and computes nothing). The CPU engine: the engine
        environment's packages (as the pre-pull container reports an image's on EKS) and what differs from EKS."""
        if state.get("worker_engine") != cpu_engine.LABEL:
            return {"precision": MOCKER_PRECISION}
        return {"precision": cpu_engine.PRECISION, "worker_engine": cpu_engine.LABEL,
                "cpu_engine_changes": cpu_engine.changes_text(),
                "engine_packages": {"local .venv-engine": cpu_engine.packages(engine_model.ENGINE_PYTHON)}}

    def metrics_urls(self, state: JSON) -> dict[str, str]:
        """The frontend's and every worker's ``/metrics``, by component name."""
        return dict(state.get("metrics_urls") or {})

    def network(self, state: JSON) -> JSON:
        """What a person needs to judge a local run's transfer figures: no pod network (loopback), the
        loopback MTU, each process and its ports, and the prefill -> decode transfer the mocker workers report
        modelling (their start-up config in their logs, not our configuration)."""
        try:
            mtu: int | None = int(Path("/sys/class/net/lo/mtu").read_text().strip())
        except (OSError, ValueError):
            mtu = None
        pids = {r["name"]: r["pid"] for r in state.get("processes") or []}
        placement = [{k: c.get(k) for k in ("name", "role", "system_port", "bootstrap_port", "http_port") if c.get(k)}
                     | {"host": "127.0.0.1", "pid": pids.get(c["name"])} for c in state.get("components") or []]
        modelled = {}
        for c in state.get("components") or []:
            if c.get("role") in ("prefill", "decode", "worker"):
                found = worker_transfer_config(Path(state["workdir"]) / "logs" / f"{c['name']}.log")
                if found:
                    modelled[c["name"]] = found
        disagg = state.get("mode") == "disaggregated"
        return {
            "engine": "local",
            "cni": "none: every process on loopback (127.0.0.1), no pod network",
            "zones": ["local"],
            "mtu": mtu, "mtu_source": "/sys/class/net/lo/mtu",
            "placement": placement,
            "transfer_backend": ("none: Dynamo mocker's transfer model (SIMULATED): the prefill worker holds its "
                                 "answer for prompt tokens x kv_bytes_per_token / kv_transfer_bandwidth; the "
                                 "prefill -> decode rendezvous is a loopback TCP bootstrap port, no KV bytes move")
                                if disagg else "none: aggregated (no prefill -> decode transfer)",
            "transfer_modelled": modelled,
            "source": "the mocker workers' logged start-up config and the local process table",
        }

    def remaining(self, state: JSON) -> list[str]:
        """Nothing: ``teardown`` stops every process before it returns (or raises naming what it could not)."""
        return []

    def _records(self, state: JSON, disk: JSON | None = None) -> list[JSON]:
        """Every process of the deployment: its state's and those ``deploy`` kept on disk (a crash between)."""
        disk = self.load_state(state["deployment_id"]) or {} if disk is None else disk
        recs: list[JSON] = []
        seen = set()
        for rec in [*(state.get("processes") or []), *(disk.get("processes") or [])]:
            key = (int(rec["pid"]), int(rec["start_time"]))
            if key not in seen:
                seen.add(key)
                recs.append(rec)
        return recs

    def observe(self, state: JSON, removed: JSON | None) -> list[JSON]:
        """Read every process of the deployment back by its pid and start time (``/proc``), and its discovery
        directory: the receipt's local resources."""
        out: list[JSON] = []
        for rec in self._records(state):
            alive = processes.is_alive(rec)
            out.append({"kind": "process", "name": f"{rec['name']} (pid {rec['pid']})", "pid": int(rec["pid"]),
                        "present": alive, "why": "still running after teardown" if alive else ""})
        discovery = Path(state.get("discovery_dir") or self.deployment_dir(state["deployment_id"]) / "discovery")
        out.append({"kind": "directory", "name": str(discovery), "present": discovery.exists(),
                    "why": "not removed" if discovery.exists() else ""})
        return out

    def check_alive(self, state: JSON) -> None:
        dead = [r for r in state.get("processes") or [] if not processes.is_alive(r)]
        if dead:
            raise ServingFailed(
                f"deployment {state['deployment_id']}: "
                + f"{len(dead)} process(es) died: {', '.join(r['name'] for r in dead)}\n"
                + "\n".join(_describe_dead(r) for r in dead)
            )

    def teardown(self, state: JSON) -> JSON:
        """Stop the frontend, then all workers; remove the discovery directory. Idempotent.

        Also works with a partial state (e.g. ``{"deployment_id": ..., "pending": True}`` recorded
        before a deploy that crashed): the process records that ``deploy`` keeps in
        ``<workdir>/deployments/<id>/state.json`` (written after every process start) are used too.
        """
        dep_id = state["deployment_id"]
        disk = self.load_state(dep_id) or {}
        recs = self._records(state, disk)
        running = [r["name"] for r in recs if processes.is_alive(r)]
        scrape.remove_targets(self.workdir, dep_id)  # before the processes go: no scrape of a dead or reused port
        killed = processes.stop([r for r in recs if r["name"] == "frontend"], grace_s=5.0)
        killed += processes.stop([r for r in recs if r["name"] != "frontend"], grace_s=5.0)
        removed = []
        discovery = Path(
            state.get("discovery_dir")
            or disk.get("discovery_dir")
            or self.deployment_dir(dep_id) / "discovery"
        )
        if discovery.exists():
            shutil.rmtree(discovery, ignore_errors=True)
            removed.append(str(discovery))
        leftovers = [
            r["name"]
            for r in recs
            if processes.group_members(int(r["pid"]))
            and processes.proc_start_time(int(r["pid"])) in (None, r["start_time"])
        ]
        if leftovers:
            raise ServingFailed(f"deployment {dep_id}: could not stop {leftovers}")
        if disk:
            with contextlib.suppress(OSError):
                self._save_state({**disk, "torn_down": True, "torn_down_at": time.time()})
        state["torn_down"] = True
        return {
            "deployment_id": dep_id,
            "stopped": running,
            "killed": [r["name"] for r in killed],
            "removed": removed,
        }
