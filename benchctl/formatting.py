"""Numbers and rows as people read them: the CLI's tables and the report round the same way.

``table`` (aligned text, numbers rounded for reading), ``csv`` and ``json`` (full precision).
May import only the standard library.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any


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
