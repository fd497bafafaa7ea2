"""The local engine's twins at run time: checked before anything starts, made (or read from the workspace's
store) before the first experiment deploys, named in the progress output and recorded in the lake's ``twins``
table, which the report reads. The twin itself is :mod:`benchctl.forecast.twin`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from benchctl.forecast.twin import AUTO, OFF, RoleTwin, resolve
from benchctl.forecast.twin_profile import ProfileError, profile_dir, read_profile
from benchctl.spec.deployment import Experiment
from benchctl.spec.model import CampaignSpec


def named_profile_problems(spec: CampaignSpec, workspace: Path) -> list[str]:
    """Why a profile an experiment names (``mocker.twin: <name>``) cannot be used: missing or not one the
    mocker can read. Empty when all are usable (or none is named)."""
    problems = []
    for i, exp in enumerate(spec.experiments):
        choice = exp.mocker.twin
        if choice in (AUTO, OFF):
            continue
        try:
            read_profile(profile_dir(workspace, choice))
        except (ProfileError, OSError) as err:
            problems.append(f"experiments[{i}].mocker.twin: {choice!r}: {err} (profiles live in "
                            f"{profile_dir(workspace, choice).parent}; valid: {AUTO}, {OFF} or a profile name there)")
    return problems


def experiment_twins(spec: CampaignSpec, exp: Experiment, workspace: Path) -> dict[str, RoleTwin]:
    pools = {p.name: p for p in spec.pools}
    return resolve(workspace, pools, spec.served_weights(exp).name, exp)


def spec_overrides(exp: Experiment) -> list[str]:
    """The mocker knobs the spec sets explicitly, which win over the twin's (benchctl.forecast.twin.mocker_knobs)."""
    return [f"mocker.{k} {getattr(exp.mocker, k):g}" for k in ("num_gpu_blocks", "speedup_ratio")
            if getattr(exp.mocker, k) not in (None, 1.0)]


def twin_rows(campaign_id: str, exp: Experiment, twins: dict[str, RoleTwin]) -> list[dict[str, Any]]:
    """The ``twins`` rows of one experiment; ``note`` also names the spec's own knobs that win over the twin's
    (what ``benchctl compare`` lists when two campaigns' workers were timed differently)."""
    mine = spec_overrides(exp)
    return [{"campaign_id": campaign_id, "experiment": exp.name, "role": role, "choice": exp.mocker.twin,
             "profile": t.name, "label": t.label, "num_gpu_blocks": t.num_gpu_blocks,
             "provenance_json": json.dumps(t.provenance, sort_keys=True, default=str) if t.provenance else None,
             "note": "; ".join(x for x in (t.note, f"the spec's {', '.join(mine)} wins" if mine else "") if x) or None}
            for role, t in twins.items()]


def write_twins(spec: CampaignSpec, workspace: Path, campaign_id: str, progress: Any) -> list[dict[str, Any]]:
    """Each experiment's twins, made now (aiconfigurator, a few seconds the first time; the store's copy
    afterwards), said in the progress output and written to the lake's ``twins`` table."""
    from benchctl.local.lake import LAKE_DIR, LocalLake

    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for exp in spec.experiments:
        twins = experiment_twins(spec, exp, workspace)
        rows += twin_rows(campaign_id, exp, twins)
        # what the spec sets explicitly wins over the twin's knobs (benchctl.forecast.twin.mocker_knobs): said here
        mine = spec_overrides(exp)
        for role, t in twins.items():
            what = f"profile {t.name}" + (f", {t.num_gpu_blocks} KV blocks" if t.num_gpu_blocks else "")
            if t.dispatch_ms:
                what += f", answers held {t.dispatch_ms:.1f} ms (aiconfigurator's per-request dispatch)"
            if t.name and mine:
                what += f"; the spec's {', '.join(mine)} wins"
            progress.note(f"{exp.name} {role}: {t.label}" + (f" ({what})" if t.name else f" ({t.note})"))
    LocalLake(workspace / LAKE_DIR).write("twins", rows, part_name="twins")
    progress.note(f"twins ready in {time.monotonic() - started:.1f} s (store: {workspace / 'twin'})")
    return rows
