"""The local engine's tune ranker: aiconfigurator's predicted ranking (:func:`benchctl.forecast.tune.rank`), kept in
``<workspace>/cache/tune/<key>.json`` per arm and reused (the same spec, arm and aiconfigurator version rank the
same; a ranking takes ~10-20 s per candidate the first time)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from benchctl.atomic import atomic_write
from benchctl.local.lake import CACHE_DIR
from benchctl.planning.tune import Candidate, Ranker
from benchctl.spec.deployment import Experiment
from benchctl.spec.model import CampaignSpec, spec_hash


def cached_ranker(workspace: Path) -> Ranker:
    def rank(spec: CampaignSpec, arm: Experiment, cands: list[Candidate]) -> list[Candidate]:
        from benchctl.forecast.predict import source
        from benchctl.forecast.tune import rank as predicted

        key = hashlib.sha256(f"{spec_hash(spec)} {arm.name} {source()} "
                             f"{json.dumps([c.to_json() for c in cands], sort_keys=True)}".encode()).hexdigest()[:24]
        path = Path(workspace) / CACHE_DIR / "tune" / f"{key}.json"
        try:
            return [Candidate.from_json(c) for c in json.loads(path.read_text(encoding="utf-8"))]
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            pass
        ranked = predicted(spec, arm, cands)
        atomic_write(path, json.dumps([c.to_json() for c in ranked]))
        return ranked

    return rank
