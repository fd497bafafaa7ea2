"""The lake's query port: what reads the lake (views, reports, calibration) is written against; DuckDB is its
local adapter (``benchctl.local.query``), Athena its AWS one (``benchctl.aws.athena``)."""

from __future__ import annotations

from typing import Any, Protocol


class QueryPort(Protocol):
    """One SELECT (Athena's Trino dialect) over the lake's tables and views: DuckDB locally, Athena on AWS.
    Values come back typed (numbers, booleans, naive UTC datetimes), the same on both."""

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]: ...
