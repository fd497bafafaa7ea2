"""The AWS engine's answer to ``.waitForTaskToken`` states: the load runner Job reports each step's end.

``AwaitLoadEnd`` hands its task token to :class:`RunnerCallbacks`, which keeps it where the step's
runner Job looks for it (``runstate.runner_key(experiment, step, "token.json")`` in the campaign's hand-over,
``runner/<campaign>/``, which only that campaign's runner may read) and then runs the step's wake check
once: when it already names a reason (the end record is there because the step ended before the token was kept, the serving side died, an abort was requested, the deadline passed), the
token is answered here, at once. Otherwise the Job answers it: it sends ``SendTaskHeartbeat`` while
AIPerf runs and ``SendTaskSuccess`` right after the step's end record (``RUNNER_CONTROL_SCRIPT``). Both
sides write first and read second (S3 is strongly consistent), so at least one of them sees the other;
an answer sent twice is refused by Step Functions as ``TaskTimedOut``/``InvalidToken``, which is ignored.
A step the Job cannot end is answered by the Job with ``SendTaskFailure`` (its error and cause) after its end
record; a Job that dies silently stops its heartbeats: the state's heartbeat bound (``LaunchLoad``'s
``heartbeat_s``) fails it, caught like any failure. ``CheckLoad`` then judges, as always.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from benchctl.campaign.load import wake_reason
from benchctl.campaign.runstate import runner_key
from benchctl.campaign.store import RunStore


class RunnerCallbacks:
    """``CallbackPort`` on AWS; ``sfn`` builds a Step Functions client when one is needed."""

    def __init__(self, store: RunStore, sfn: Callable[[], Any]) -> None:
        self.store, self._sfn = store, sfn
        self.sent: list[tuple[str, str]] = []

    def watch(self, token: str, state: str, key: tuple[str, str], wake: Callable[[], str | None]) -> bool:
        path = runner_key(*key, "token.json")
        again = (self.store.read_json(path) or {}).get("token") == token
        self.store.write_json(path, {"token": token, "state": state})
        reason = wake_reason(wake)
        if reason:
            self.answer(token, reason)
        return not again

    def answer(self, token: str, reason: str) -> bool:
        """Resume the state machine; False when the task is already over (answered or timed out)."""
        sfn = self._sfn()
        try:
            sfn.send_task_success(taskToken=token, output=json.dumps({"woken": reason}))
        except (sfn.exceptions.InvalidToken, sfn.exceptions.TaskTimedOut, sfn.exceptions.TaskDoesNotExist):
            return False
        self.sent.append((token, reason))
        return True
