"""Bad input never escapes as an unexpected exception.

(a) Specs: random mutations of ``examples/smoke.yaml`` (wrong types, negative / huge numbers,
    unknown keys, missing required keys, duplicated entries, unicode) → ``parse_spec`` returns a
    spec or raises ``SpecError`` whose every problem line starts with a field path; an accepted spec
    survives the round trip the Plan state makes (normalised JSON parsed again). ``benchctl
    validate`` exits 0 or 2, never 1 / a traceback.
(b) Artifacts: truncated / mutated / non-UTF-8 AIPerf 0.13 files → ``ingest_artifacts`` returns an
    ``IngestResult`` or raises an ``ArtifactError`` naming the file.
(c) Lake writes are atomic: a crash in the middle of writing leaves neither a partition file nor a
    temporary file (and never damages the previous version of the file).

The product bugs these tests found are fixed; each has its own named test below.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from benchctl.errors import ArtifactError, SpecError
from benchctl.lake.ingest import (
    PHASE_MANIFEST_JSON,
    RECORDS_JSONL,
    SUMMARY_JSON,
    StepContext,
    ingest_artifacts,
)
from benchctl.local.lake import LocalLake
from benchctl.spec.model import MAX_PROBLEMS, CampaignSpec, parse_spec, parse_spec_text
from benchctl.spec.text import MAX_SPEC_ITEMS
from benchctl.spec.workloads import MAX_LOADS
from tests.fakes.ports import SAMPLES, sample_records

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8"))
SETTINGS = settings(max_examples=int(os.environ.get("BAD_INPUT_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])

# ============================================================================================ (a) specs


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every node below ``doc`` (dict keys and list indices)."""
    out: list[tuple[tuple[Any, ...], Any]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for k, v in items:
        out.append(((*path, k), v))
        out += _nodes(v, (*path, k))
    return out


def _render(path: tuple[Any, ...]) -> str:
    """A path as the spec's messages spell it: ``workloads[2].isl_range``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


FULL = parse_spec(SMOKE).model_dump(mode="json")  # every field, defaults included
FIELD_NAMES = sorted({str(p[-1]) for p, _ in _nodes(FULL) if isinstance(p[-1], str)} | {"base", "change"})
KNOWN_SHAPES = {re.sub(r"\[\d+\]", "[]", _render(p)) for doc in (FULL, SMOKE) for p, _ in _nodes(doc)}

NUMBERS = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**100, 1e308, -1e308, math.inf, -math.inf, math.nan,
                     0.5, 1e-300]),
    st.floats(allow_nan=True, allow_infinity=True),
)
BAD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    NUMBERS,
    st.text(max_size=20),
    st.sampled_from(["", "ünïcödé-名前", "🚀", "\x00", "a" * 5000, "Agg", "aggregated", "kv", "agg", "disagg",
                     "gpu-a100", "local", "1", "-1", "yes"]),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.sampled_from(["mode", "router", "name", "x", "ü"]), st.one_of(st.integers(), st.text(max_size=5)),
                    max_size=2),
)


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(SMOKE)
    for _ in range(draw(st.integers(1, 3))):
        nodes = _nodes(doc)
        op = draw(st.sampled_from(["set", "set", "number", "delete", "add", "dup"]))
        if op == "set" and nodes:
            path, _ = draw(st.sampled_from(nodes))
            _parent(doc, path)[path[-1]] = draw(BAD_VALUES)
        elif op == "number":
            leaves = [p for p, v in nodes if isinstance(v, int | float) and not isinstance(v, bool)]
            if leaves:
                path = draw(st.sampled_from(leaves))
                _parent(doc, path)[path[-1]] = draw(NUMBERS)
        elif op == "delete" and nodes:
            path, _ = draw(st.sampled_from(nodes))
            del _parent(doc, path)[path[-1]]
        elif op == "add":
            dicts = [()] + [p for p, v in nodes if isinstance(v, dict)]
            path = draw(st.sampled_from(dicts))
            target = _get(doc, path)
            key = draw(st.one_of(st.sampled_from(FIELD_NAMES), st.text(min_size=1, max_size=12)))
            target[key] = draw(BAD_VALUES)
        elif op == "dup":
            lists = [p for p, v in nodes if isinstance(v, list) and v]
            if lists:
                path = draw(st.sampled_from(lists))
                lst = _get(doc, path)
                lst.append(copy.deepcopy(lst[draw(st.integers(0, len(lst) - 1))]))
    return doc


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    return _get(doc, path[:-1])


def _shape(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def _starts_with_a_field_path(line: str, doc: Any) -> bool:
    """``line`` is ``<path>: <message>`` where path is a field path of the spec's shape (any list index)
    or a key the input has, or ``(spec)`` / ``(file)``."""
    # the product shows a line break inside a key escaped (one line per problem)
    shapes = KNOWN_SHAPES | {_shape(_render(p).replace("\n", "\\n")) for p, _ in _nodes(doc)} | {"(spec)", "(file)"}
    prefixes = [line[:i] for i in range(len(line)) if line.startswith(": ", i) and i + 2 < len(line)]

    def known(prefix: str) -> bool:
        if _shape(prefix) in shapes:
            return True
        # a field below a key of the input's own (e.g. pricing.instances.<type>.usd_per_hour)
        parent, _, last = prefix.rpartition(".")
        return bool(parent) and _shape(parent) in shapes and last in FIELD_NAMES

    return any(known(p) for p in prefixes)






def check_spec(doc: Any) -> CampaignSpec | None:
    try:
        spec = parse_spec(doc, "mutated.yaml")
    except SpecError as err:
        assert err.problems, err
        assert all("\n" not in line for line in err.problems), err.problems  # one line per problem
        bad = [line for line in err.problems if not _starts_with_a_field_path(line, doc)]
        assert not bad, f"problem lines without a field path: {bad}"
        return None
    assert isinstance(spec, CampaignSpec)
    # what the Plan state does: the normalised spec (as stored in spec.json) parses to the same spec
    stored = json.loads(json.dumps(spec.model_dump(mode="json")))
    assert parse_spec(stored, "spec.json") == spec
    return spec


@SETTINGS
@given(mutated_specs())
@example(SMOKE)
@example({**SMOKE, "repeats": -1, "seed": "42", "ünknown": 1})
@example({k: v for k, v in SMOKE.items() if k != "model"})
@example({**SMOKE, "workloads": [{**SMOKE["workloads"][2], "isl_range": [1024, 64]}]})
@example({**SMOKE, "experiments": [*SMOKE["experiments"], {"name": "rung", "base": "agg", "change": {"router": "kv"}}]})
@example({**SMOKE, "experiments": [*SMOKE["experiments"], {"name": "rung", "base": "nope", "change": {}}]})
def test_mutated_spec_is_valid_or_a_spec_error_with_field_paths(doc: dict[str, Any]) -> None:
    check_spec(doc)


@pytest.mark.parametrize("data", [None, [], "spec", 42, [SMOKE]])
def test_a_spec_that_is_not_a_mapping_is_a_spec_error(data: Any) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert all(line.startswith("(spec): ") for line in info.value.problems)


@pytest.mark.parametrize("base", [["agg"], {"name": "agg"}])
def test_ladder_base_of_the_wrong_type_is_a_spec_error(base: Any) -> None:
    doc = copy.deepcopy(SMOKE)
    doc["experiments"].append({"name": "rung", "base": base, "change": {"router": "round-robin"}})
    check_spec(doc)


@pytest.mark.parametrize("source", ["bad yaml", "key with a line break"])
def test_every_problem_is_one_line(source: str) -> None:
    with pytest.raises(SpecError) as info:
        if source == "bad yaml":
            parse_spec_text("name: [unclosed\n  - {", "spec.yaml")
        else:
            parse_spec({**SMOKE, "typo\nkey": 1}, "spec.yaml")
    assert all("\n" not in line for line in info.value.problems), info.value.problems


def test_a_seed_the_spec_accepts_fits_the_lake(tmp_path: Path) -> None:
    """The largest seed the spec accepts, on the last repeat of the most repeats it allows, is written to
    the lake's bigint ``random_seed`` and read back as is; one more is refused at the spec, naming it."""
    from benchctl.planning.plan import plan_campaign

    def limit(name: str) -> int:
        (le,) = [m.le for m in CampaignSpec.model_fields[name].metadata if getattr(m, "le", None) is not None]
        return int(le)

    top, repeats = limit("seed"), limit("repeats")
    spec = check_spec({**SMOKE, "seed": top, "repeats": repeats})
    assert spec is not None
    from benchctl.planning.cache_state import step_seed

    steps = plan_campaign(spec).experiments[0].steps
    # each step's seed is its repeat's salted with its index: the last repeat's is the largest the spec accepts
    last = [s for s in steps if s.repeat == repeats - 1]
    assert all(s.seed == step_seed(s.kind, top + repeats - 1, s.index) for s in last)
    step = max(steps, key=lambda s: s.seed)
    lake = LocalLake(tmp_path)
    lake.write("steps", [{"campaign_id": "c", "experiment": "agg", "step_id": step.step_id,
                          "random_seed": step.seed}], part_name=step.step_id)
    assert [r["random_seed"] for r in lake.read_table("steps", "c")] == [step.seed]
    with pytest.raises(SpecError, match=r"seed"):
        parse_spec({**SMOKE, "seed": top + 1}, "spec.yaml")


# ======================================================================================== (b) artifacts

CTX = StepContext(campaign_id="c-1", experiment="agg", mode="aggregated", workload="concurrency-sweep",
                  step_id="concurrency-sweep-c4-r0", step_index=0, repeat=0, concurrency=4, isl=256, osl=32,
                  random_seed=42, workload_kind="concurrency_sweep")


def _artifacts(root: Path, name: str = "art") -> Path:
    d = root / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    samples = SAMPLES
    assert samples is not None
    shutil.copyfile(samples / SUMMARY_JSON, d / SUMMARY_JSON)
    shutil.copyfile(samples / PHASE_MANIFEST_JSON, d / PHASE_MANIFEST_JSON)
    (d / RECORDS_JSONL).write_text("\n".join(sample_records()) + "\n", encoding="utf-8")
    return d


def check_ingest(d: Path, mutated: list[str]) -> Any:
    """An IngestResult, or an ArtifactError naming one of the mutated files; nothing else."""
    try:
        result = ingest_artifacts(d, CTX)
    except ArtifactError as err:
        assert any(name in str(err) for name in mutated), (mutated, str(err)[:300])
        return err
    assert len(result.steps) == 1 and result.steps[0]["status"] in ("succeeded", "failed")
    assert all(r["step_id"] == CTX.step_id for r in result.requests)
    return result


def _parses(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False
    return True


@SETTINGS
@given(cut=st.floats(0, 1))
@example(cut=0.0)
@example(cut=1.0)
def test_truncated_records_at_any_byte(tmp_path: Path, cut: float) -> None:
    # AIPerf killed mid-write: the file ends anywhere, even inside a UTF-8 sequence
    d = _artifacts(tmp_path)
    data = (d / RECORDS_JSONL).read_bytes()
    kept = data[: int(len(data) * cut)]
    (d / RECORDS_JSONL).write_bytes(kept)
    out = check_ingest(d, [RECORDS_JSONL])
    # a cut tail is dropped with a warning, never an error: the whole records before it are kept
    assert not isinstance(out, ArtifactError), out
    *whole, tail = kept.split(b"\n")
    lines = [*whole, tail] if _parses(tail) else whole
    profiling = [x for x in lines if x.strip() and json.loads(x)["metadata"]["benchmark_phase"] == "profiling"]
    assert len(out.requests) == len(profiling)
    cut_short = [w for w in out.warnings if "last line is cut short" in w]
    assert len(cut_short) == (1 if tail.strip() and not _parses(tail) else 0), out.warnings


def test_missing_summary_is_a_failed_step(tmp_path: Path) -> None:
    d = _artifacts(tmp_path)
    (d / SUMMARY_JSON).unlink()
    result = check_ingest(d, [SUMMARY_JSON])
    assert result.steps[0]["status"] == "failed"
    assert any("missing" in w for w in result.warnings)


def test_an_all_failed_run_is_a_failed_step_with_its_errors(tmp_path: Path) -> None:
    samples = SAMPLES
    assert samples is not None
    error = json.loads((samples / "error_record.jsonl").read_text(encoding="utf-8").strip())
    d = tmp_path / "failed"
    d.mkdir()
    lines = []
    for i in range(3):
        rec = copy.deepcopy(error)
        rec["metadata"].update(benchmark_phase="profiling", x_request_id=f"e{i}")
        lines.append(json.dumps(rec))
    (d / RECORDS_JSONL).write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = check_ingest(d, [])
    (step,) = result.steps
    assert step["status"] == "failed" and step["error_count"] == 3 and step["request_count"] == 0
    assert len(result.requests) == 3 and all(r["error_type"] for r in result.requests)


def _numeric_leaves(doc: Any) -> list[tuple[Any, ...]]:
    return [p for p, v in _nodes(doc) if isinstance(v, int | float) and not isinstance(v, bool)]


def _unit_paths(doc: Any) -> list[tuple[Any, ...]]:
    return [p for p, _ in _nodes(doc) if p[-1] == "unit"]


HUGE = st.sampled_from([1e308, -1e308, math.inf, -math.inf, math.nan, 10**30, -(10**30), 2**63, 0, -1,
                        "x" * 100_000, "", None, True, [], {}])




@SETTINGS
@given(data=st.data(), target=st.sampled_from([SUMMARY_JSON, RECORDS_JSONL, PHASE_MANIFEST_JSON]))
def test_huge_or_wrong_values_anywhere(tmp_path: Path, data: st.DataObject, target: str) -> None:
    d = _artifacts(tmp_path)
    if target == RECORDS_JSONL:
        docs = [json.loads(line) for line in (d / target).read_text(encoding="utf-8").splitlines()]
    else:
        docs = [json.loads((d / target).read_text(encoding="utf-8"))]
    for _ in range(data.draw(st.integers(1, 4))):
        doc = docs[data.draw(st.integers(0, len(docs) - 1))]
        paths = _numeric_leaves(doc) + _unit_paths(doc) + [p for p, v in _nodes(doc) if isinstance(v, str)]
        path = data.draw(st.sampled_from(paths))
        value = data.draw(st.one_of(HUGE, st.text(max_size=8), st.sampled_from(["furlongs", "tokens", "ms", "µs"]))
                          if path[-1] == "unit" else HUGE)
        _parent(doc, path)[path[-1]] = value
    text = "\n".join(json.dumps(x) for x in docs) + "\n" if target == RECORDS_JSONL else json.dumps(docs[0])
    (d / target).write_text(text, encoding="utf-8")
    check_ingest(d, [target])


@pytest.mark.parametrize("unit", ["furlongs", "", "MS", "tokens"])
def test_unknown_unit_in_the_summary_is_an_artifact_error(tmp_path: Path, unit: str) -> None:
    d = _artifacts(tmp_path)
    summary = json.loads((d / SUMMARY_JSON).read_text(encoding="utf-8"))
    summary["time_to_first_token"]["unit"] = unit
    (d / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    with pytest.raises(ArtifactError, match=rf"{SUMMARY_JSON}: time_to_first_token\.\w+: unknown unit"):
        ingest_artifacts(d, CTX)


@pytest.mark.parametrize("target", [SUMMARY_JSON, RECORDS_JSONL])
def test_unit_of_the_wrong_type_is_an_artifact_error(tmp_path: Path, target: str) -> None:
    d = _artifacts(tmp_path)
    if target == SUMMARY_JSON:
        summary = json.loads((d / SUMMARY_JSON).read_text(encoding="utf-8"))
        summary["time_to_first_token"]["unit"] = ["ms"]
        (d / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    else:
        recs = [json.loads(line) for line in (d / RECORDS_JSONL).read_text(encoding="utf-8").splitlines()]
        recs[-1]["metrics"]["request_latency"]["unit"] = {"unit": "ms"}
        (d / RECORDS_JSONL).write_text("\n".join(json.dumps(r) for r in recs) + "\n", encoding="utf-8")
    check_ingest(d, [target])


@pytest.mark.parametrize("where", ["manifest", "records"])
def test_timestamps_beyond_datetime_are_an_artifact_error(tmp_path: Path, where: str) -> None:
    d = _artifacts(tmp_path)
    if where == "manifest":
        manifest = json.loads((d / PHASE_MANIFEST_JSON).read_text(encoding="utf-8"))
        for phase in manifest["phases"]:
            phase["start_ns"] = 10**30
        (d / PHASE_MANIFEST_JSON).write_text(json.dumps(manifest), encoding="utf-8")
        check_ingest(d, [PHASE_MANIFEST_JSON])
    else:
        (d / PHASE_MANIFEST_JSON).unlink()
        recs = [json.loads(line) for line in (d / RECORDS_JSONL).read_text(encoding="utf-8").splitlines()]
        for rec in recs:
            rec["metadata"]["request_end_ns"] = 10**30
        (d / RECORDS_JSONL).write_text("\n".join(json.dumps(r) for r in recs) + "\n", encoding="utf-8")
        check_ingest(d, [RECORDS_JSONL])


def test_ingested_rows_always_fit_the_lake(tmp_path: Path) -> None:
    d = _artifacts(tmp_path)
    summary = json.loads((d / SUMMARY_JSON).read_text(encoding="utf-8"))
    summary["request_count"]["avg"] = 1e308
    (d / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    out = check_ingest(d, [SUMMARY_JSON])
    if isinstance(out, ArtifactError):
        return
    lake = LocalLake(tmp_path / "lake")
    for table, rows in out.tables().items():
        lake.write(table, rows, part_name=CTX.step_id)


@SETTINGS
@given(target=st.sampled_from([SUMMARY_JSON, RECORDS_JSONL, PHASE_MANIFEST_JSON]), at=st.floats(0, 1),
       junk=st.sampled_from([b"\xff", b"\xfe\xfe", b"\xc3", b"\xe2\x82", b"\x80abc", b"\xed\xa0\x80"]))
def test_non_utf8_bytes_anywhere(tmp_path: Path, target: str, at: float, junk: bytes) -> None:
    d = _artifacts(tmp_path)
    data = (d / target).read_bytes()
    i = int(len(data) * at)
    (d / target).write_bytes(data[:i] + junk + data[i:])
    out = check_ingest(d, [target])
    if target != RECORDS_JSONL or i < len(data):  # not a cut-short last line: the bad byte is reported
        assert not isinstance(out, ArtifactError) or "UTF-8" in str(out), out


def test_very_long_strings_are_kept_or_refused_not_crashed(tmp_path: Path) -> None:
    d = _artifacts(tmp_path)
    summary = json.loads((d / SUMMARY_JSON).read_text(encoding="utf-8"))
    summary["aiperf_version"] = "9" * 1_000_000
    summary["benchmark_id"] = "ü" * 100_000
    (d / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    result = check_ingest(d, [SUMMARY_JSON])
    assert len(result.steps[0]["aiperf_version"]) == 1_000_000
    LocalLake(tmp_path / "lake").write("steps", result.steps, part_name=CTX.step_id)


# =================================================================================== (c) atomic writes

ROWS = [{"campaign_id": "c-1", "experiment": "agg", "event": "planned", "at": "2026-11-30T00:00:00+00:00"}]


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@SETTINGS
@given(keep=st.integers(0, 4096), exc=st.sampled_from([OSError, KeyboardInterrupt, RuntimeError]))
def test_a_crash_mid_write_leaves_no_partition_file_and_no_temp_file(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, keep: int, exc: type[BaseException],
) -> None:
    root = tmp_path_factory.mktemp("lake")
    real = pq.write_table

    def crashing_write_table(table: Any, where: Any, *args: Any, **kw: Any) -> None:
        full = root / ".full.parquet.bytes"
        real(table, full, *args, **kw)
        data = full.read_bytes()
        full.unlink()
        with open(where, "wb") as fh:  # part of the file is on disk when the writer dies
            fh.write(data[:keep])
        raise exc("disk full / killed mid-write (simulated)")

    with monkeypatch.context() as mp:
        mp.setattr(pq, "write_table", crashing_write_table)
        with pytest.raises(exc):
            LocalLake(root).write("timeline", ROWS, part_name="planned")
    assert _leftovers(root) == []
    assert LocalLake(root).files("timeline") == []


def test_a_crash_mid_rewrite_keeps_the_previous_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = LocalLake(tmp_path)
    (final,) = lake.write("timeline", ROWS, part_name="planned")
    before = final.read_bytes()

    def crashing_write_table(table: Any, where: Any, *args: Any, **kw: Any) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("killed mid-write (simulated)")

    monkeypatch.setattr(pq, "write_table", crashing_write_table)
    with pytest.raises(OSError, match="simulated"):
        lake.write("timeline", [{**ROWS[0], "event": "planned-again"}], part_name="planned")
    assert _leftovers(tmp_path) == [final] and final.read_bytes() == before
    assert pq.read_table(final).to_pylist()[0]["event"] == "planned"


def test_a_crash_at_fsync_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError("I/O error at fsync (simulated)")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="fsync"):
        LocalLake(tmp_path).write("timeline", ROWS, part_name="planned")
    assert _leftovers(tmp_path) == []


def test_a_crash_mid_raw_input_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = LocalLake(tmp_path)
    real = Path.write_bytes

    def crashing_write_bytes(self: Path, data: bytes) -> int:
        real(self, data[: len(data) // 2])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(Path, "write_bytes", crashing_write_bytes)
    with pytest.raises(OSError, match="simulated"):
        lake.write_raw("c-1", "agg", "prefix-cache-p50-r0", "prefix.jsonl", b'{"a": 1}\n' * 100)
    assert _leftovers(tmp_path) == []


def test_rows_that_do_not_fit_fail_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown column"):
        LocalLake(tmp_path).write("timeline", [{**ROWS[0], "furlongs": 1}], part_name="planned")
    with pytest.raises(ValueError, match="cannot be a lake path segment"):
        LocalLake(tmp_path).write("timeline", [{**ROWS[0], "experiment": "../../etc"}], part_name="planned")
    assert _leftovers(tmp_path) == []


def _smoke_with(where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of the smoke spec with ``value`` at the path ``where`` (keys and list indexes)."""
    data = copy.deepcopy(SMOKE)
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    return data


@pytest.mark.parametrize(("where", "value", "path"), [
    (("repeats",), True, "repeats"),
    (("workloads", 0, "concurrency"), [True, 4], "workloads[0]: field concurrency"),
    (("workloads", 0, "isl"), False, "workloads[0]: field isl"),
    (("slo", "ttft_ms"), True, "slo: field ttft_ms"),
    (("pools", 0, "gpus_per_node"), True, "pools[0]: field gpus_per_node"),
])
def test_a_boolean_where_a_number_is_asked_is_refused_naming_the_field(where: tuple[Any, ...], value: Any,
                                                                      path: str) -> None:
    """pydantic would take ``true`` as 1 (``repeats: true``: one repeat); the spec refuses it."""
    with pytest.raises(SpecError) as err:
        parse_spec(_smoke_with(where, value), "spec.yaml")
    assert path in str(err.value) and "a boolean is not a number" in str(err.value)


@pytest.mark.parametrize(("where", "items"), [
    (("workloads", 0, "concurrency"), list(range(1, 66))),
    (("workloads", 3, "ratios"), [i / 100 for i in range(33)]),
    (("experiments", 0, "workers"), [{"role": "worker", "pool": "gpu-a100", "replicas": 1, "tensor_parallel": 1}] * 9),
])
def test_a_list_past_its_cap_is_refused_before_any_plan_is_built(where: tuple[Any, ...], items: list[Any]) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_smoke_with(where, items), "spec.yaml")
    assert where[-1] in str(err.value) and ("at most" in str(err.value))


def test_every_list_of_the_spec_has_a_cap() -> None:
    """A list without a cap is a plan as large as the spec's size cap allows: each one is bounded."""
    import typing

    from pydantic import BaseModel

    from benchctl.spec.model import CampaignSpec

    seen: set[type] = set()
    uncapped: list[str] = []

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            text = str(field.annotation)
            capped = any(getattr(m, "max_length", None) is not None for m in field.metadata) or "max_length" in text
            # concurrency: a validator caps it (a list or 'auto'); distributions: three unique names at most
            if "list[" in text and not capped and name not in ("concurrency", "distributions"):
                uncapped.append(f"{model.__name__}.{name}")
            for sub in _models(field.annotation):
                walk(sub)

    def _models(annotation: Any) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for a in typing.get_args(annotation) for m in _models(a)]

    walk(CampaignSpec)
    assert uncapped == []
    # and no cap is above the bound the raw data is held to before the models see it
    caps = [m.max_length for model in seen for f in model.model_fields.values() for m in f.metadata
            if getattr(m, "max_length", None) is not None and "list[" in str(f.annotation)]
    assert caps and max(caps) <= MAX_SPEC_ITEMS and MAX_LOADS <= MAX_SPEC_ITEMS


@pytest.mark.parametrize(("data", "problem"), [
    ({"workloads": [{"kind": "concurrency_sweep", "concurrency": list(range(1, 27_000))}]},
     r"^workloads\[0\]\.concurrency: 26999 items; a spec's lists hold at most 64$"),
    ({"pricing": {"instances": {f"x{i}.large": {"usd_per_hour": 1} for i in range(6000)}}},
     r"^pricing\.instances: 6000 keys; a spec's mappings hold at most 256$"),
    ({**{f"k{i}": i for i in range(20_000)}}, r"^\(spec\): 20000 keys"),
])
def test_lists_and_mappings_larger_than_any_valid_specs_are_refused_before_validation(data: Any, problem: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**SMOKE, **data} if "k0" not in data else data, "spec.yaml")
    assert len(err.value.problems) == 1 and re.match(problem, err.value.problems[0]), err.value.problems


@pytest.mark.parametrize(("tail", "what"), [
    ("x: [" + ", ".join(["1"] * 65) + "]\n", "a list of more than 64 items"),
    ("x:\n" + "".join(f"  k{i}: {i}\n" for i in range(257)), "a mapping of more than 256 keys"),
])
def test_a_yaml_list_or_mapping_larger_than_any_valid_specs_is_refused_where_it_stands(tail: str, what: str) -> None:
    text = (ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8") + tail
    with pytest.raises(SpecError) as err:
        parse_spec_text(text, "spec.yaml")
    (problem,) = err.value.problems
    assert problem.startswith("(file): line ") and what in problem, problem


def test_at_most_fifty_problems_are_listed_and_the_rest_counted() -> None:
    data = {**SMOKE, **{f"unknown_{i}": i for i in range(80)}}
    with pytest.raises(SpecError) as err:
        parse_spec(data, "spec.yaml")
    assert len(err.value.problems) == MAX_PROBLEMS + 1
    assert err.value.problems[-1] == "(spec): and 30 more problems"


@pytest.mark.parametrize("image", [
    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.\u0666.1",  # an Arabic-Indic digit: \d in Python's re takes it
    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:v1.6.1\u00e9",  # a non-ASCII letter: \w takes it
    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:" + "1" * 129,  # a tag over 128 characters
    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1\n",
    "nvcr.io//vllm-runtime:1.6.1",
    "nvcr.io/nvidia/ai-dynamo/../../evil/x:1.6.1",  # dot segments: past the allowed prefix once resolved
])
def test_an_image_reference_outside_the_distribution_grammar_is_refused_naming_the_rule(image: str) -> None:
    data = copy.deepcopy(SMOKE)
    data.setdefault("kubernetes", {})["dynamo_image"] = image
    with pytest.raises(SpecError) as err:
        parse_spec(data, "spec.yaml")
    assert "kubernetes.dynamo_image" in str(err.value) and "image reference rule" in str(err.value)


def test_a_derived_efa_tag_over_128_characters_asks_for_efa_image() -> None:
    data = copy.deepcopy(SMOKE)  # its pool asks for EFA: the workers' image is dynamo_image's tag + "-efa"
    data.setdefault("kubernetes", {})["dynamo_image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1-" + "a" * 120
    with pytest.raises(SpecError, match=r"pools\[0\]\.network\.efa_image: required: .* over 128 characters"):
        parse_spec(data, "spec.yaml")
    data["pools"][0]["network"]["efa_image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1-efa"
    assert parse_spec(data, "spec.yaml").pools[0].network.efa_image is not None
