"""The deployment's ceilings: what any campaign spec may ask for, set by whoever deploys benchctl, never by the spec.

A benchmark user writes specs; the deployment (CDK context ``benchctl:ceilings`` in ``cdk.json``) says which
images may run, on which instance types at no less than their list prices, on how many nodes per pool, for how
many dollars per campaign, with which longest timeouts, and how long the campaign's Step Functions history may
grow in the worst case. :func:`check` names every way a spec and its plan go past them: the ceiling, the spec
path, the value and what is allowed.

Where they are applied: the CLI (``validate``, ``plan``, ``render``, ``run``, ``start``) reads them from the
project's ``cdk.json`` (or ``--context-file``); on AWS the stack records them in the template as
``BENCHCTL_CEILINGS`` on the Plan and Pools functions, whose Plan and ScalePools refuse with
:class:`benchctl.errors.CeilingExceeded`. A spec without ``budget.max_usd`` gets ``max_usd_per_campaign`` as its
budget (the plan's ``max_usd``, which the budget guard holds it to).

Pure: the standard library and benchctl's pure core only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchctl.planning.plan import CampaignPlan
    from benchctl.spec.model import CampaignSpec

CONTEXT_KEY = "benchctl:ceilings"
ENV_VAR = "BENCHCTL_CEILINGS"  # the ceilings' JSON on the Plan and Pools functions (stacks/control_plane.py)
# Step Functions' hard quota of events in one Standard execution's history; past it the execution fails at
# once, with no Catch, so with no teardown (benchctl.planning.history.HISTORY_LIMIT). A deployment may refuse worst cases
# above at most 90 % of it (retries and redeliveries add events no estimate counts).
HISTORY_LIMIT = 25_000
MAX_HISTORY_CEILING = 22_500
TIMEOUT_KINDS = ("capacity_s", "ready_s", "load_grace_s", "smoke_s", "teardown_s")  # every spec.timeouts field

# The defaults, exactly what cdk.json ships (tests/unit/test_ceilings.py holds the two equal).
# Images: the repositories the spec's defaults and every example use (NVIDIA's Dynamo runtimes on NGC, the AWS
# CLI on ECR Public, Docker Hub's official python). Prices: AWS EC2 On-Demand list prices, Linux, us-east-1
# (https://aws.amazon.com/ec2/pricing/on-demand/), as the examples' pricing blocks give them (as_of 2026-11-01):
# exactly the instance types the examples use. Add a type with its list price in cdk.json to allow it.
DEFAULTS: dict[str, Any] = {
    "image_repositories": ["nvcr.io/nvidia/ai-dynamo", "public.ecr.aws/aws-cli/aws-cli", "docker.io/library/python"],
    "require_image_digest": False,
    "instance_types": {"p4d.24xlarge": 21.96, "g6e.12xlarge": 10.49, "m7i.2xlarge": 0.4032},
    "max_nodes_per_pool": 4,
    "max_usd_per_campaign": 1500,
    "max_timeouts_s": {"capacity_s": 7200, "ready_s": 7200, "load_grace_s": 3600, "smoke_s": 3600,
                       "teardown_s": 3600},
    "max_history_events": 20_000,
    "history_poll_seconds": 30,
}

KEYS: dict[str, str] = {
    "image_repositories": "a list of image repository prefixes ([registry/]path, no tag), e.g. "
                          "\"nvcr.io/nvidia/ai-dynamo\": an image is allowed when its repository is one of them or "
                          "under one ('/'-bounded; Docker Hub names normalised to docker.io/library/...)",
    "require_image_digest": "true or false: every image must be pinned by @sha256 digest",
    "instance_types": "an object instance type -> its list price in USD per hour (> 0): the only types a pool "
                      "may use, and the least price a spec may give",
    "max_nodes_per_pool": "an integer 1..1000: the most nodes one pool may have (pools[].max_nodes and the plan's)",
    "max_usd_per_campaign": "a number > 0: the most one campaign may cost (its budget when the spec sets none)",
    "max_timeouts_s": f"an object with each of {list(TIMEOUT_KINDS)} -> the longest a spec may set, seconds (> 0)",
    "max_history_events": f"an integer 1000..{MAX_HISTORY_CEILING}: the most events a campaign's Step Functions "
                          f"history may reach when every wait runs to its deadline (the quota is {HISTORY_LIMIT:,})",
    "history_poll_seconds": "an integer 1..3600: the poll period the worst case is reckoned at where none is given "
                            "(validate, render; `start` and `plan` use their --poll-seconds)",
}


class CeilingsError(ValueError):
    """The deployment's ceilings themselves are malformed (names the key and what is valid)."""


@dataclass(frozen=True)
class Problem:
    """One way a spec goes past a ceiling."""

    ceiling: str  # the key under benchctl:ceilings
    path: str  # where in the spec
    value: Any
    allowed: str

    def line(self) -> str:
        return f"ceiling {self.ceiling}: {self.path} = {self.value!r}; allowed: {self.allowed}"


@dataclass(frozen=True)
class Ceilings:
    image_repositories: tuple[str, ...]
    instance_types: dict[str, float]
    max_nodes_per_pool: int
    max_usd_per_campaign: float
    max_timeouts_s: dict[str, float]
    max_history_events: int
    require_image_digest: bool = False
    history_poll_seconds: int = 30
    source: str = field(default="built-in defaults", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"image_repositories": list(self.image_repositories), "require_image_digest": self.require_image_digest,
                "instance_types": dict(self.instance_types), "max_nodes_per_pool": self.max_nodes_per_pool,
                "max_usd_per_campaign": self.max_usd_per_campaign, "max_timeouts_s": dict(self.max_timeouts_s),
                "max_history_events": self.max_history_events, "history_poll_seconds": self.history_poll_seconds}

    def budget_usd(self, spec: CampaignSpec) -> float:
        """The budget the campaign is held to: the spec's ``budget.max_usd``, else the ceiling."""
        return spec.budget.max_usd if spec.budget.max_usd is not None else self.max_usd_per_campaign


# ------------------------------------------------------------------------------------------ parsing


def _bad(key: str, value: Any, source: str) -> CeilingsError:
    return CeilingsError(f"{source}: '{CONTEXT_KEY}.{key}': {value!r} is not valid; valid: {KEYS[key]}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse(raw: Any, source: str = f"CDK context '{CONTEXT_KEY}'") -> Ceilings:
    """The ceilings from their JSON object (absent keys take :data:`DEFAULTS`); CeilingsError naming the key."""
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise CeilingsError(f"{source}: not valid JSON ({err.msg})") from None
    if not isinstance(raw, Mapping):
        raise CeilingsError(f"{source}: expected an object with keys {', '.join(KEYS)}; got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise CeilingsError(f"{source}: unknown key(s) {unknown}; valid keys: {', '.join(KEYS)}")
    v = {**DEFAULTS, **raw}
    repos = v["image_repositories"]
    if (not isinstance(repos, list) or not repos
            or not all(isinstance(r, str) and _REPOSITORY.fullmatch(normalise_repository(r)) for r in repos)):
        raise _bad("image_repositories", repos, source)
    if not isinstance(v["require_image_digest"], bool):
        raise _bad("require_image_digest", v["require_image_digest"], source)
    types = v["instance_types"]
    if (not isinstance(types, Mapping) or not types or not all(
            isinstance(k, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]*\.[a-z0-9]+", k) and _number(p) and p > 0
            for k, p in types.items())):
        raise _bad("instance_types", types, source)
    nodes = v["max_nodes_per_pool"]
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= 1000:
        raise _bad("max_nodes_per_pool", nodes, source)
    usd = v["max_usd_per_campaign"]
    if not _number(usd) or usd <= 0:
        raise _bad("max_usd_per_campaign", usd, source)
    timeouts = v["max_timeouts_s"]
    if (not isinstance(timeouts, Mapping) or set(timeouts) != set(TIMEOUT_KINDS)
            or not all(_number(t) and t > 0 for t in timeouts.values())):
        raise _bad("max_timeouts_s", timeouts, source)
    history = v["max_history_events"]
    if not isinstance(history, int) or isinstance(history, bool) or not 1000 <= history <= MAX_HISTORY_CEILING:
        raise _bad("max_history_events", history, source)
    poll = v["history_poll_seconds"]
    if not isinstance(poll, int) or isinstance(poll, bool) or not 1 <= poll <= 3600:
        raise _bad("history_poll_seconds", poll, source)
    return Ceilings(
        image_repositories=tuple(normalise_repository(r) for r in repos), instance_types={k: float(p) for k, p in types.items()},
        max_nodes_per_pool=nodes, max_usd_per_campaign=float(usd),
        max_timeouts_s={k: float(timeouts[k]) for k in TIMEOUT_KINDS}, max_history_events=history,
        require_image_digest=v["require_image_digest"], history_poll_seconds=poll, source=source)


def default() -> Ceilings:
    return parse(DEFAULTS, "built-in defaults (benchctl.planning.ceilings.DEFAULTS)")


def from_context_file(path: Path) -> Ceilings:
    """The ceilings of a CDK app's ``cdk.json`` (its ``context`` object's ``benchctl:ceilings``; absent: the
    defaults). FileNotFoundError / CeilingsError naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"--context-file {path}: no such file (a CDK app's cdk.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CeilingsError(f"--context-file {path}: not valid JSON ({err})") from None
    context = data.get("context", {}) if isinstance(data, dict) else None
    if not isinstance(context, dict):
        raise CeilingsError(f"--context-file {path}: expected a cdk.json object with a \"context\" object")
    return parse(context.get(CONTEXT_KEY), f"{path}: context '{CONTEXT_KEY}'")


# the project's CDK app, beside the package in a checkout (an installed package has none: the defaults)
PROJECT_CONTEXT_FILE = Path(__file__).resolve().parents[2] / "cdk.json"


def resolve(context_file: Path | None, environ: Mapping[str, str] | None = None) -> Ceilings:
    """The ceilings the CLI holds specs to: ``context_file``'s (``--context-file``), else
    $BENCHCTL_CONTEXT_FILE's, else the project's cdk.json, else the built-in defaults (what cdk.json ships)."""
    import os

    env = os.environ if environ is None else environ
    given = context_file or (Path(env["BENCHCTL_CONTEXT_FILE"]) if env.get("BENCHCTL_CONTEXT_FILE") else None)
    if given is not None:
        return from_context_file(given)
    return from_context_file(PROJECT_CONTEXT_FILE) if PROJECT_CONTEXT_FILE.is_file() else default()


def from_env(environ: Mapping[str, str]) -> Ceilings:
    """The ceilings the stack recorded on this function (``BENCHCTL_CEILINGS``); unset: the defaults (fail
    closed: a function without them still refuses what the defaults refuse)."""
    raw = environ.get(ENV_VAR)
    return parse(raw, f"environment variable {ENV_VAR}") if raw else default()


# ------------------------------------------------------------------------------------------ images

# distribution/reference's grammar (github.com/distribution/reference, reference.go):
#   reference := name [":" tag] ["@" digest]; name := [domain "/"] path-component ["/" path-component]*
#   domain-component := [a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]; path-component := [a-z0-9]+ (sep [a-z0-9]+)*
#   separator := [_.] | "__" | "-"+; tag := [\w][\w.-]{0,127}
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_DOMAIN}/{_COMPONENT}(?:/{_COMPONENT})*")
_REFERENCE = re.compile(rf"(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>[\w][\w.-]{{0,127}}))?"
                        r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?")


def normalise_repository(name: str) -> str:
    """A repository name as the container runtime resolves it (distribution/reference's normalize.go): the
    first component is a registry when it has a '.' or ':' or is ``localhost``, else Docker Hub
    (``docker.io``, and ``library/`` for a one-component name)."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if rest else f"docker.io/library/{name}"


def image_problem(path: str, image: str, c: Ceilings) -> Problem | None:
    """Why an image reference may not run under the ceilings, or None."""
    allowed = ", ".join(c.image_repositories) + (" (pinned by @sha256 digest)" if c.require_image_digest else "")
    m = _REFERENCE.fullmatch(image)
    if m is None or (m.group("tag") is None and m.group("digest") is None):
        return Problem("image_repositories", path, image, "a reference [registry/]repository:tag or @sha256:<64 hex> "
                       f"under {allowed}")
    repo = normalise_repository(m.group("name"))
    if not any(repo == r or repo.startswith(r + "/") for r in c.image_repositories):
        return Problem("image_repositories", path, image, f"images under {allowed}")
    if c.require_image_digest and m.group("digest") is None:
        return Problem("require_image_digest", path, image, f"images pinned by digest (repository@sha256:<64 hex>) "
                       f"under {allowed}")
    return None


def spec_images(spec: CampaignSpec) -> list[tuple[str, str]]:
    """(spec path, image) of every image the spec makes the cluster run (an EFA pool's derived runtime image
    too); ``aiperf_image`` unset is the deployment's own load image, not the spec's."""
    k = spec.kubernetes
    out = [("kubernetes.dynamo_image", k.dynamo_image), ("kubernetes.uploader_image", k.uploader_image),
           ("kubernetes.prefetch_image", k.prefetch_image)]
    if k.aiperf_image is not None:
        out.append(("kubernetes.aiperf_image", k.aiperf_image))
    for i, pool in enumerate(spec.pools):
        if pool.network.efa_image is not None:
            out.append((f"pools[{i}].network.efa_image", pool.network.efa_image))
    return out


# ------------------------------------------------------------------------------------------ the check


def pool_problems(spec: CampaignSpec, nodes: Mapping[str, int], c: Ceilings, where: str) -> list[Problem]:
    """Instance types and node counts of the pools one experiment scales (ScalePools' check, and part of Plan's)."""
    out = []
    for pool, n in nodes.items():
        p = spec.pool(pool)
        i = spec.pools.index(p)
        if p.instance_type not in c.instance_types:
            out.append(Problem("instance_types", f"pools[{i}].instance_type", p.instance_type,
                               f"one of {sorted(c.instance_types)}"))
        if n > c.max_nodes_per_pool:
            out.append(Problem("max_nodes_per_pool", f"{where}: nodes of pool {pool!r}", n,
                               f"at most {c.max_nodes_per_pool}"))
    return out


def check(spec: CampaignSpec, plan: CampaignPlan, c: Ceilings, poll_seconds: int | None = None) -> list[Problem]:
    """Every way the spec (and its plan) goes past the ceilings; empty: within them.

    ``poll_seconds``: the Wait states' period the worst-case Step Functions history is reckoned at (the AWS
    engine's; None: not checked, e.g. for the local engine, whose interpreter has no history quota)."""
    from benchctl.planning.history import history_estimate
    from benchctl.planning.plan import plan_campaign

    out: list[Problem] = []
    for path, image in spec_images(spec):
        if (p := image_problem(path, image, c)) is not None:
            out.append(p)
    for i, pool in enumerate(spec.pools):
        listed = c.instance_types.get(pool.instance_type)
        if listed is None:
            out.append(Problem("instance_types", f"pools[{i}].instance_type", pool.instance_type,
                               f"one of {sorted(c.instance_types)}"))
        else:
            price = spec.pricing.instances.get(pool.instance_type)
            if price is None:
                out.append(Problem("instance_types", f"pricing.instances.{pool.instance_type}", None,
                                   f"a price of at least its list price ${listed:g}/h"))
            elif price.usd_per_hour < listed:
                out.append(Problem("instance_types", f"pricing.instances.{pool.instance_type}.usd_per_hour",
                                   price.usd_per_hour, f"at least its list price ${listed:g}/h"))
        if pool.max_nodes > c.max_nodes_per_pool:
            out.append(Problem("max_nodes_per_pool", f"pools[{i}].max_nodes", pool.max_nodes,
                               f"at most {c.max_nodes_per_pool}"))
    for e in plan.experiments:
        i = next(j for j, x in enumerate(spec.experiments) if x.name == e.tune.get("arm", e.lake_name))  # pilot: its arm
        out += [p for p in pool_problems(spec, e.nodes, c, f"experiments[{i}]") if p.ceiling != "instance_types"]
    if spec.budget.max_usd is not None and spec.budget.max_usd > c.max_usd_per_campaign:
        out.append(Problem("max_usd_per_campaign", "budget.max_usd", spec.budget.max_usd,
                           f"at most ${c.max_usd_per_campaign:g}"))
    if plan.est_usd is not None and plan.est_usd > c.max_usd_per_campaign:
        out.append(Problem("max_usd_per_campaign", "(plan) estimated cost", plan.est_usd,
                           f"at most ${c.max_usd_per_campaign:g}"))
    for kind in TIMEOUT_KINDS:
        value = getattr(spec.timeouts, kind)
        if value > c.max_timeouts_s[kind]:
            out.append(Problem("max_timeouts_s", f"timeouts.{kind}", value, f"at most {c.max_timeouts_s[kind]:g} s"))
    if poll_seconds is not None and not any(p.ceiling == "max_timeouts_s" for p in out):
        worst = history_estimate(spec, plan if plan.engine == "aws" else plan_campaign(spec, "aws"), poll_seconds).worst
        if worst > c.max_history_events:
            out.append(Problem("max_history_events", f"(plan) worst-case Step Functions history at a {poll_seconds} s "
                               "poll", worst, f"at most {c.max_history_events:,} events (an execution past "
                               f"{HISTORY_LIMIT:,} ends with no teardown): poll less often, shorten timeouts.*, "
                               "or split the campaign"))
    return out


def lines(problems: list[Problem]) -> list[str]:
    return [p.line() for p in problems]


def refuse(spec: CampaignSpec, source: str, c: Ceilings, poll_seconds: int | None,
           plan: CampaignPlan | None = None) -> None:
    """Raise :class:`benchctl.errors.CeilingExceeded` (one line per problem) when the spec goes past ``c``;
    ``plan``: the one to judge (default the AWS engine's plan of the spec)."""
    from benchctl.errors import CeilingExceeded
    from benchctl.planning.plan import plan_campaign

    over = check(spec, plan or plan_campaign(spec, "aws"), c, poll_seconds)
    if over:
        raise CeilingExceeded(source, lines(over))
