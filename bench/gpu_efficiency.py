"""GPU efficiency of a campaign on AWS: measured-load GPU-hours over billed GPU-hours, SIMULATED.

Nothing here runs on AWS. The timeline comes from bench/schedule_sim.py with the stated latencies it
prints (node boot, image pull, model download/load, smoke, warm-up, teardown, EC2 per-second billing
with a 60 s minimum) and the plan's own load estimates. Baseline = today's engine (each experiment
scales its pools and restores them at its end; image pull and model download after the nodes are
Ready, one AIPerf Job per step, 30 s polls, ingest on the critical path). Every gain is a ratio to the
baseline computed in the same run with the same latencies. The first row is what the engine runs now.
Usage: .venv/bin/python bench/gpu_efficiency.py [SPEC ...]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from benchctl.spec.model import CampaignSpec

BANNER = ("SIMULATED with stated latencies (bench/schedule_sim.py Latencies), NOT measured on AWS; "
          "load seconds are the plan's estimates (engine aws)")


def _usd(v: float | None) -> str:
    return f"${v:,.2f}" if v is not None else "unpriced"


def hetero_spec() -> CampaignSpec:
    """HYPOTHETICAL (not an example file): seed-plan plus the seeds' heterogeneous experiment (decode on
    g6e.12xlarge) placed between the two p4d experiments, so that reordering has something to do.
    The g6e price is an ASSUMPTION (on-demand list price as commonly quoted), not from a spec file."""
    import yaml

    from benchctl.spec.model import parse_spec

    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    data["name"] = "seed-plan-hetero-hypothetical"
    data["pools"].append({"name": "g6e", "instance_type": "g6e.12xlarge", "gpus_per_node": 4,
                          "gpu_kind": "L40S-48GB", "max_nodes": 2, "nodegroup": "gpu-g6e"})
    data["experiments"].insert(1, {"name": "disagg-hetero", "mode": "disaggregated", "router": "kv", "workers": [
        {"role": "prefill", "pool": "p4d", "replicas": 2, "tensor_parallel": 4},
        {"role": "decode", "pool": "g6e", "replicas": 2, "tensor_parallel": 4}]})
    data["pricing"]["instances"]["g6e.12xlarge"] = {"usd_per_hour": 10.49}
    data["budget"] = {}
    return parse_spec(data)


def report(path: Path | None) -> list[str]:
    from bench.schedule_sim import (
        IMPROVED,
        IMPROVEMENTS,
        attribution,
        engine_now,
        plan_load_gpu_hours,
        simulate,
    )
    from benchctl.planning.plan import plan_campaign
    from benchctl.spec.model import load_spec

    spec = load_spec(path) if path is not None else hetero_spec()
    name = path.name if path is not None else f"{spec.name} (HYPOTHETICAL spec built in this script)"
    plan = plan_campaign(spec, "aws")
    now = engine_now(spec)
    runs = {"engine now": simulate(plan, spec, now), **attribution(plan, spec),
            "engine now - prepull": simulate(plan, spec, replace(now, prepull=False)),
            "engine now + prefetch": simulate(plan, spec, replace(now, prefetch=True)),
            "improved + runner": simulate(plan, spec, replace(IMPROVED, runner=True))}
    base, best = runs["baseline"], runs["improved"]
    lines = [f"== {name}: {len(plan.experiments)} experiments, "
             f"{sum(len(e.steps) for e in plan.experiments)} steps, "
             f"plan load {plan_load_gpu_hours(plan):.2f} GPU-h"]
    hdr = f"  {'strategy':<22}{'billed GPU-h':>13}{'load GPU-h':>11}{'load/billed':>12}{'est. $':>12}" \
          f"{'wall h':>8}{'vs baseline':>13}"
    lines.append(hdr)

    def row(name: str) -> str:
        r = runs[name]
        gain = r.ratio / base.ratio if base.ratio else float("nan")
        return (f"  {name:<22}{r.billed_gpu_hours:>13.2f}{r.load_gpu_hours:>11.2f}{r.ratio:>12.3f}"
                f"{_usd(r.usd):>12}{r.wall_s / 3600:>8.2f}{gain:>12.3f}x")

    lines += [row("engine now"), row("baseline"), row("improved")]
    lines += [row(f"only {n}") for n in IMPROVEMENTS]
    lines += [row(f"all but {n}") for n in IMPROVEMENTS]
    lines += [row("engine now - prepull"), row("engine now + prefetch"), row("improved + runner")]
    lines.append(f"  engine now = {now.label} (kubernetes.prefetch_model: {spec.kubernetes.prefetch_model})")
    lines.append(f"  improved keeps warm: {'; '.join(best.kept) or 'nothing'}")
    saved = base.billed_gpu_hours - best.billed_gpu_hours
    lines.append(f"  improved saves {saved:.2f} GPU-h"
                 + (f", {_usd(base.usd - best.usd)}" if base.usd is not None and best.usd is not None else "")
                 + f"; order baseline {list(base.order)} -> improved {list(best.order)}")
    for name, r in (("baseline", base), ("improved", best)):
        nodes = ", ".join(f"{n.node} {n.start_s / 60:.1f}-{n.end_s / 60:.1f} min ({'/'.join(n.experiments)})"
                          for n in r.nodes)
        lines.append(f"  {name} billed nodes: {nodes}")
    for name, r in (("engine now", runs["engine now"]), ("baseline", base), ("improved", best),
                    ("improved + runner", runs["improved + runner"])):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r.breakdown().items())
        lines.append(f"  {name} billed GPU-h by phase: {parts}")
    for note in dict.fromkeys(base.notes):
        lines.append(f"  note (baseline): {note}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("specs", nargs="*", default=[str(ROOT / "examples" / "seed-plan.yaml"),
                                                 str(ROOT / "examples" / "feature-ladder.yaml")])
    ap.add_argument("--with-hetero", action="store_true",
                    help="also a hypothetical seed-plan + g6e decode experiment, where the order matters")
    args = ap.parse_args()
    from bench.schedule_sim import Latencies

    print(BANNER)
    print("latencies (assumptions):")
    for line in Latencies().describe():
        print(f"  - {line}")
    print("gain 'vs baseline' = (load/billed) / baseline's (load/billed) = baseline billed / this billed")
    print("first row 'engine now' = what the AWS engine runs: 'keep_warm' (ExperimentPlan.handover), 'runner' "
          "(one load runner Job per\nworkload, each step's end a task-token event answered by the Job, the step "
          "ingested while the next one loads)\nand 'prefetch' (the model prefetch Job started by ScalePools before "
          "the GPU pools) when the spec sets\nkubernetes.prefetch_model, and 'prepull' (a DaemonSet pulling the "
          "runtime image on each GPU node as it joins);\nbaseline = the engine before pools were kept warm (one Job "
          "per step, 30 s polls, ingest on the critical path);\n'reorder' is not built")
    for spec in args.specs:
        print()
        print("\n".join(report(Path(spec))))
    if args.with_hetero:
        print()
        print("\n".join(report(None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
