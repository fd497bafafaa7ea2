"""Every number of a spec has a finite upper and lower bound, and floats are finite (benchctl.spec.bounds): the
meta-test walks every model below ``CampaignSpec``, so a field added without a bound fails here, named by its path.
The bounds' neighbours are held too: the local engines' context limits are the model directories they generate, the
spec's default lognormal sigma is the dataset generator's, and ``render`` of a spec at the bounds does not crash
(before: ``lognormal_sigma: 1000`` raised OverflowError in ``render``)."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import BaseModel, Field

from benchctl.cli.main import main
from benchctl.planning import datasets
from benchctl.spec import bounds
from benchctl.spec.base import Strict
from benchctl.spec.bounds import numeric_fields, unbounded
from benchctl.spec.model import CampaignSpec, parse_spec
from benchctl.spec.workloads import (
    MAX_LOGNORMAL_DRAWS,
    default_lognormal_sigma,
    lognormal_acceptance,
    max_lognormal_sigma,
)

ROOT = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text(encoding="utf-8"))


def test_every_numeric_field_of_the_spec_has_a_finite_upper_and_lower_bound() -> None:
    fields = numeric_fields(CampaignSpec)
    assert len(fields) >= 90  # the walk reaches every model: pools, experiments, workloads, settings, tune, ...
    assert {"model.max_context", "model.kv_bytes_per_token", "quality.seed", "workloads[].dataset_conversations",
            "workloads[].lognormal_sigma", "experiments[].mocker.speedup_ratio", "experiments[].mocker.block_size",
            "pricing.auto_mode_fee_usd_per_hour.<key>", "workloads[].isl_range[]", "tune.loads[]"} <= {
        f.path for f in fields}
    assert unbounded(CampaignSpec) == []


class _Inner(Strict):
    bounded: int = Field(default=1, ge=0, le=10)
    free: float = 1.0


class _Throwaway(Strict):
    """A model as a careless new field would leave it: the checker must name each unbounded number by its path."""

    inner: _Inner = _Inner()
    counts: list[Annotated[int, Field(gt=0)]] = []
    fees: dict[str, float] = {}
    pair: tuple[Annotated[int, Field(ge=0, le=5)], int] = (0, 0)
    only_upper: float = Field(default=0.0, le=1.0)
    infinite_upper: float = Field(default=0.0, ge=0, le=math.inf)


def test_the_checker_names_every_unbounded_number_of_a_new_model_by_its_path() -> None:
    assert unbounded(_Throwaway) == [
        "inner.free: float with no finite upper and no lower bound",
        "counts[]: int with no finite upper bound",
        "fees.<key>: float with no finite upper and no lower bound",
        "pair[]: int with no finite upper and no lower bound",
        "only_upper: float with no finite lower bound",
        "infinite_upper: float with no finite upper bound",
    ]


def test_the_checker_names_a_model_whose_floats_may_be_infinite() -> None:
    class Loose(BaseModel):
        x: float = Field(default=0.0, ge=0, le=1)

    class Holder(Strict):
        loose: Loose = Loose()

    assert unbounded(Holder) == ["Loose: floats may be NaN or infinite (model_config allow_inf_nan is not False)"]


def test_a_spec_field_that_loses_its_bound_fails_the_meta_test(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl.spec.deployment import LocalMocker

    info = copy.copy(LocalMocker.model_fields["block_size"])
    info.metadata = [m for m in info.metadata if not hasattr(m, "le")]
    monkeypatch.setitem(LocalMocker.model_fields, "block_size", info)
    assert unbounded(CampaignSpec) == ["experiments[].mocker.block_size: int with no finite upper bound"]


def test_the_local_context_limits_are_the_generated_model_directories() -> None:
    from benchctl.local import engine_model, modeldir

    assert modeldir.MODEL_CONFIG["max_position_embeddings"] == bounds.LOCAL_MOCKER_MAX_CONTEXT
    assert engine_model.ENGINE_MODEL_CONFIG["max_position_embeddings"] == bounds.CPU_ENGINE_MAX_CONTEXT


@pytest.mark.parametrize(("lo", "hi"), [(1, 1), (64, 1024), (8, 64), (4096, 4096), (1000, 1001), (1, 1_048_576)])
def test_the_specs_default_lognormal_sigma_is_the_dataset_generators(lo: int, hi: int) -> None:
    assert default_lognormal_sigma(lo, hi) == datasets.default_lognormal_sigma(lo, hi)


@pytest.mark.parametrize(("lo", "hi", "requests"), [(1000, 1001, 100_000), (30_000, 30_000, 48),
                                                    (100_000, 100_000, 500), (8192, 8192, 100_000)])
def test_the_largest_accepted_sigma_keeps_the_draws_within_their_budget(lo: int, hi: int, requests: int) -> None:
    """At the largest sigma the spec accepts, the generator's own draws land about as often as the bound reckons
    (measured, not computed), so the dataset takes at most MAX_LOGNORMAL_DRAWS draws; just above it, more."""
    sigma = max_lognormal_sigma(lo, hi, requests)
    assert requests <= lognormal_acceptance(lo, hi, sigma) * MAX_LOGNORMAL_DRAWS
    assert requests > lognormal_acceptance(lo, hi, sigma * 1.01) * MAX_LOGNORMAL_DRAWS
    rng = random.Random(7)
    mu = 0.5 * (math.log(lo) + math.log(hi))
    n = 200_000
    landed = sum(lo - 0.5 <= rng.lognormvariate(mu, sigma) < hi + 0.5 for _ in range(n)) / n
    expected = lognormal_acceptance(lo, hi, sigma)
    assert landed == pytest.approx(expected, rel=0.2, abs=3 / math.sqrt(n) * math.sqrt(expected))


def test_a_narrow_lognormal_range_with_few_requests_is_still_valid() -> None:
    """The bound is on the draws a dataset takes, not on the share: one length of 200,000 drawn for 500 requests
    is fine (0.2 % of draws land: 250,000 draws), for 100,000 requests it is not (50 million)."""
    spec = copy.deepcopy(SEED)
    seq = next(w for w in spec["workloads"] if w["kind"] == "sequence_distribution")
    seq.update(isl_range=[200_000, 200_000], osl_range=[64, 64])
    spec["model"]["max_context"] = 262_144
    seq["requests"] = 500
    parse_spec(spec)
    seq["requests"] = 100_000
    from benchctl.errors import SpecError

    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    index = spec["workloads"].index(seq)
    assert any(p.startswith(f"workloads[{index}]: the default lognormal_sigma 0.001 lands only") and
               "at most 10,000,000" in p for p in info.value.problems), info.value.problems


def _at_the_bounds() -> dict[str, Any]:
    """The seed plan (EKS pools) with the numbers that reach arithmetic at their upper bounds: the longest context,
    the widest lognormal and steepest zipf over the longest lengths, the largest KV per token and mocker knobs."""
    spec = copy.deepcopy(SEED)
    spec["model"].update(max_context=bounds.MAX_CONTEXT, kv_bytes_per_token=bounds.MAX_KV_BYTES_PER_TOKEN,
                         weights_gb=bounds.MAX_WEIGHTS_GB)
    seq = next(w for w in spec["workloads"] if w["kind"] == "sequence_distribution")
    seq.update(isl_range=[1, bounds.MAX_CONTEXT - 8_576], osl_range=[1, 8_576], requests=200,
               lognormal_sigma=bounds.MAX_LOGNORMAL_SIGMA, zipf_exponent=bounds.MAX_ZIPF_EXPONENT)
    spec["quality"] = {"seed": bounds.MAX_SEED_31}
    spec["seed"] = 2**62
    return spec


def test_render_of_a_spec_at_the_upper_bounds_does_not_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _at_the_bounds()
    parse_spec(spec)  # valid at its bounds
    path = tmp_path / "bounds.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    code = main(["render", str(path), "--out", str(tmp_path / "out"), "--campaign-id", "bounds-1"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err and "OverflowError" not in err
    assert any((tmp_path / "out").rglob("*")), "render wrote nothing"


def test_the_issues_lognormal_sigma_no_longer_reaches_the_generator() -> None:
    """Before: lognormal_sigma 1000 validated and datasets.sample_lengths raised OverflowError (exp of ~1e4)."""
    with pytest.raises(OverflowError):
        datasets.sample_lengths("lognormal", 50, 64, 1024, random.Random(1), lognormal_sigma=1000.0)
    spec = copy.deepcopy(SEED)
    seq = next(w for w in spec["workloads"] if w["kind"] == "sequence_distribution")
    seq["lognormal_sigma"] = 1000.0
    from benchctl.errors import SpecError

    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    index = spec["workloads"].index(seq)
    assert any(p.startswith(f"workloads[{index}].lognormal_sigma:") and "less than or equal to 8" in p
               for p in info.value.problems), info.value.problems
