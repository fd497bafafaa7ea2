"""An experiment's ``checkpoint``: other weights of the same model, loaded by its workers and served under the
campaign model's name, so that examples/fp8.yaml has a BF16 control on the same L40S configuration that differs
from the FP8 experiment in its weights only; the model prefetch downloads the checkpoint too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.aws.k8s import prefetch as pf
from benchctl.aws.k8s import render as r
from benchctl.aws.k8s.common import model_snapshot_dir
from benchctl.cli.main import main
from benchctl.errors import SpecError
from benchctl.spec.model import load_spec, parse_spec
from tests import crd_schemas

FP8 = Path(__file__).resolve().parents[2] / "examples" / "fp8.yaml"
CID = "fp8-20261201-000000"
BF16 = ("Qwen/Qwen3-30B-A3B", "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39")


def _args(dgd: dict[str, Any]) -> list[list[str]]:
    return [c["podTemplate"]["spec"]["containers"][0]["args"] for c in dgd["spec"]["components"]
            if c["type"] != "frontend"]


def _opt(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_fp8_campaign_has_a_bf16_control_that_differs_in_its_weights_only() -> None:
    spec = load_spec(FP8)
    fp8, bf16 = spec.experiment("agg-fp8-tp2x2"), spec.experiment("agg-bf16-tp2x2")
    assert spec.model.name == "Qwen/Qwen3-30B-A3B-FP8" and fp8.checkpoint is None
    assert bf16.checkpoint is not None and (bf16.checkpoint.name, bf16.checkpoint.revision) == BF16
    same = ("mode", "router", "workers", "kv_offload", "engine")
    assert {k: getattr(bf16, k) for k in same} == {k: getattr(fp8, k) for k in same}
    assert {spec.pool(g.pool).gpu_kind for g in bf16.workers} == {"L40S-48GB"}
    (fp8_args,), (bf16_args,) = (_args(r.render_dgd(spec, CID, e.name)) for e in (fp8, bf16))
    # the control loads the BF16 snapshot; both answer to the campaign's model name (AIPerf, the questions)
    assert _opt(bf16_args, "--model") == f"/models/hf/hub/models--Qwen--Qwen3-30B-A3B/snapshots/{BF16[1]}"
    assert _opt(fp8_args, "--model") == model_snapshot_dir(spec.model)
    assert _opt(bf16_args, "--served-model-name") == _opt(fp8_args, "--served-model-name") == spec.model.name
    rest = lambda a: [x for i, x in enumerate(a) if i != a.index("--model") + 1]  # noqa: E731
    assert rest(bf16_args) == rest(fp8_args)
    assert crd_schemas.problems(r.render_dgd(spec, CID, bf16.name)) == []
    # the same quality questions, asked of both, are the multistep set
    assert (spec.quality.kind, spec.quality.questions) == ("multistep", 200)


def test_the_model_prefetch_downloads_every_checkpoint_too(tmp_path: Path) -> None:
    data = yaml.safe_load(FP8.read_text())
    data["kubernetes"] = {"prefetch_model": True}
    spec = parse_spec(data)
    (ckpt,) = spec.checkpoints()
    assert (ckpt.name, ckpt.revision) == BF16
    job = pf.render_prefetch_job(spec.model, spec.kubernetes, CID, more=spec.checkpoints())
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SNAPSHOT"] == model_snapshot_dir(spec.model)
    assert json.loads(env["MORE_MODELS"]) == [{"model": BF16[0], "revision": BF16[1],
                                               "snapshot": model_snapshot_dir(ckpt)}]
    assert "MORE_MODELS" in env["PREFETCH_SCRIPT"]
    # the manifests benchctl render writes carry the same Job
    path = tmp_path / "fp8-prefetch.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["render", str(path), "--out", str(tmp_path / "out"), "--campaign-id", CID]) == 0
    rendered = yaml.safe_load((tmp_path / "out" / "prefetch-job.yaml").read_text())
    assert rendered["spec"]["template"]["spec"]["containers"][0]["env"] == \
        job["spec"]["template"]["spec"]["containers"][0]["env"]
    # a campaign without checkpoints renders the Job as before (no MORE_MODELS)
    plain = pf.render_prefetch_job(spec.model, spec.kubernetes, CID)
    assert "MORE_MODELS" not in {e["name"] for e in plain["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(("change", "want"), [
    ({"revision": "main"}, "experiments[1].checkpoint.revision: 'main' must be a full 40-character commit hash"),
    ({"revision": None}, "experiments[1].checkpoint.revision: None must be a full 40-character commit hash"),
])
def test_a_checkpoint_on_eks_needs_a_commit(change: dict[str, Any], want: str) -> None:
    data = yaml.safe_load(FP8.read_text())
    data["experiments"][1]["checkpoint"].update(change)
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert want in str(err.value)


def test_a_mocker_experiment_has_no_weights_to_replace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load((FP8.parent / "aws-rehearsal.yaml").read_text())
    data["experiments"][0]["checkpoint"] = {"name": BF16[0], "revision": BF16[1]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert "experiments[0].checkpoint: the mocker loads no weights" in capsys.readouterr().err
