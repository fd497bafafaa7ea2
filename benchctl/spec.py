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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchctl.errors import SpecError

NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_RE, description="lowercase letters, digits and '-' (max 40)")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(Strict):
    name: str = Field(min_length=1, description="served model name, e.g. Qwen/Qwen3-30B-A3B")
    max_context: int = Field(default=40960, gt=0, description="model context length in tokens")


class PoolSpec(Strict):
    name: Name
    instance_type: str = Field(min_length=1)
    gpus_per_node: int = Field(gt=0, le=16)
    gpu_kind: str = Field(min_length=1, description="e.g. A100-40GB, L40S-48GB")
    max_nodes: int = Field(default=4, gt=0, le=64)
    provider: Literal["managed-nodegroup", "auto-mode", "local"] = "managed-nodegroup"
    nodegroup: str | None = Field(default=None, description="EKS managed node group name")


class WorkerGroup(Strict):
    role: Literal["worker", "prefill", "decode"]
    pool: Name
    replicas: int = Field(gt=0, le=64)
    tensor_parallel: int = Field(default=1, gt=0, le=16)


class LocalMocker(Strict):
    """How the local engine's Dynamo mocker imitates the hardware (simulated numbers)."""

    speedup_ratio: float = Field(default=1.0, ge=0)
    block_size: int = Field(default=64, gt=0)
    num_gpu_blocks: int | None = Field(default=None, gt=0)
    kv_transfer_bandwidth: float | None = Field(default=None, gt=0)


class Experiment(Strict):
    name: Name
    mode: Literal["aggregated", "disaggregated"]
    router: Literal["round-robin", "kv"] = "round-robin"
    workers: list[WorkerGroup] = Field(min_length=1)
    mocker: LocalMocker = LocalMocker()

    @model_validator(mode="after")
    def _roles_match_mode(self) -> Experiment:
        roles = {g.role for g in self.workers}
        if self.mode == "aggregated" and roles != {"worker"}:
            raise ValueError(
                f"aggregated experiment needs only role 'worker' groups, got roles {sorted(roles)}"
            )
        if self.mode == "disaggregated" and roles != {"prefill", "decode"}:
            raise ValueError(
                f"disaggregated experiment needs role 'prefill' and role 'decode' groups, "
                f"got roles {sorted(roles)}"
            )
        return self

    def gpus(self) -> int:
        return sum(g.replicas * g.tensor_parallel for g in self.workers)


class ConcurrencySweep(Strict):
    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    name: Name = "concurrency-sweep"
    concurrency: list[Annotated[int, Field(gt=0, le=4096)]] = Field(min_length=1)
    isl: int = Field(gt=0)
    osl: int = Field(gt=0)
    duration_s: float | None = Field(default=None, gt=0, description="seconds of load per step")
    request_count: int | None = Field(default=None, gt=0, description="requests per step")

    @field_validator("concurrency")
    @classmethod
    def _unique(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"concurrency values must be unique, got {v}")
        return v

    @model_validator(mode="after")
    def _one_stop_rule(self) -> ConcurrencySweep:
        if (self.duration_s is None) == (self.request_count is None):
            raise ValueError("give exactly one of duration_s or request_count")
        return self


Workload = Annotated[ConcurrencySweep, Field(discriminator="kind")]


class WarmUp(Strict):
    request_count: int = Field(default=0, ge=0, description="warm-up requests, excluded from results")


class SmokeTest(Strict):
    requests: int = Field(default=3, gt=0, le=50)
    max_tokens: int = Field(default=8, gt=0, le=256)


class PoolPrice(Strict):
    usd_per_hour: float = Field(ge=0)


class Pricing(Strict):
    source: str = Field(default="spec", description="where the prices come from")
    as_of: str | None = Field(default=None, description="date the prices were read")
    instances: dict[str, PoolPrice] = Field(default_factory=dict, description="instance type -> price")
    eks_cluster_usd_per_hour: float = Field(default=0.10, ge=0)


class Budget(Strict):
    max_usd: float | None = Field(default=None, gt=0)
    max_hours: float | None = Field(default=None, gt=0)


class Timeouts(Strict):
    capacity_s: float = Field(default=1800, gt=0)
    ready_s: float = Field(default=1800, gt=0)
    load_grace_s: float = Field(default=600, ge=0, description="allowed beyond a step's estimate")


class CampaignSpec(Strict):
    name: Name
    description: str = ""
    model: ModelSpec
    pools: list[PoolSpec] = Field(min_length=1)
    experiments: list[Experiment] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    repeats: int = Field(default=1, gt=0, le=20)
    seed: int = Field(default=42, ge=0, description="base random seed; repeat r uses seed + r")
    warmup: WarmUp = WarmUp()
    smoke: SmokeTest = SmokeTest()
    pricing: Pricing = Pricing()
    budget: Budget = Budget()
    timeouts: Timeouts = Timeouts()

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
            for j, g in enumerate(e.workers):
                where = f"experiments[{i}].workers[{j}]"
                pool = pools.get(g.pool)
                if pool is None:
                    problems.append(f"{where}.pool: {g.pool!r} is not a pool; valid: {sorted(pools)}")
                    continue
                if g.tensor_parallel > pool.gpus_per_node:
                    problems.append(
                        f"{where}.tensor_parallel: {g.tensor_parallel} exceeds pool {pool.name!r} "
                        f"gpus_per_node {pool.gpus_per_node}"
                    )
        for i, w in enumerate(self.workloads):
            if w.isl + w.osl > self.model.max_context:
                problems.append(
                    f"workloads[{i}]: isl {w.isl} + osl {w.osl} exceeds model.max_context "
                    f"{self.model.max_context}"
                )
        for inst in self.pricing.instances:
            if inst not in {p.instance_type for p in self.pools}:
                problems.append(
                    f"pricing.instances.{inst}: no pool uses this instance type; "
                    f"valid: {sorted({p.instance_type for p in self.pools})}"
                )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def pool(self, name: str) -> PoolSpec:
        return next(p for p in self.pools if p.name == name)


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("concurrency_sweep",) or str(part).startswith("function-"):
            continue  # discriminator tag pydantic puts into the path
        else:
            out += ("." if out else "") + str(part)
    return out or "(spec)"


def _problems(err: ValidationError) -> list[str]:
    lines: list[str] = []
    for e in err.errors():
        where = _loc(tuple(e["loc"]))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] in ("value_error", "assertion_error"):
            for line in msg.splitlines():
                lines.append(line if ":" in line.split(" ")[0] else f"{where}: {line}")
            continue
        value = e.get("input")
        shown = json.dumps(value, default=str)[:80] if not isinstance(value, dict) else "{...}"
        if e["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown field (value {shown}); remove it or check its spelling")
        elif e["type"] == "missing":
            lines.append(f"{where}: required field is missing")
        else:
            lines.append(f"{where}: {shown} is invalid: {msg}")
    return lines


def parse_spec(data: Any, source: str = "<spec>") -> CampaignSpec:
    """Validate already-loaded spec data; raise SpecError with one line per problem."""
    if not isinstance(data, dict):
        raise SpecError(source, [f"(spec): expected a mapping at the top level, got {type(data).__name__}"])
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(source, _problems(err)) from None


def load_spec_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), ["(file): not found"]) from None
    except UnicodeDecodeError as err:
        raise SpecError(str(path), [f"(file): not UTF-8 text ({err.reason} at byte {err.start})"]) from None


def parse_spec_text(text: str, source: str) -> CampaignSpec:
    import yaml  # lazily: Lambdas only ever read the JSON spec the Plan state stored

    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise SpecError(source, [f"(file): not valid {'JSON' if source.endswith('.json') else 'YAML'}: {err}"]) from None
    return parse_spec(data, source)


def load_spec(path: str | Path) -> CampaignSpec:
    p = Path(path)
    return parse_spec_text(load_spec_text(p), str(p))


def spec_hash(spec: CampaignSpec) -> str:
    """Content hash of the validated spec (defaults applied): same meaning ⇒ same hash."""
    canon = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def safe_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
