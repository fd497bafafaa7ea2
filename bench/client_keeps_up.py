"""Does the client keep up? AIPerf on this machine's cores at the smoke spec's highest sweep concurrency, against
the same AIPerf at concurrency 1 as the baseline, in the same run.

The smoke spec is cut to its concurrency sweep at two loads: 1 (the baseline: one request in flight, the least
the client can be asked) and the sweep's highest (16 in ``examples/smoke.yaml``), in every experiment, and run
through the whole local engine (``benchctl.local.runner.run_campaign``: the load runner forks AIPerf, ingestion
computes the ``client_*`` columns, ``benchctl.lake.client_load``). The servers are the local twin when the engine
has one (the spec's ``mocker.twin``, default ``auto``: the mocker timed by aiconfigurator's A100 profile), or,
with ``--speedup X``, the mocker's built-in timing sped up X times (say which in the note).

Printed per experiment, c=1 then c=max, and the ratio max/1 (machine noise affects both alike):
requests issued on time, issue lag p50/p95 against its budget, AIPerf's credit-to-start p95, achieved vs offered
concurrency (AIPerf's effective concurrency / the step's concurrency), AIPerf's CPU (cores and share of the
cores it may use, and the share of its runnable time its processes waited for a CPU: the host's contention), and the server's TTFT p50, ITL p50 and output tokens/s beside aiconfigurator's prediction
for the same step (how close to A100 speed the servers ran). The machine's load average before and after says
how shared the cores were. Last line: ``client keeps up: yes/no (why)`` from ``client_load.verdict`` of every
step at the highest concurrency.

Usage:
.venv/bin/python bench/client_keeps_up.py [SPEC] [--out DIR] [--speedup X]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CID = "client-bench"


def bench_spec(spec: dict[str, Any], speedup: float | None) -> tuple[dict[str, Any], int]:
    """The spec cut to its concurrency sweep at 1 and its highest concurrency; that concurrency."""
    sweeps = [w for w in spec["workloads"] if w.get("kind") == "concurrency_sweep"]
    if not sweeps:
        raise SystemExit("the spec has no concurrency_sweep workload")
    sweep = dict(sweeps[0])
    if not isinstance(sweep["concurrency"], list):
        raise SystemExit("the spec's first concurrency_sweep has no fixed loads (concurrency: auto): give it some")
    top = max(int(c) for c in sweep["concurrency"])
    sweep["concurrency"] = sorted({1, top})
    sweep.pop("search", None)  # fixed loads only: the bench measures the client at 1 and the highest
    out = {**spec, "name": f"{spec.get('name', 'spec')}-client", "workloads": [sweep]}
    out.pop("comparisons", None)  # they may name workloads that are gone
    if speedup is not None:
        import importlib.util

        twin = {"twin": "off"} if importlib.util.find_spec("benchctl.forecast.twin") else {}  # an engine with a twin
        out["mocker"] = {**(spec.get("mocker") or {}), "speedup_ratio": speedup, **twin}
    return out, top


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{float(v) * 100:.1f} %"


def _num(v: Any, unit: str = "", digits: int = 2) -> str:
    return "n/a" if v is None else f"{float(v):.{digits}f}{unit}"


def _ratio(a: Any, b: Any) -> str:
    return "n/a" if a is None or b in (None, 0) else f"{float(a) / float(b):.2f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "smoke.yaml"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--speedup", type=float, default=None,
                    help="no twin: the mocker's built-in timing sped up this many times (mocker.twin off)")
    args = ap.parse_args()

    from benchctl.lake import client_load
    from benchctl.local.lake import LocalLake
    from benchctl.local.runner import run_campaign

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-client-"))
    out.mkdir(parents=True, exist_ok=True)
    spec, top = bench_spec(yaml.safe_load(Path(args.spec).read_text()), args.speedup)
    spec_path = out / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    load_before = os.getloadavg()
    t0 = time.monotonic()
    result = run_campaign(spec_path, out, campaign_id=CID)
    wall = time.monotonic() - t0
    load_after = os.getloadavg()
    if result.status != "SUCCEEDED":
        print(f"campaign {result.status}: {result.error} {result.cause}", file=sys.stderr)
        return 1
    lake = LocalLake(out / "lake")
    steps = lake.read_table("steps", CID)
    predicted = {(p["experiment"], p["step_id"]): p for p in lake.read_table("predictions", CID)}
    timed = "the mocker x" + f"{args.speedup:g} (no twin)" if args.speedup else "the twin (mocker.twin auto)"
    print(f"results in: {out}   servers: {timed}   campaign wall {wall:.0f} s")
    print(f"machine: {os.cpu_count()} cores, load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          "(shared with other work: contention is in every figure, baseline and load alike)")
    verdicts: list[tuple[str, bool | None, str]] = []
    rows = [("requests issued on time", "client_on_time_fraction", _pct),
            ("issue lag p50", "client_issue_lag_p50_ms", lambda v: _num(v, " ms")),
            ("issue lag p95", "client_issue_lag_p95_ms", lambda v: _num(v, " ms")),
            ("lag budget", "client_lag_budget_ms", lambda v: _num(v, " ms")),
            ("AIPerf credit-to-start p95", "client_credit_to_start_p95_ms", lambda v: _num(v, " ms")),
            ("achieved concurrency", "client_effective_concurrency", _num),
            ("AIPerf CPU (cores)", "client_cpu_cores", _num),
            ("AIPerf waiting for a CPU", "client_cpu_wait_fraction", _pct),
            ("TTFT p50", "ttft_p50_ms", lambda v: _num(v, " ms", 1)),
            ("ITL p50", "itl_p50_ms", lambda v: _num(v, " ms", 2)),
            ("output tokens/s", "output_tokens_per_s", lambda v: _num(v, "", 0)),
            ("requests/s", "request_throughput_per_s", lambda v: _num(v, "", 1))]
    for exp in sorted({s["experiment"] for s in steps}):
        by_c = {int(s["concurrency"]): s for s in steps if s["experiment"] == exp and s["concurrency"]}
        base, load = by_c.get(1), by_c.get(top)
        if base is None or load is None:
            print(f"{exp}: missing the c=1 or c={top} step")
            verdicts.append((exp, None, "step missing"))
            continue
        print(f"\n{exp} ({base['mode']})           c=1 (baseline)      c={top}      c={top} / c=1")
        for label, col, f in rows:
            print(f"  {label:28s} {f(base[col]):>14s} {f(load[col]):>12s}   {_ratio(load[col], base[col]):>8s}")
        for s in (base, load):
            c = int(s["concurrency"])
            share = (None if s["client_cpu_cores"] is None or not s["client_cpu_cores_available"]
                     else s["client_cpu_cores"] / s["client_cpu_cores_available"])
            offered = (s["client_effective_concurrency"] or 0) / c if s["client_effective_concurrency"] else None
            p = predicted.get((exp, s["step_id"])) or {}
            print(f"  c={c}: achieved/offered concurrency {_pct(offered)}; AIPerf CPU share {_pct(share)} of "
                  f"{_num(s['client_cpu_cores_available'], '', 0)} cores; vs aiconfigurator A100: TTFT "
                  f"{_ratio(s['ttft_p50_ms'], p.get('predicted_ttft_ms'))}, ITL "
                  f"{_ratio(s['itl_p50_ms'], p.get('predicted_itl_ms'))}, output tokens/s "
                  f"{_ratio(s['output_tokens_per_s'], p.get('predicted_output_tokens_per_s'))} of predicted")
        bound, why = client_load.verdict(load)
        print(f"  c={top}: {'CLIENT-BOUND' if bound else 'keeps up' if bound is False else 'not measured'}: {why}")
        verdicts.append((exp, bound, why))
    bad = [(e, w) for e, b, w in verdicts if b is not False]
    if bad:
        print(f"client keeps up: no ({'; '.join(f'{e} c={top}: {w}' for e, w in bad)})")
        return 1
    print(f"client keeps up: yes (every experiment at c={top}: {'; '.join(f'{e}: {w}' for e, _, w in verdicts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
