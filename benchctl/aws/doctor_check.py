"""One line of ``benchctl doctor`` (:class:`Check`) and the Lambda client the doctor invokes functions with: what
the doctor's check modules share (``benchctl.aws.doctor``, ``benchctl.aws.doctor_stop``). Standard library and botocore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def lambda_client(session: Any) -> Any:
    """Lambda as the doctor invokes it: a self-test may take minutes (Athena's DDL, a slow cold start), and an
    invocation retried on a read timeout would run it twice."""
    from botocore.config import Config

    return session.client("lambda", config=Config(read_timeout=900, connect_timeout=30, retries={"max_attempts": 0}))
