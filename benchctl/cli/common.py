"""What every benchctl command shares: errors on stderr, paths resolved at the edge, AWS calls turned into one
line, and the deployment's ceilings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _err(msg: str) -> None:
    say(f"benchctl: {msg}", file=sys.stderr)


def say(text: str, file: Any = None) -> None:
    """Print ``text`` (lake strings, remote bodies, AWS answers) inert: its C0/C1 control characters shown as
    visible escapes (``benchctl.logtext.inert``), so it cannot clear the screen, draw a link or write the
    clipboard of the terminal it lands on."""
    from benchctl import logtext

    print(logtext.inert(text), file=file)


def _path(arg: str) -> Path:
    """A path argument, resolved once at the edge: everything below works with absolute paths."""
    return Path(arg).expanduser().resolve()


def _lake(arg: str) -> Path:
    lake = _path(arg)
    if not lake.is_dir():
        raise FileNotFoundError(f"--lake {arg}: no lake there ({lake} is not a directory); a lake is the "
                                "OUT/lake of `benchctl run --out OUT` (default runs/lake)")
    return lake


class AwsUnavailable(Exception):
    """No AWS credentials, region or endpoint for an AWS command (bad input, not a failed campaign)."""


def _aws(fn: Any) -> Any:
    """Run an AWS call; turn "no credentials / no region / cannot connect / denied" into one line."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn()
    except ClientError as err:
        e = err.response.get("Error", {})
        raise AwsUnavailable(f"AWS refused the call: {e.get('Code')}: {e.get('Message')}") from None
    except BotoCoreError as err:
        hint = ("; configure credentials and a region (aws configure, or AWS_PROFILE / AWS_REGION)"
                if "credentials" in str(err).lower() or "region" in str(err).lower() else "")
        raise AwsUnavailable(f"AWS: {err}{hint}") from None


def _ceilings(args: argparse.Namespace) -> Any:
    from benchctl.planning.ceilings import resolve

    return resolve(args.context_file and _path(args.context_file))


def _within_ceilings(args: argparse.Namespace, spec: Any) -> None:
    """Refuse (CeilingExceeded, exit 2) a spec past the deployment's ceilings, before anything is written."""
    from benchctl.planning.ceilings import refuse

    c = _ceilings(args)
    refuse(spec, str(args.spec), c, c.history_poll_seconds)
