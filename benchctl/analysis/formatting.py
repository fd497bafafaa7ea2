"""Numbers and rows as people read them: the CLI's tables and the report round the same way.

``table`` (aligned text, numbers rounded for reading), ``csv`` and ``json`` (full precision). Rows of a
simulated campaign (``campaigns.simulated``: the Dynamo mocker, locally or ``engine: mocker`` on AWS) say so
wherever they are printed or exported: :func:`label_simulated` gives a table its header line and a CSV/JSON
result its ``simulated`` column.
May import only the standard library.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchctl.lake.query import QueryPort

SIMULATED_COLUMN = "simulated"
SIMULATED_TEXT = "the Dynamo mocker's timing model, not GPU measurements"


def round_for_reading(v: float) -> str:
    """A number as people read it in a table: thousands separated, 2 decimals, 4 digits below 1."""
    if math.isnan(v) or math.isinf(v):
        return str(v)
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.4g}"


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float | Decimal):
        return round_for_reading(float(v))
    if isinstance(v, datetime | date):
        return v.isoformat(sep=" ") if isinstance(v, datetime) else v.isoformat()
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, datetime | date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    return v


def format_result(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    """``table`` (aligned text, numbers rounded for reading), ``csv`` or ``json`` (full precision)."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else _jsonable(v) for v in r])
        return buf.getvalue()
    if fmt == "json":
        return json.dumps(
            [dict(zip(columns, (_jsonable(v) for v in r), strict=True)) for r in rows], indent=2, default=str
        )
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; valid: table, csv, json")
    cells = [[_text(v) for v in r] for r in rows]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float | Decimal) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(columns)), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


@dataclass(frozen=True)
class Labelled:
    """A result with its SIMULATED mark: ``columns``/``rows`` carry a ``simulated`` column (the result's own
    when it has one, else added: true, false, or None when unknown), ``header`` is the line a table prints
    above itself (None when no row is simulated)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    header: str | None


def simulated_campaigns(query: QueryPort) -> dict[str, bool | None]:
    """``{campaign_id: campaigns.simulated}`` of every campaign the lake records."""
    _, rows = query.run("SELECT campaign_id, simulated FROM campaigns")
    out: dict[str, bool | None] = {}
    for cid, sim in rows:
        if sim is None:
            out.setdefault(str(cid), None)
        else:
            out[str(cid)] = bool(sim) or bool(out.get(str(cid)))
    return out


def _ids(ids: set[str]) -> str:
    return ", ".join(sorted(ids))


def label_simulated(columns: Sequence[str], rows: Sequence[Sequence[Any]],
                    simulated_by_campaign: Mapping[str, bool | None]) -> Labelled:
    """Mark each row simulated or not: by its ``campaign_id`` when the result has that column, else by the
    whole lake (simulated only when every campaign it holds is; unknown when it holds both kinds). A result
    that has its own ``simulated`` column keeps it; a lake that records no campaign (rows written by
    ``benchctl ingest`` alone) has nothing to say, and the result stays as it is."""
    cols, data = list(columns), [tuple(r) for r in rows]
    if not simulated_by_campaign and SIMULATED_COLUMN not in cols:
        return Labelled(cols, data, None)
    lake_sim = {c for c, s in simulated_by_campaign.items() if s}
    kinds = {bool(s) for s in simulated_by_campaign.values() if s is not None}
    if SIMULATED_COLUMN in cols:
        i = cols.index(SIMULATED_COLUMN)
        marks: list[bool | None] = [None if r[i] is None else bool(r[i]) for r in data]
    elif "campaign_id" in cols:
        ci = cols.index("campaign_id")
        marks = [simulated_by_campaign.get(str(r[ci])) for r in data]
        cols, data = [*cols, SIMULATED_COLUMN], [(*r, m) for r, m in zip(data, marks, strict=True)]
    else:
        whole: bool | None = kinds.pop() if len(kinds) == 1 else None
        marks = [whole] * len(data)
        cols, data = [*cols, SIMULATED_COLUMN], [(*r, whole) for r in data]
    ids = ({str(r[cols.index("campaign_id")]) for r, m in zip(data, marks, strict=True) if m}
           if "campaign_id" in cols else lake_sim)
    which = (f" (campaign{'s' if len(ids) > 1 else ''} {_ids(ids)})" if ids else "")
    header = None
    if data and all(marks):
        header = f"SIMULATED{which}: every row below comes from {SIMULATED_TEXT}"
    elif any(marks):
        header = (f"SIMULATED{which}: the rows of these campaigns come from {SIMULATED_TEXT}; the other rows are "
                  f"measured (CSV and JSON results say which in their '{SIMULATED_COLUMN}' column)")
    elif data and any(m is None for m in marks) and lake_sim:
        header = (f"SIMULATED?: the lake holds simulated campaign(s) {_ids(lake_sim)} beside measured ones and "
                  "this result has no campaign_id column to tell its rows apart: select campaign_id too")
    return Labelled(cols, data, header)
