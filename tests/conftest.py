"""Session-wide rules for every test tier.

In CI (``CI`` set to a true value) a skipped test fails the run: a skip there means a part of the
product went untested, usually because something the project's own set-up should install is missing.
The only skips allowed are those whose reason names a tool in ``OPTIONAL_TOOLS``, which the README
calls optional.
"""

from __future__ import annotations

import os

import pytest

OPTIONAL_TOOLS: tuple[str, ...] = ()  # none today: set-up installs everything the tests use
_SKIPS: list[tuple[str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    _one_botocore_loader()
    _keep_compiled_modules()
    _no_default_amis()


def _no_default_amis() -> None:
    """moto's EC2 backend loads its catalogue of public AMIs (thousands of them, from JSON) for every account
    and region it is first asked for: ~3 % of the unit tier's CPU, for EKS node groups and quota tests that name
    no AMI. moto's own switch turns it off (an AMI a test needs is registered by the test)."""
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


def _keep_compiled_modules() -> None:
    """Test processes keep what they compile (``__pycache__``, gitignored) even under PYTHONDONTWRITEBYTECODE:
    without it every xdist worker of every run compiles the project's modules and assertion-rewrites every
    test module again (pytest caches a rewritten module only where bytecode may be written): ~5 s of CPU per
    worker in the unit tier. Nothing else changes: the same sources are compiled the same way, once."""
    import sys

    sys.dont_write_bytecode = False


def _one_botocore_loader() -> None:
    """Every botocore session of a test process shares one data loader, as the clients of one session
    already do: botocore re-reads and re-parses its service-model JSON for each new session otherwise,
    which was ~40 s of CPU in the unit tier (moto, boto3 and awswrangler each open sessions). The loader
    caches models it has finished merging; nothing of ours writes into them."""
    import functools

    import botocore.session

    if not isinstance(botocore.session.create_loader, functools._lru_cache_wrapper):
        botocore.session.create_loader = functools.lru_cache(maxsize=None)(botocore.session.create_loader)


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _SKIPS.append((report.nodeid, reason))


def disallowed_skips(skips: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(node, why) for node, why in skips if not any(tool in why for tool in OPTIONAL_TOOLS)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    bad = disallowed_skips(_SKIPS)
    if _ci() and bad and exitstatus == pytest.ExitCode.OK:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"CI=true: {len(bad)} skipped test(s) fail the run (a skip hides an untested part):"]
        lines += [f"  {node}: {why}" for node, why in bad]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
