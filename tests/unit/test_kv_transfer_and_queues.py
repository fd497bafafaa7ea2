"""Issue 15's views and records over real captured artifacts: the KV-transfer view (v_kv_transfer), the
stage-queue view (v_stage_queues), the sampling/thinking/quality view (v_quality); what AIPerf recorded
sending (sampling and thinking, per step) and its raw per-request payloads; the quality gate's scoring.

Fixtures (tests/data/README.md): a real AIPerf 0.13.0 server_metrics_export.json of a local disaggregated
Dynamo 1.6.1 deployment under load, and a real AIPerf run that sent sampling and thinking extras.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.analysis import quality
from benchctl.lake.ingest.base import StepContext
from benchctl.lake.ingest.server_metrics import server_metrics_rows
from benchctl.lake.ingest.summary import sampling_sent
from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine
from benchctl.planning.aiperf_args import extra_inputs

DATA = Path(__file__).resolve().parents[1] / "data" / "aiperf-0.13.0" / "disagg"
C = "camp-kv"
# the captured run's processes (tests/data/README.md): frontend, prefill mocker, decode mocker
SOURCES = {"http://127.0.0.1:25061/metrics": "frontend", "http://127.0.0.1:25483/metrics": "prefill-0",
           "http://127.0.0.1:25077/metrics": "decode-0"}


def query(lake: LocalLake, sql: str) -> list[dict[str, Any]]:
    cols, rows = QueryEngine(lake.root).run(sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _lake(tmp_path: Path, *, simulated: bool = True, measured: bool = False) -> LocalLake:
    """A disaggregated and an aggregated step of one campaign; the disaggregated one with the real export."""
    lake = LocalLake(tmp_path / "lake")
    lake.write("campaigns", [{"campaign_id": C, "simulated": simulated, "engine": "local" if simulated else "aws",
                              "model": "Qwen/Qwen3-30B-A3B"}], part_name="campaign")
    lake.write("experiments", [
        {"campaign_id": C, "experiment": "agg", "experiment_index": 0, "mode": "aggregated", "gpus": 8,
         "kv_bytes_per_token": 98304},
        {"campaign_id": C, "experiment": "disagg", "experiment_index": 1, "mode": "disaggregated", "gpus": 8,
         "nixl_backend": "LIBFABRIC", "kv_transfer_path": "LIBFABRIC+EFA", "kv_transfer_bandwidth_gbps": 5.0,
         "kv_bytes_per_token": 98304}], part_name="experiment")
    for exp, mode, ttft in (("agg", "aggregated", 400.0), ("disagg", "disaggregated", 638.09)):
        lake.write("steps", [{"campaign_id": C, "experiment": exp, "mode": mode, "workload": "concurrency-sweep",
                              "workload_kind": "concurrency_sweep", "step_id": "concurrency-sweep-c16-r0",
                              "step_index": 0, "repeat": 0, "concurrency": 16, "isl": 2048, "osl": 32,
                              "status": "succeeded", "ttft_p50_ms": ttft, "ttft_avg_ms": ttft,
                              "temperature": 0.7, "top_p": 0.8, "sampling_seed": 42, "thinking": False,
                              "slo_ttft_ms": 700.0}], part_name="steps")
        lake.write("requests", [{"campaign_id": C, "experiment": exp, "step_id": "concurrency-sweep-c16-r0",
                                 "repeat": 0, "request_index": i, "isl": 2048 + (i % 2) * 2, "ttft_ms": ttft}
                                for i in range(48)], part_name="requests")
    ctx = StepContext(campaign_id=C, experiment="disagg", mode="disaggregated", workload="concurrency-sweep",
                      step_id="concurrency-sweep-c16-r0", step_index=0, repeat=0)
    rows = server_metrics_rows(DATA / "server_metrics_export.json", ctx, sources=SOURCES)
    if measured:  # what vLLM's NixlConnector adds on AWS (FACTS: vllm:nixl_xfer_time_seconds, _bytes_transferred)
        extra = {("vllm:nixl_xfer_time_seconds", "sum"): 0.96, ("vllm:nixl_xfer_time_seconds", "count"): 48,
                 ("vllm:nixl_bytes_transferred", "sum"): 48 * 2049 * 98304.0,
                 ("vllm:nixl_bytes_transferred", "count"): 48, ("vllm:nixl_num_failed_transfers", "total"): 0}
        rows += [{**rows[0], "source": "decode/dc-0", "metric": m, "stat": s, "value": float(v), "labels_json": "{}"}
                 for (m, s), v in extra.items()]
    lake.write("server_metrics", rows, part_name="server-metrics")
    return lake


def test_kv_transfer_is_the_mocker_model_locally_labelled_simulated(tmp_path: Path) -> None:
    rows = {r["experiment"]: r for r in query(_lake(tmp_path), "SELECT * FROM v_kv_transfer")}
    d, a = rows["disagg"], rows["agg"]
    # the mocker delays every prefill hand-off by prompt tokens x bytes/token / bandwidth: the step's mean
    # prompt (2049 tokens) run through that model
    assert d["kv_transfer_source"] == "SIMULATED: mocker transfer model" and d["simulated"] is True
    assert d["kv_transfer_ms"] == pytest.approx(2049 * 98304 / 5.0e9 * 1000)
    assert d["kv_transfer_share_of_ttft"] == pytest.approx(d["kv_transfer_ms"] / 638.09)
    assert d["kv_bytes_per_transfer"] == pytest.approx(2049 * 98304) and d["kv_transfer_gbps"] == 5.0
    # the router's estimate is exposed locally but stays 0 (the captured export: 96 observations, sum 0)
    assert d["router_estimate_ms"] == 0.0
    # the prefill worker's request duration (compute + hand-off), from the real export: 26.7255 s / 48
    assert d["prefill_worker_ms"] == pytest.approx(26.725534377 / 48 * 1000)
    assert (d["ttft_p50_ms"], d["concurrency"], d["isl"], d["nixl_backend"]) == (638.09, 16, 2048, "LIBFABRIC")
    # the aggregated step is beside it, with no transfer
    assert a["kv_transfer_ms"] is None and a["kv_transfer_source"] == "none: aggregated" and a["ttft_p50_ms"] == 400.0


def test_kv_transfer_is_measured_from_vllm_nixl_metrics_when_the_workers_export_them(tmp_path: Path) -> None:
    (d,) = query(_lake(tmp_path, simulated=False, measured=True),
                 "SELECT * FROM v_kv_transfer WHERE experiment = 'disagg'")
    assert d["kv_transfer_source"] == "measured: vllm:nixl_xfer_time_seconds" and d["simulated"] is False
    assert d["kv_transfer_ms"] == pytest.approx(0.96 / 48 * 1000)
    assert d["kv_bytes_per_transfer"] == pytest.approx(2049 * 98304)
    assert d["kv_transfer_gbps"] == pytest.approx(48 * 2049 * 98304 / 0.96 / 1e9)
    assert d["kv_failed_transfers"] == 0
    # not simulated and no NIXL series: said so, never modelled
    (n,) = query(_lake(tmp_path / "b", simulated=False), "SELECT * FROM v_kv_transfer WHERE experiment = 'disagg'")
    assert n["kv_transfer_ms"] is None and n["kv_transfer_source"] == "not measured"


def test_stage_queues_from_the_real_export_beside_slo_attainment(tmp_path: Path) -> None:
    rows = {r["experiment"]: r for r in query(_lake(tmp_path), "SELECT * FROM v_stage_queues")}
    d = rows["disagg"]
    # maxima of the captured run (research: prefill backlog 9, decode dispatch 9, decode running 7)
    assert d["prefill_inflight_max"] == 9.0
    assert d["prefill_dispatch_max"] == 8.0 and d["decode_dispatch_max"] == 9.0
    assert d["frontend_queued_max"] == 9.0
    assert (d["decode_waiting_max"], d["decode_running_max"]) == (1.0, 7.0)
    assert d["prefill_waiting_max"] is None  # the mocker exports no vllm:* on prefill: its backlog is inflight
    assert d["prefill_inflight_avg"] == pytest.approx(2.0)
    assert d["router_queue_max"] == 0.0  # the router queue is off unless configured: exported, always 0
    assert d["goodput_ratio"] == 1.0  # 48 of 48 within the 700 ms TTFT bound
    assert d["gpu_util_avg_pct"] is None and d["gpu_source"] == "none: no GPU (Dynamo mocker, SIMULATED)"
    assert rows["agg"]["prefill_inflight_max"] is None  # no metrics captured for it


def test_gpu_columns_come_from_the_dcgm_exporter_series(tmp_path: Path) -> None:
    lake = _lake(tmp_path, simulated=False)
    base = {"campaign_id": C, "experiment": "disagg", "step_id": "concurrency-sweep-c16-r0", "repeat": 0,
            "source": "dcgm/node-a", "metric_type": "gauge"}
    lake.write("server_metrics", [
        {**base, "metric": "DCGM_FI_DEV_GPU_UTIL", "stat": "avg", "value": v, "labels_json": json.dumps({"gpu": g})}
        for g, v in (("0", 80.0), ("1", 60.0))] + [
        {**base, "metric": "DCGM_FI_DEV_FB_USED", "stat": "max", "value": 30000.0, "labels_json": "{}"},
        {**base, "metric": "DCGM_FI_DEV_POWER_USAGE", "stat": "avg", "value": 250.0, "labels_json": "{}"}],
        part_name="dcgm")
    (d,) = query(lake, "SELECT * FROM v_stage_queues WHERE experiment = 'disagg'")
    assert (d["gpu_util_avg_pct"], d["gpu_fb_used_max_mib"], d["gpu_power_avg_w"]) == (70.0, 30000.0, 250.0)
    assert d["gpu_source"] == "dcgm-exporter"
    (a,) = query(lake, "SELECT * FROM v_stage_queues WHERE experiment = 'agg'")
    assert a["gpu_source"] == "none: no DCGM exporter scraped (kubernetes.dcgm_exporter_urls)"


def test_steps_record_the_sampling_and_thinking_aiperf_sent() -> None:
    summary = json.loads((DATA / "sampling_profile_export_aiperf.json").read_text())
    assert sampling_sent(summary) == {"temperature": 0.6, "top_p": 0.95, "sampling_seed": 1234, "thinking": False}
    assert sampling_sent({"input_config": {"endpoint": {"extra": {"ignore_eos": True}}}}) == {
        "temperature": None, "top_p": None, "sampling_seed": None, "thinking": None}


def test_every_request_carried_the_sampling_and_thinking_fields() -> None:
    # AIPerf's raw export (--export-level raw): the exact body of every request it sent
    payloads = [json.loads(line)["payload"] for line in
                (DATA / "sampling_profile_export_raw.jsonl").read_text().splitlines() if line.strip()]
    assert len(payloads) == 6
    for p in payloads:
        assert (p["temperature"], p["top_p"], p["seed"], p["ignore_eos"]) == (0.6, 0.95, 1234, True)
        assert p["chat_template_kwargs"] == {"enable_thinking": False}


def test_our_extra_inputs_parse_in_aiperf_to_typed_fields() -> None:
    from aiperf.config.loader.parsing import parse_str_or_dict_as_tuple_list

    value = extra_inputs({"temperature": 1e-3, "top_p": 0.8, "seed": 42}, thinking=False)
    assert dict(parse_str_or_dict_as_tuple_list(value)) == {  # AIPerf's own parser: numbers stay numbers
        "ignore_eos": True, "temperature": 1e-3, "top_p": 0.8, "seed": 42, "chat_template_kwargs": {"enable_thinking": False}}
    # what the key:value form would have sent instead: strings
    assert dict(parse_str_or_dict_as_tuple_list('chat_template_kwargs:{"enable_thinking":false}')) == {
        "chat_template_kwargs": '{"enable_thinking":false}'}


def test_quality_scoring_ignores_thinking_and_takes_the_last_answer() -> None:
    assert quality.extract("<think>17+25 is 42? maybe 41</think>\nANSWER: 42") == 42
    assert quality.extract("<think>long thinking cut off at 99") is None
    assert quality.extract("The sum is 1,234.") == 1234
    assert quality.extract("ANSWER: 3\nno wait\nANSWER: -7") == -7
    qs = quality.questions(20, 15)
    assert qs == quality.questions(20, 15) and qs != quality.questions(20, 16)  # same seed, same set
    assert [q["prompt"].split(" ")[3] for q in qs[:3]] == ["+", "-", "*"]
    answers = {q["id"]: {"content": f"ANSWER: {q['answer']}"} for q in qs[:18]}
    real = quality.score(qs, answers, simulated=False, min_score=0.9)
    assert (real["correct"], real["score"], real["gate"]) == (18, 0.9, "passed")
    assert quality.score(qs, answers, simulated=False, min_score=0.95)["gate"] == "failed"
    # on the mocker (random tokens) the score is recorded, never gated
    sim = quality.score(qs, {}, simulated=True, min_score=0.9)
    assert (sim["score"], sim["gate"]) == (0.0, "not applied (SIMULATED)")


def test_quality_view_joins_settings_and_the_gate(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    qs = quality.questions(4, 15)
    lake.write("quality", [{"campaign_id": C, "experiment": "disagg", "question_id": q["id"], "question_index": i,
                            "expected": q["answer"], "extracted": q["answer"] if i < 3 else None, "correct": i < 3,
                            "min_score": 0.9, "gate": "not applied (SIMULATED)", "simulated": True,
                            "temperature": 0.7, "top_p": 0.8, "sampling_seed": 42, "thinking": False}
                           for i, q in enumerate(qs)], part_name="quality")
    rows = {r["experiment"]: r for r in query(lake, "SELECT * FROM v_quality")}
    d = rows["disagg"]
    assert (d["temperature"], d["top_p"], d["sampling_seed"], d["thinking"]) == (0.7, 0.8, 42, False)
    assert d["settings_consistent"] is True and d["n_steps"] == 1
    assert (d["quality_questions"], d["quality_correct"], d["quality_score"]) == (4, 3, 0.75)
    assert d["quality_gate"] == "not applied (SIMULATED)" and d["simulated"] is True
    assert rows["agg"]["quality_questions"] is None  # no gate recorded for it


def test_local_network_provenance_reads_the_workers_logged_transfer_model(tmp_path: Path) -> None:
    from benchctl.local.serving import LocalServing
    from benchctl.local.serving_checks import worker_transfer_config

    log = Path(__file__).resolve().parents[1] / "data" / "dynamo-1.6.1" / "mocker-prefill-startup.log"
    # what the worker itself says it models (not our configuration)
    assert worker_transfer_config(log) == {"kv_transfer_bandwidth": 1.0, "kv_transfer_bytes_per_token": 49152,
                                           "kv_transfer_timing_mode": "FullPrompt"}
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "prefill-0.log").write_text(log.read_text())
    state = {"deployment_id": "d", "mode": "disaggregated", "workdir": str(tmp_path),
             "processes": [{"name": "prefill-0", "pid": 4242}],
             "components": [{"name": "frontend", "role": "frontend", "http_port": 20001},
                            {"name": "prefill-0", "role": "prefill", "system_port": 20002, "bootstrap_port": 20003}]}
    net = LocalServing(tmp_path).network(state)
    assert net["transfer_modelled"] == {"prefill-0": worker_transfer_config(log)}
    assert net["zones"] == ["local"] and net["cni"].startswith("none: every process on loopback")
    assert net["transfer_backend"].startswith("none: Dynamo mocker's transfer model (SIMULATED)")
    assert {"name": "prefill-0", "role": "prefill", "system_port": 20002, "bootstrap_port": 20003,
            "host": "127.0.0.1", "pid": 4242} in net["placement"]
    assert net["mtu"] == int(Path("/sys/class/net/lo/mtu").read_text())


# ------------------------------------------------------------------------------------ the gate in the core


def _smoke_providers(tmp_path: Path, engine: str, off_by: int) -> tuple[Any, Any, Any]:
    from benchctl import campaign
    from benchctl.campaign.context import Ctx
    from benchctl.campaign.records import DeploymentRecord
    from benchctl.spec.model import load_spec
    from tests.fakes.ports import FakeServing, FakeSmoke, providers_for_test

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml")
    serving = FakeServing()
    smoke = FakeSmoke(serving)
    smoke.answer_off_by = off_by
    lake = LocalLake(tmp_path / "lake")
    p = providers_for_test(tmp_path / "run", lake, spec=spec, engine=engine, serving=serving, smoke=smoke)
    state = serving.deploy(campaign.deployment_request(spec, C, "disagg"))
    p.state.save_deployment("disagg", DeploymentRecord(state=state, deployed_at=0))
    ctx = Ctx(C, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)
    return p, ctx, smoke


@pytest.mark.parametrize(("engine", "off_by", "gate"), [
    ("aws", 0, "passed"), ("aws", 1, "failed"), ("local", 1, "not applied (SIMULATED)")])
def test_the_quality_gate_fails_a_real_model_before_load_and_only_labels_the_mocker(
        tmp_path: Path, engine: str, off_by: int, gate: str) -> None:
    from benchctl import campaign
    from benchctl.campaign.base import Task
    from benchctl.errors import QualityGateFailed

    p, ctx, smoke = _smoke_providers(tmp_path, engine, off_by)
    campaign.smoke(p, ctx, Task("disagg"))
    # the questions went out with the campaign's sampling and thinking settings
    assert len(smoke.questions) == 20
    assert all((q["body"]["temperature"], q["body"]["top_p"], q["body"]["seed"]) == (0.7, 0.8, 42)
               and q["body"]["chat_template_kwargs"] == {"enable_thinking": False} for q in smoke.questions)
    if gate == "failed":
        for _ in range(2):  # also when the event is redelivered: never on to load
            with pytest.raises(QualityGateFailed, match=r"0 of 20 questions right \(score 0\.00\) is below "
                                                        r"quality\.min_score 0\.9"):
                campaign.check_smoke(p, ctx, Task("disagg"))
    else:
        assert campaign.check_smoke(p, ctx, Task("disagg")) == {"done": True}
    rows = p.lake.read_table("quality", C)
    assert len(rows) == 20 and {r["gate"] for r in rows} == {gate}
    assert sum(bool(r["correct"]) for r in rows) == (20 if off_by == 0 else 0)
    assert {r["simulated"] for r in rows} == {engine == "local"}
    (event,) = [e for e in p.lake.read_table("timeline", C) if e["event"] == "quality_scored"]
    assert json.loads(event["detail_json"])["gate"] == gate


def test_the_local_mocker_gets_the_models_kv_bytes_and_the_paths_bandwidth() -> None:
    from benchctl.campaign import mocker_knobs
    from benchctl.local.serving import mocker_flags
    from benchctl.spec.model import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml")  # p4d: EFA + LIBFABRIC
    disagg = mocker_flags(mocker_knobs(spec, spec.experiment("disagg")), "prefill")
    assert disagg[disagg.index("--kv-bytes-per-token") + 1] == "98304"  # not the mocker's own 49152
    assert disagg[disagg.index("--kv-transfer-bandwidth") + 1] == "9.6"
    agg = mocker_flags(mocker_knobs(spec, spec.experiment("agg")), "worker")
    assert "--kv-transfer-bandwidth" not in agg and agg[agg.index("--kv-bytes-per-token") + 1] == "98304"
