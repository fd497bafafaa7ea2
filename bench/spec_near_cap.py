"""How long refusing a spec near the size cap takes, and how much memory: hostile shapes each filled up to the cap
(benchctl.spec.text.MAX_SPEC_BYTES), read the way the CLI's ``validate`` and the Plan function read a spec
(``parse_spec_text``: size, YAML events, load, the bulk check, the models), against ``examples/smoke.yaml``
(about 5 KB, accepted) as the baseline measured in the same run.

Printed per shape: its items, bytes, seconds (best of 3), the ratio to the baseline, whether it was refused and
how many problem lines, and the process's peak RSS so far. Last line: the slowest refusal in seconds (the target
is under 1 s on this machine: the issue's figure before was up to 29 s and 300 MB).

Usage:
.venv/bin/python bench/spec_near_cap.py
"""

from __future__ import annotations

import copy
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchctl.errors import SpecError  # noqa: E402
from benchctl.spec.model import parse_spec_text  # noqa: E402
from benchctl.spec.text import MAX_SPEC_BYTES  # noqa: E402

SMOKE_TEXT = (ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8")
BASE = yaml.safe_load(SMOKE_TEXT)


def _with(key: str, value: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d[key] = value
    return d


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "experiments": lambda n: _with("experiments", [BASE["experiments"][0] | {"name": f"e{i}"} for i in range(n)]),
    "workloads": lambda n: _with("workloads", [BASE["workloads"][0] | {"name": f"w{i}"} for i in range(n)]),
    "sweep loads": lambda n: _with("workloads", [BASE["workloads"][0] | {"concurrency": list(range(1, n + 1))}]),
    "price table": lambda n: _with("pricing", {"instances": {f"x{i}.large": {"usd_per_hour": 1.0} for i in range(n)}}),
    "unknown keys": lambda n: BASE | {f"k{i}": i for i in range(n)},
    "long string": lambda n: _with("name", "a" * n),
    "bad items": lambda n: _with("experiments", [{"name": 1, "mode": [], "workers": "x"} for _ in range(n)]),
    "nested lists": lambda n: _with("workloads", [[[[[i]]]] for i in range(n)]),
}


class _Dumper(yaml.SafeDumper):
    """Every value written out (a shared sub-object would otherwise become an anchor, refused at once)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper)


def _filled(make: Callable[[int], dict[str, Any]]) -> tuple[str, int]:
    """The largest ``make(n)`` whose YAML stays under the cap: (its text, n)."""
    limit = MAX_SPEC_BYTES - 512
    lo, hi = 1, 2
    while len(_dump(make(hi))) <= limit:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(_dump(make(mid))) <= limit else (lo, mid)
    return _dump(make(lo)), lo


def _time(text: str) -> tuple[float, str]:
    best, verdict = float("inf"), ""
    for i in range(3):  # each time a text of its own (a comment line): nothing is answered from a cache
        unique = f"{text}\n# run {i}\n"
        start = time.perf_counter()
        try:
            parse_spec_text(unique, "near-cap.yaml")
            verdict = "accepted"
        except SpecError as err:
            verdict = f"refused, {len(err.problems)} problem line(s)"
        best = min(best, time.perf_counter() - start)
    return best, verdict


def main() -> None:
    base_s, base_verdict = _time(SMOKE_TEXT)
    print(f"baseline examples/smoke.yaml: {len(SMOKE_TEXT)} B, {base_s * 1000:.1f} ms, {base_verdict}")
    worst = 0.0
    for name, make in SHAPES.items():
        text, n = _filled(make)
        s, verdict = _time(text)
        worst = max(worst, s) if verdict != "accepted" else worst
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"{name:13s} n={n:7d} {len(text):7d} B {s:6.3f} s  x{s / base_s:7.1f}  {verdict:32s} peak RSS {rss} MB")
    print(f"slowest refusal at the size cap: {worst:.3f} s")


if __name__ == "__main__":
    main()
