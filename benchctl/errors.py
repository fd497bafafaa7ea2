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
