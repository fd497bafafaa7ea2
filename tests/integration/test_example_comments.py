"""What an example's comments say it plans is what ``benchctl plan --engine aws`` plans: its minutes and dollars
(a comment that drifted from the plan misleads the reader budgeting a campaign). Here, not in the unit tier:
the twins that time the steps need the real aiconfigurator, which the unit tier replaces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchctl.planning.plan import format_plan, plan_campaign

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# "# planned (benchctl plan --engine aws): 577 min, $423.47" or "# planned 123 min ($21.68)"
PLANNED = re.compile(r"^# planned (?:\(benchctl plan --engine aws\): )?(\d+) min,? \(?\$(\d+\.\d\d)", re.M)
HEADER = re.compile(r"est\. (\d+\.\d) min, [\d.]+ GPU-h, \$(\d+\.\d\d)")


def _claims() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out += [(path.name, int(m[1]), m[2]) for m in PLANNED.finditer(path.read_text())]
    return out


def test_the_examples_state_planned_figures() -> None:
    assert {name for name, _, _ in _claims()} >= {"seed-plan.yaml", "fp8.yaml"}


@pytest.mark.parametrize(("name", "minutes", "usd"), _claims(), ids=[c[0] for c in _claims()])
def test_an_examples_planned_figures_are_the_plans(name: str, minutes: int, usd: str, tmp_path: Path) -> None:
    """As ``benchctl plan --engine aws`` plans it (benchctl.cli.planning): the spec as placement reads it, its
    request-count steps timed on each experiment's twin, in a workspace with no twin of its own."""
    from benchctl.forecast.twin import plan_timers
    from benchctl.planning.placement import load_placeable_spec

    spec = load_placeable_spec(EXAMPLES / name)
    m = HEADER.search(format_plan(plan_campaign(spec, "aws", plan_timers(spec, tmp_path))).splitlines()[0])
    assert m is not None
    assert (round(float(m[1])), m[2]) == (minutes, usd), f"{name} says {minutes} min, ${usd}; the plan: {m[0]}"
