"""A figure and one comparison of it at one point, as the report's answers read it: the figure's declaration (its
scale, whether lower is better, a practical threshold), and :class:`Compared`: the two sides' values, the effect
on the analysis scale with its interval once judged, and how it reads (:mod:`benchctl.analysis.effects` computes
and judges them). Pure: the standard library and the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from benchctl.analysis import inference
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, Sample, Settings, num_text

LOG, COUNT, SHARE, ABS = "log", "count", "share", "abs"
DESCRIPTIVE = "descriptive"


@dataclass(frozen=True)
class Figure:
    column: str
    label: str
    unit: str
    lower_is_better: bool
    scale: str = LOG
    tail: bool = False  # a tail percentile: needs min_samples_p99 requests in every step
    threshold: float | None = None  # ABS: the practical threshold in the figure's unit

    def edges(self, settings: Settings) -> tuple[float, float]:
        """The practical threshold's two edges on the analysis scale."""
        thr = settings.practical_threshold_pct
        if self.scale in (LOG, COUNT):
            return math.log(max(1e-9, 1.0 - thr / 100.0)), math.log(1.0 + thr / 100.0)
        if self.scale == SHARE:
            return -thr / 100.0, thr / 100.0
        a = float(self.threshold if self.threshold is not None else thr)
        return -a, a

    def threshold_text(self, settings: Settings) -> str:
        thr = settings.practical_threshold_pct
        if self.scale in (LOG, COUNT):
            return f"+/-{thr:g} % of the baseline"
        if self.scale == SHARE:
            return f"+/-{thr:g} percentage points"
        return f"+/-{num_text(self.edges(settings)[1])} {self.unit}".rstrip()


class Judged(Protocol):
    """What Holm's step-down decides: anything with a p-value that takes its decision."""

    p: float | None

    def decide(self, rejected: bool, alpha: float) -> None: ...


@dataclass
class Compared:
    """One figure at one point: the raw values per side (for reading), the effect on the analysis scale with its
    standard error and degrees of freedom, and, once :func:`adjust` or :func:`describe` ran, the interval, its
    confidence and the outcome (LOWER / HIGHER: the treatment's figure relative to the baseline's; INCONCLUSIVE;
    DESCRIPTIVE for a figure shown without a verdict)."""

    figure: Figure
    where: str
    base: Sample
    treat: Sample
    load: float | None = None
    group: Any = None
    paired: bool = False
    estimate: float | None = None
    se: float | None = None
    df: float | None = None
    p: float | None = None
    edges: tuple[float, float] = (0.0, 0.0)
    primary: bool = True
    outcome: str = INCONCLUSIVE
    reason: str = ""
    confidence: float | None = None
    low: float | None = None
    high: float | None = None
    threshold_text: str = ""

    @property
    def unit(self) -> str:
        return self.figure.unit

    @property
    def lower_is_better(self) -> bool:
        return self.figure.lower_is_better

    @property
    def diff(self) -> float | None:
        if self.base.mean is None or self.treat.mean is None:
            return None
        return self.treat.mean - self.base.mean

    @property
    def directional(self) -> bool:
        return self.outcome in (LOWER, HIGHER)

    @property
    def better(self) -> str | None:
        """'treatment' or 'baseline' when directional, else None."""
        if not self.directional:
            return None
        return "treatment" if (self.outcome == LOWER) == self.lower_is_better else "baseline"

    def decide(self, rejected: bool, alpha: float) -> None:
        if self.estimate is None or self.se is None or self.df is None:
            return
        self.confidence = 1.0 - alpha
        self.low, self.high = inference.interval(self.estimate, self.se, self.df, self.confidence)
        if rejected:
            self.outcome = HIGHER if self.low > self.edges[1] else LOWER
            self.reason = ""
        else:
            self.outcome = INCONCLUSIVE
            self.reason = ("the interval includes 0" if self.low <= 0.0 <= self.high else
                           f"the interval does not clear the practical threshold of {self.threshold_text}")

    # ---------------------------------------------------------------------------------- reading

    def _shown(self, x: float) -> float:
        """An analysis-scale value as read: % of the baseline (log/count), percentage points (share), unit."""
        if self.figure.scale in (LOG, COUNT):
            return 100.0 * math.expm1(x)
        return 100.0 * x if self.figure.scale == SHARE else x

    @property
    def shown_unit(self) -> str:
        return {LOG: "%", COUNT: "%", SHARE: "pp"}.get(self.figure.scale, self.unit)

    @property
    def change(self) -> float | None:
        """The effect as read (``shown_unit``)."""
        return None if self.estimate is None else self._shown(self.estimate)

    @property
    def change_interval(self) -> tuple[float, float] | None:
        if self.low is None or self.high is None:
            return None
        return self._shown(self.low), self._shown(self.high)

    def delta_text(self) -> str:
        """'-46.3 ms (-45.4 %), 99.84 % CI [-50.1, -42.5] %': the difference of the means in the unit, the effect
        and its interval at the level it was judged (descriptive: unadjusted)."""
        d = self.diff
        if d is None:
            return "n/a"
        out = num_text(d, self.unit, signed=True)
        ch = self.change
        if ch is not None and self.figure.scale != ABS:
            out += f" ({num_text(ch, self.shown_unit, signed=True)})"
        iv = self.change_interval
        if iv is None or self.confidence is None:
            return out + ", no interval"
        unit = self.shown_unit
        tail = f" {unit}" if unit else ""
        level = confidence_text(self.confidence) + (" unadjusted" if self.outcome == DESCRIPTIVE else "")
        return out + f", {level} CI [{num_text(iv[0], signed=True)}, {num_text(iv[1], signed=True)}]{tail}"

    def text(self) -> str:
        """'lower: ...', 'inconclusive (why): ...' or 'descriptive: ...'."""
        if self.outcome == DESCRIPTIVE:  # with why it could not have been judged anyway, where it could not
            return f"{DESCRIPTIVE}: {self.delta_text()}" + (f" ({self.reason})" if self.reason else "")
        head = self.outcome if self.directional else f"{INCONCLUSIVE} ({self.reason})"
        return f"{head}: {self.delta_text()}"


def confidence_text(c: float) -> str:
    """95 %, 99.84 %, 99.997 %: two decimals, more while they would round up to 100 %."""
    pct = 100.0 * c
    if abs(pct - round(pct)) < 1e-9:
        return f"{round(pct)} %"
    for d in range(2, 9):
        text = f"{pct:.{d}f}"
        if float(text) < 100.0:
            return f"{text.rstrip('0').rstrip('.')} %"
    return f"{pct:.9g} %"
