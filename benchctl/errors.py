"""Typed errors: the contract between handlers and the state machine.

The ASL matches on the class name (Lambda reports it as ``errorType``):
``NotReadyYet`` is absorbed by a Retry; every other error goes through a Catch to teardown.
May import only the standard library.
"""

from __future__ import annotations


class BenchError(Exception):
    """Base of every error benchctl raises on purpose."""


class NotReadyYet(BenchError):
    """The awaited thing (capacity, deployment, load) is not there yet; the state machine retries."""


class SpecError(BenchError):
    """A campaign spec is invalid. ``problems`` holds one line per problem: field path, value, valid."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class ArtifactError(BenchError):
    """Benchmark artifacts are missing or malformed (names the file and what was expected)."""


class ServingFailed(BenchError):
    """A serving process/deployment died or failed to become ready."""


class LoadFailed(BenchError):
    """The load generator failed (no usable results)."""


class EndRecordForged(LoadFailed):
    """A load runner's end record that its step's key did not sign (unsigned, altered, or written by someone
    who never read the step's request): refused, never read as the step's end."""


class SmokeTestFailed(BenchError):
    """The short requests after deploy did not succeed."""


class QualityGateFailed(SmokeTestFailed):
    """The model answered the quality questions below the spec's ``quality.min_score`` (real models only)."""


class Aborted(BenchError):
    """A person (Ctrl-C) or a guard asked the campaign to stop."""


class InjectedFailure(BenchError):
    """A failure injected on purpose (rehearsal, --fail-at)."""


class DeadlineExceeded(BenchError):
    """Waiting for something took longer than its deadline."""


class PreflightFailed(BenchError):
    """A prerequisite of the engine is missing (cluster, namespace, CRD, secret, volume, node group)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("preflight: " + "; ".join(problems))


class ScaleInterrupted(BenchError):
    """A pool change was cut short (the record says so); the campaign restores instead of retrying."""


class CampaignIdInUse(BenchError):
    """The campaign id is claimed by another execution (``RunState.claim``): this execution touches nothing of
    that campaign (no spec, no lock, no pool record, no failure record) and fails."""


class BudgetExceeded(BenchError):
    """Accrued cost plus the remaining estimate would exceed the spec's budget: the campaign aborts."""


class CeilingExceeded(SpecError):
    """A spec asks for more than the deployment's ceilings allow (``benchctl.planning.ceilings``: images, instance types
    and prices, nodes, dollars, timeouts, worst-case history). One line per problem names the ceiling."""


class CapacityUnavailable(BenchError):
    """A pool's nodes cannot be had: EC2 or EKS reported a capacity or launch failure for them (a node group's
    health issue, a Karpenter NodeClaim that could not launch). Names the instance type, the zone, the code that
    EC2/EKS reported and how many nodes launched of how many; the campaign ends (teardown restores the pool)
    instead of waiting out ``timeouts.capacity_s`` while what did launch bills."""

    def __init__(self, pool: str, *, instance_type: str, zone: str, code: str, launched: int, requested: int,
                 detail: str = "", where: str = "") -> None:
        self.pool, self.instance_type, self.zone, self.code = pool, instance_type, zone, code
        self.launched, self.requested, self.detail, self.where = launched, requested, detail, where
        super().__init__(
            f"pool {pool!r}{f' ({where})' if where else ''}: {launched} of {requested} {instance_type} node(s) "
            f"launched in {zone}; {code}{': ' + detail.rstrip('.') if detail else ''}. The campaign ends here and its "
            "teardown gives the pool back; to run it, use capacity that exists: another zone that offers the type "
            "(aws ec2 describe-instance-type-offerings --location-type availability-zone), a capacity reservation "
            "or Capacity Block for it (the pool's capacity), or fewer nodes")


class CampaignNotRunning(BenchError):
    """A state that scales or deploys ran for a campaign that is no longer running (stopped meanwhile, or a
    redriven execution of a campaign that ended)."""
