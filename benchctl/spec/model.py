"""The campaign spec: typed models, loading and validation with person-readable errors.

A spec says what to compare (experiments on pools), how to load them (workloads), how often
(repeats), and what it may cost (pricing, budget). Pure: may import only pydantic, yaml and the
standard library.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from benchctl.errors import SpecError
from benchctl.spec.base import Name, Strict
from benchctl.spec.comparisons import Comparison, ComparisonSettings, comparison_problems
from benchctl.spec.deployment import (
    LADDER_FEATURES,
    Experiment,
    ModelSpec,
    PoolSpec,
    is_commit,
    transfer_path,
)
from benchctl.spec.design import Design, design_problems
from benchctl.spec.engine_limits import engine_limit_problems
from benchctl.spec.fields import IMAGE_TAG_MAX, Text
from benchctl.spec.names import dgd_name_problem
from benchctl.spec.problems import MAX_PROBLEMS, _bulk_problems, _problems
from benchctl.spec.settings import (  # Kubernetes and image_tag_version: here too, where callers look
    EFA_INTERFACES,
    PATH_BANDWIDTH_GBPS,
    Budget,
    Kubernetes,
    Pricing,
    Quality,
    Sampling,
    Slo,
    SmokeTest,
    Timeouts,
    WarmUp,
    image_tag_version,
)
from benchctl.spec.text import read_capped, spec_data
from benchctl.spec.tune import Tune, tune_problems, tune_value
from benchctl.spec.workloads import (  # the workloads' models: benchctl.spec.workloads
    ConcurrencySweep,
    MultiTurn,
    Workload,
)


class CampaignSpec(Strict):
    name: Name
    description: Annotated[str, Text(2000, multiline=True)] = ""
    model: ModelSpec
    pools: list[PoolSpec] = Field(min_length=1, max_length=16)
    experiments: list[Experiment] = Field(min_length=1, max_length=32)
    workloads: list[Workload] = Field(min_length=1, max_length=32)
    repeats: int = Field(default=1, gt=0, le=20, description="repeats of every workload on each deployment of an "
                         "experiment (design.deployments: 1 by default, so repeats per experiment)")
    design: Design = Field(default_factory=Design, description="deployments per experiment and their order "
                           "(benchctl.spec.design)")
    seed: int = Field(default=42, ge=0, le=2**62, description="base random seed")
    seed_policy: Literal["per-repeat", "fixed"] = Field(
        default="per-repeat",
        description="per-repeat: repeat r uses seed + r; fixed: every repeat uses seed. Each step's AIPerf seed "
                    "is its repeat's salted with the step's index: no step sends another's prompts (none starts "
                    "warm from another), and the same step of every experiment sends the same ones",
    )
    slo: Slo = Slo()
    kubernetes: Kubernetes = Kubernetes()
    warmup: WarmUp = WarmUp()
    smoke: SmokeTest = SmokeTest()
    pricing: Pricing = Pricing()
    budget: Budget = Budget()
    timeouts: Timeouts = Timeouts()
    sampling: Sampling = Sampling()
    thinking: bool = Field(default=False, description="Qwen3 thinking (chat_template_kwargs.enable_thinking)")
    quality: Quality = Quality()
    comparisons: list[Comparison] = Field(default_factory=list, max_length=64, description="what is compared with what (default: "
                                          "benchctl.spec.comparisons.default_comparisons)")
    comparison: ComparisonSettings = ComparisonSettings()
    tune: Tune | None = Field(default=None, description="off (default): each experiment runs as written; on or a "
                              "mapping: each arm is first searched and piloted, then run at its best configuration "
                              "(benchctl.spec.tune)")

    @field_validator("tune", mode="before")
    @classmethod
    def _tune_words(cls, v: Any) -> Any:
        return tune_value(v)

    @model_validator(mode="before")
    @classmethod
    def _expand_ladder(cls, data: Any) -> Any:
        """Experiments with ``base`` + ``change`` become the base's settings with that one change."""
        if not isinstance(data, dict) or not isinstance(data.get("experiments"), list):
            return data
        problems: list[str] = []
        done: dict[str, dict[str, Any]] = {}
        out: list[Any] = []
        for i, raw in enumerate(data["experiments"]):
            if not isinstance(raw, dict) or raw.get("base") is None:
                out.append(raw)
                if isinstance(raw, dict) and isinstance(raw.get("name"), str):
                    done[raw["name"]] = raw
                continue
            where = f"experiments[{i}]"
            base, change = raw["base"], raw.get("change")
            if not isinstance(base, str) or base not in done:
                problems.append(f"{where}.base: {base!r} is not an earlier experiment; valid: {sorted(done)}")
                out.append(raw)
                continue
            if not isinstance(change, dict) or not change:
                problems.append(f"{where}.change: required with base; give exactly one of {list(LADDER_FEATURES)}")
                out.append(raw)
                continue
            unknown = sorted(set(change) - {*LADDER_FEATURES, "workers"})
            features = [f for f in LADDER_FEATURES if f in change]
            if unknown:
                problems.append(f"{where}.change: {unknown} cannot be changed on a ladder; "
                                f"valid: {list(LADDER_FEATURES)} (workers only with mode)")
            elif len(features) != 1:
                problems.append(f"{where}.change: changes {features or 'nothing'}; a ladder rung changes "
                                f"exactly one of {list(LADDER_FEATURES)}")
            elif "workers" in change and features != ["mode"]:
                problems.append(f"{where}.change: workers may change only together with mode")
            elif change[features[0]] == done[base].get(features[0]):
                problems.append(f"{where}.change.{features[0]}: equals the base's value; nothing changes")
            merged = {k: v for k, v in done[base].items() if k not in ("name", "base", "change")}
            merged.update(change)
            # fields besides the change come from the base; repeating them is fine only when they agree
            # (a normalised spec, as the Plan state stores it, spells every field out)
            clash = sorted(k for k in set(raw) - {"name", "base", "change", "mocker"}
                           if _normal(k, raw[k]) != _normal(k, merged.get(k)))
            if clash:
                problems.append(f"{where}: {clash} differ from the base {base!r}; a rung inherits every field "
                                f"but the one under 'change'")
            merged.update({"name": raw.get("name"), "base": base, "change": change})
            if "mocker" in raw:
                merged["mocker"] = raw["mocker"]
            done[str(raw.get("name"))] = merged
            out.append(merged)
        if problems:
            raise ValueError("\n".join(problems))
        return {**data, "experiments": out}

    @model_validator(mode="after")
    def _cross_checks(self) -> CampaignSpec:
        problems: list[str] = []
        pools = {p.name: p for p in self.pools}
        if len(pools) != len(self.pools):
            problems.append("pools: pool names must be unique")
        names = [e.name for e in self.experiments]
        if len(set(names)) != len(names):
            problems.append("experiments: experiment names must be unique")
        wl = [w.name for w in self.workloads]
        if len(set(wl)) != len(wl):
            problems.append("workloads: workload names must be unique")
        for i, e in enumerate(self.experiments):
            if e.kv_offload is None and e.mocker.num_host_blocks is not None:
                problems.append(
                    f"experiments[{i}].mocker.num_host_blocks: a host KV tier is KV offload; "
                    f"set kv_offload (e.g. {{cpu_cache_gb: 16}}) instead, or as well"
                )
            for j, g in enumerate(e.workers):
                where = f"experiments[{i}].workers[{j}]"
                pool = pools.get(g.pool)
                if pool is None:
                    problems.append(f"{where}.pool: {g.pool!r} is not a pool; valid: {sorted(pools)}")
                    continue
                if pool.gpus_per_node and g.tensor_parallel > pool.gpus_per_node:
                    problems.append(
                        f"{where}.tensor_parallel: {g.tensor_parallel} exceeds pool {pool.name!r} "
                        f"gpus_per_node {pool.gpus_per_node}"
                    )
                cpu_vllm = pool.local_cpu and e.engine == "vllm"
                if (pool.gpus_per_node == 0) != (e.engine == "mocker") and not cpu_vllm:
                    problems.append(
                        f"experiments[{i}].engine: {e.engine!r} with pool {pool.name!r} ({pool.gpus_per_node} GPUs per "
                        "node): the mocker runs on CPU pools (gpus_per_node 0) and vLLM on GPU pools (or, locally, on "
                        "a local CPU pool: the CPU engine); one engine and one kind of pool per experiment")
                if cpu_vllm and e.mode == "disaggregated":
                    problems.append(
                        f"experiments[{i}].mode: disaggregated on the CPU engine (pool {pool.name!r}): the prefill "
                        "worker hands its KV to decode through NIXL here, but on vLLM's CPU build decode answers then "
                        "stall for up to ~30 s (docs/howto/engine-cpu.md); the CPU engine runs aggregated experiments")
                if cpu_vllm and e.kv_offload is not None:
                    problems.append(
                        f"experiments[{i}].kv_offload: the CPU engine runs without KVBM (Dynamo's KV block manager is not "
                        f"in the engine environment); leave kv_offload out on pool {pool.name!r}")
        cpu = [e.name for e in self.experiments
               if e.engine == "vllm" and all(g.pool in pools and pools[g.pool].local_cpu for g in e.workers)]
        if cpu and len(cpu) < len(self.experiments):
            problems.append(f"experiments: {cpu} run on the CPU engine (vLLM on a local CPU pool) and the others do not; "
                            "its SIMULATED (CPU engine) figures never share a campaign with another engine's: run them "
                            "as two campaigns")
        if len({e.engine for e in self.experiments}) > 1:
            problems.append("experiments: engine: mocker and vllm in one campaign; a mocker rehearsal's SIMULATED figures "
                            "never share a campaign (or its report) with GPU measurements: run them as two campaigns")
        eks = {p.name for p in self.pools if p.provider != "local"}
        for i, e in enumerate(self.experiments):
            if e.checkpoint is not None and eks & {g.pool for g in e.workers} and not is_commit(e.checkpoint.revision):
                problems.append(f"experiments[{i}].checkpoint.revision: {e.checkpoint.revision!r} must be a full "
                                "40-character commit hash: its workers serve the checkpoint's snapshot directory on EKS")
            if e.checkpoint is not None and e.engine == "mocker":
                problems.append(f"experiments[{i}].checkpoint: the mocker loads no weights; a checkpoint needs engine "
                                "vllm")
        if eks and not is_commit(self.model.revision):
            problems.append(f"model.revision: {self.model.revision!r} must be a full 40-character commit hash, as pools "
                            f"{sorted(eks)} run on EKS: their workers serve the prefetched snapshot offline, and the "
                            "hub cache names snapshot directories by commit (hub/models--<org>--<name>/snapshots/"
                            "<commit>; a branch or tag is only a ref to one)")
        for i, e in enumerate(self.experiments):  # Dynamo's webhook: DGD name + component name (benchctl.spec.names)
            why = dgd_name_problem(e.name, [g.role for g in e.workers]) if eks & {g.pool for g in e.workers} else None
            if why:
                problems.append(f"experiments[{i}].name: {why}")
        for i, pool in enumerate(self.pools):
            if pool.gpus_per_node == 0 and (pool.pods_per_node is None or pool.network.efa):
                problems.append(f"pools[{i}]: a CPU pool (gpus_per_node 0) needs pods_per_node (mocker workers per "
                                "node) and no network.efa")
            if pool.network.efa and pool.efa_interfaces() == 0:
                problems.append(
                    f"pools[{i}].network.efa_interfaces: required for instance type {pool.instance_type!r} "
                    f"(known: {', '.join(f'{k} {v}' for k, v in sorted(EFA_INTERFACES.items()))})")
            image = self.kubernetes.dynamo_image
            if pool.network.efa and not pool.network.efa_image and ("@" in image or image_tag_version(image) is None):
                problems.append(f"pools[{i}].network.efa_image: required: kubernetes.dynamo_image {image!r} is pinned "
                                "by digest or has no version tag, so the EFA-enabled image cannot be derived from it")
            elif pool.network.efa and not pool.network.efa_image and \
                    len(image.rpartition(":")[2]) + len("-efa") > IMAGE_TAG_MAX:
                problems.append(f"pools[{i}].network.efa_image: required: the tag of kubernetes.dynamo_image with "
                                f"'-efa' appended would be over {IMAGE_TAG_MAX} characters (an image tag's limit)")
        for i, e in enumerate(self.experiments):
            if e.mode != "disaggregated":
                continue
            paths = {transfer_path(pools[g.pool]) for g in e.workers if g.pool in pools}
            if len(paths) > 1:
                problems.append(
                    f"experiments[{i}]: its prefill and decode pools move KV over different paths {sorted(paths)}; "
                    "NIXL needs one backend on both sides: give the pools the same network.nixl_backend and efa")
        for i, w in enumerate(self.workloads):
            if isinstance(w, ConcurrencySweep) and w.search_settings() is not None \
                    and self.slo.ttft_ms is None and self.slo.itl_ms is None:
                problems.append(f"workloads[{i}].search: locating the SLO edge needs an SLO; set slo.ttft_ms and/or "
                                "slo.itl_ms, or give fixed concurrency loads without search")
            isl, osl = w.max_lengths()
            if osl > self.model.max_context:
                problems.append(
                    f"workloads[{i}]: osl {osl} exceeds model.max_context {self.model.max_context}"
                )
            elif isl + osl > self.model.max_context:
                what = "longest turn (all turns' history)" if isinstance(w, MultiTurn) else "isl"
                problems.append(
                    f"workloads[{i}]: {what} {isl} + osl {osl} exceeds model.max_context "
                    f"{self.model.max_context}"
                )
        for inst in self.pricing.instances:
            if inst not in {p.instance_type for p in self.pools}:
                problems.append(
                    f"pricing.instances.{inst}: no pool uses this instance type; "
                    f"valid: {sorted({p.instance_type for p in self.pools})}"
                )
        problems += comparison_problems(self) + tune_problems(self) + design_problems(self)
        problems += engine_limit_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def pool(self, name: str) -> PoolSpec:
        return next(p for p in self.pools if p.name == name)

    def experiment(self, name: str) -> Experiment:
        return next(e for e in self.experiments if e.name == name)

    def served_weights(self, exp: Experiment) -> ModelSpec:
        """The weights the experiment's workers load: ``model``, or its ``checkpoint`` in model's place (name,
        revision, weights_gb; still served under ``model.name``)."""
        c = exp.checkpoint
        return self.model if c is None else self.model.model_copy(
            update={"name": c.name, "revision": c.revision, "weights_gb": c.weights_gb})

    def checkpoints(self) -> list[ModelSpec]:
        """Every experiment's other weights (:meth:`served_weights`), each once, in experiment order: what the model
        prefetch downloads besides ``model``."""
        out: dict[tuple[str, str | None], ModelSpec] = {}
        for e in self.experiments:
            w = self.served_weights(e)
            if w is not self.model and (w.name, w.revision) != (self.model.name, self.model.revision):
                out.setdefault((w.name, w.revision), w)
        return list(out.values())

    @property
    def total_repeats(self) -> int:
        """Repeats per experiment over all its deployments (``design.deployments x repeats``)."""
        return self.design.deployments * self.repeats

    def deployment_of(self, repeat: int) -> int:
        """The deployment (from 1) that runs ``repeat`` (numbered over the experiment's deployments)."""
        return repeat // self.repeats + 1

    def repeat_seed(self, repeat: int) -> int:
        return self.seed + repeat if self.seed_policy == "per-repeat" else self.seed

    def sampling_fields(self) -> dict[str, Any]:
        """The sampling fields every request carries: temperature, top_p and seed (default: the spec's seed,
        within the 31 bits every server accepts)."""
        seed = self.sampling.seed if self.sampling.seed is not None else self.seed % 2**31
        return {"temperature": self.sampling.temperature, "top_p": self.sampling.top_p, "seed": seed}

    def transfer(self, exp: Experiment) -> dict[str, Any]:
        """How a disaggregated experiment moves KV from prefill to decode (None fields when aggregated):
        the path ('LIBFABRIC+EFA' or 'UCX'), the NIXL backend, EFA interfaces per node, the bandwidth the
        local mocker models (the experiment's mocker.kv_transfer_bandwidth, else the path's) and where that
        figure comes from, and the KV bytes per token."""
        if exp.mode != "disaggregated":
            return {"path": None, "nixl_backend": None, "kv_transfer_bandwidth_gbps": None,
                    "bandwidth_source": None, "kv_bytes_per_token": self.model.kv_bytes_per_token}
        pools = [self.pool(g.pool) for g in exp.workers]
        path = transfer_path(pools[0])
        if exp.mocker.kv_transfer_bandwidth is not None:
            bw, src = exp.mocker.kv_transfer_bandwidth, "spec: mocker.kv_transfer_bandwidth"
        else:
            bw, src = PATH_BANDWIDTH_GBPS[path], f"derived from the pools' network ({path}; FACTS)"
        return {"path": path, "nixl_backend": pools[0].network.nixl_backend,
                "efa_interfaces": {p.name: p.efa_interfaces() for p in pools},
                "kv_transfer_bandwidth_gbps": bw, "bandwidth_source": src,
                "kv_bytes_per_token": self.model.kv_bytes_per_token}


def _normal(field_name: str, value: Any) -> Any:
    """An experiment field's value with defaults filled in (to compare two spellings), else as given."""
    from pydantic import TypeAdapter

    info = Experiment.model_fields.get(field_name)
    if info is None:
        return value
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(info.annotation)
        return adapter.dump_python(adapter.validate_python(value), mode="json")
    except ValidationError:
        return value


def parse_spec(data: Any, source: str = "<spec>") -> CampaignSpec:
    """Validate already-loaded spec data; raise SpecError with one line per problem (at most MAX_PROBLEMS)."""
    if not isinstance(data, dict):
        raise SpecError(source, [f"(spec): expected a mapping at the top level, got {type(data).__name__}"])
    if bulk := _bulk_problems(data):
        raise SpecError(source, bulk)
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as err:
        # a problem is one line: a line break inside a key or value is shown escaped
        lines = [line.replace("\n", "\\n") for line in _problems(err)]
        if len(lines) > MAX_PROBLEMS:
            lines = [*lines[:MAX_PROBLEMS], f"(spec): and {len(lines) - MAX_PROBLEMS} more problems"]
        raise SpecError(source, lines) from None


def load_spec_text(path: Path) -> str:
    """A spec file's text: at most benchctl.spec.text.MAX_SPEC_BYTES read (a longer file, or a device, is refused)."""
    try:
        with path.open("rb") as f:
            return read_capped(f, str(path), path.stat().st_size if path.is_file() else None).decode("utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), ["(file): not found"]) from None
    except IsADirectoryError:
        raise SpecError(str(path), ["(file): is a directory; give a spec file (e.g. examples/smoke.yaml)"]) from None
    except PermissionError:
        raise SpecError(str(path), ["(file): not readable (permission denied)"]) from None
    except UnicodeDecodeError as err:
        raise SpecError(str(path), [f"(file): not UTF-8 text ({err.reason} at byte {err.start})"]) from None


def parse_spec_text(text: str, source: str) -> CampaignSpec:
    """A spec's text (JSON when ``source`` ends with .json, else YAML), size-capped and without YAML aliases
    (benchctl.spec.text), validated."""
    return parse_spec(spec_data(text, source), source)


def load_spec(path: str | Path) -> CampaignSpec:
    p = Path(path)
    return parse_spec_text(load_spec_text(p), str(p))


def spec_hash(spec: CampaignSpec) -> str:
    """Content hash of the validated spec (defaults applied): same meaning ⇒ same hash."""
    canon = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def safe_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
