"""The lake's layout, shared by the local lake (``benchctl.local.lake``) and the S3 one (``benchctl.aws.s3``).

Layout (partition columns live in the path, not inside the files, as Athena/Glue expect)::

    <root>/campaigns/campaign_id=<c>/<part>.parquet
    <root>/<table>/campaign_id=<c>/experiment=<e>/<part>.parquet     # steps, requests, server_metrics,
                                                                     # timeline, costs
    <root>/raw/campaign_id=<c>/experiment=<e>/step_id=<s>/...        # AIPerf artifacts as written
    <root>/raw/campaign_id=<c>/experiment=<e>/step_id=<s>/inputs/    # datasets we generated for it

Writes are atomic and idempotent: the same ``part_name`` replaces the same file (object), so a
redelivered event never duplicates rows. Callers pick part names that identify the event (e.g. the step
id), not a timestamp. Every path segment is checked here first (:func:`check_path_value`).

May import only the standard library, ``benchctl.lake.schema`` and ``benchctl.errors``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from benchctl.errors import ArtifactError
from benchctl.lake import schema

_SAFE = re.compile(r"^[a-z0-9_.-]+\Z")
RAW_DIR = "raw"


def check_path_value(kind: str, value: Any) -> str:
    """``value`` if it is safe as a path segment (lowercase letters, digits, ``-``, ``_``, ``.``)."""
    if not isinstance(value, str) or not _SAFE.match(value) or value in {".", ".."}:
        raise ValueError(
            f"{kind} {value!r} cannot be a lake path segment: use lowercase letters, digits, '-', '_', '.'"
        )
    return value


def partition_rows(
    table: str, rows: list[dict[str, Any]], part_name: str
) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Rows normalised against the schema, grouped by their partition values (path-safe, checked).

    Every lake writes through this first, so a bad row or name fails before anything is written.
    """
    check_path_value("part_name", part_name)
    keys = schema.partition_keys(table)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        norm = schema.normalize_row(table, row)
        groups[tuple(check_path_value(k, norm[k]) for k in keys)].append(norm)
    return dict(groups)


def raw_prefix(campaign_id: str, experiment: str, step_id: str) -> str:
    """A step's raw area relative to the lake root, with a trailing slash
    (``raw/campaign_id=<c>/experiment=<e>/step_id=<s>/``); every segment checked."""
    return (f"{RAW_DIR}/campaign_id={check_path_value('campaign_id', campaign_id)}"
            f"/experiment={check_path_value('experiment', experiment)}"
            f"/step_id={check_path_value('step_id', step_id)}/")


def partition_path(table: str, values: dict[str, str]) -> str:
    """A table partition's path relative to the lake root, with a trailing slash
    (``<table>/<key>=<value>/...``); every value checked."""
    rel = table + "/"
    for key in schema.partition_keys(table):
        rel += f"{key}={check_path_value(key, values.get(key))}/"
    return rel


def raw_relative_path(prefix: str, key: str) -> str | None:
    """Where an object of a step's raw area goes under a local copy of it: ``key`` without ``prefix``
    (the step's raw prefix, trailing slash); None for a folder marker (a key ending in ``/``).

    Whoever wrote the raw area (a load pod) chose the key: one that could resolve outside the copy (an
    absolute part from ``//``, a ``.`` or ``..`` segment, a backslash, a control character) or that
    is not under ``prefix`` raises :class:`ArtifactError` naming the key, so a caller that checks every
    key before it downloads one writes nothing."""
    if not key.startswith(prefix):
        raise ArtifactError(f"raw artifact key {key!r} is not under the step's raw prefix {prefix!r}")
    rel = key[len(prefix):]
    if not rel:
        return None  # the step's own folder marker
    body = rel[:-1] if rel.endswith("/") else rel
    why = None
    if not body or body.startswith("/"):
        why = "has an absolute part ('//' after the prefix)"
    elif any(seg in ("", ".", "..") for seg in body.split("/")):
        why = "has an empty, '.' or '..' segment"
    elif "\\" in body or any(ord(ch) < 32 or ord(ch) == 127 for ch in body):
        why = "has a backslash or a control character"
    if why is not None:
        raise ArtifactError(
            f"raw artifact key {key!r} {why}: a raw key is {prefix!r} + a relative path of non-empty "
            "segments, none '.' or '..'; nothing of this step was copied")
    return None if rel.endswith("/") else rel
