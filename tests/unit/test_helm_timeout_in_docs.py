"""The platform how-tos state one Helm chart timeout: the one ``stacks/platform.py`` gives every chart.

Read from the stack's source (``HELM_TIMEOUT = Duration.minutes(N)``) rather than by importing it: importing
``aws_cdk`` costs seconds and belongs to the infrastructure tests.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOWTOS = sorted((ROOT / "docs" / "howto").glob("*.md"))
# a chart's wait stated in a how-to: "each waited for, at most N min", "Each Helm chart waits at most N minutes"
CHART_WAIT = re.compile(r"(?:chart|charts)[^.|]*?(?:waits?|waited for)[^.|]*?at most (\d+) min", re.I)


def helm_timeout_minutes() -> int:
    source = (ROOT / "stacks" / "platform.py").read_text(encoding="utf-8")
    (minutes,) = re.findall(r"^HELM_TIMEOUT = Duration\.minutes\((\d+)\)", source, re.M)
    return int(minutes)


def test_every_helm_chart_wait_the_howtos_state_is_the_stacks_helm_timeout() -> None:
    stated = [(p.name, int(m)) for p in HOWTOS for m in CHART_WAIT.findall(p.read_text(encoding="utf-8"))]
    assert len(stated) >= 2, stated  # the empty-account how-to states it in its steps table and its notes
    assert {m for _, m in stated} == {helm_timeout_minutes()}, stated


def test_the_chart_wait_pattern_finds_a_wrong_figure() -> None:
    """The check above can fail: a how-to line with another figure is read as one."""
    assert CHART_WAIT.findall("then five charts (each waited for, at most 15 min): expect") == ["15"]
    assert CHART_WAIT.findall("- Each Helm chart waits at most 10 minutes, below the handler") == ["10"]
