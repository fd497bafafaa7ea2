"""The local engine's answer to ``.waitForTaskToken`` states: events, not polls.

A callback state's handler (``AwaitLoadEnd``) hands its task token and a *wake* check to
:class:`CallbackRelay`. A thread per token runs the check every ``interval`` seconds in this process (it
reads the load runner's exit record and the run store: no state transition, no Lambda call, no history
event), sends ``SendTaskHeartbeat`` while the check says "not yet", and ``SendTaskSuccess`` as soon as it
names a reason (the load ended, the serving side died, an abort was requested, the deadline passed).
The state after the callback state (``CheckLoad``) then judges, as it always did: the callback only
wakes the state machine at once instead of on its next poll.

Step Functions semantics held here, including moto's (which runs the ASL locally):

* the answer is re-sent until the state machine shows it moved on (:meth:`observe` sees the next task of
  the same step): moto drops an answer sent before the Task waits for it when ``HeartbeatSeconds`` is
  set, and Step Functions accepts a duplicate answer only as ``TaskTimedOut``/``InvalidToken``, which
  end the re-sending;
* a relay that stops answering (a hung process) is bounded by the state's ``HeartbeatSeconds``:
  ``States.Timeout`` (moto) or ``States.HeartbeatTimeout`` (AWS), caught like any failure;
* a second delivery of the same token (a retried invocation) watches nothing twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from benchctl.campaign.load import wake_reason as reason_of

Wake = Callable[[], "str | None"]


class CallbackRelay:
    """Answers the task tokens handed to :meth:`watch`; :meth:`close` stops every watcher."""

    def __init__(self, client: Callable[[], Any], *, interval: float = 0.05, heartbeat_s: float = 10.0,
                 resend_s: float = 0.25) -> None:
        self._client = client  # a factory: one Step Functions client per watcher thread
        self.interval, self.heartbeat_s, self.resend_s = interval, heartbeat_s, resend_s
        self._lock = threading.Lock()
        self._watching: dict[str, tuple[str, tuple[str, str]]] = {}  # token -> (state, key)
        self._acked: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self.sent: list[tuple[str, str]] = []  # (token, reason) of every answer sent first

    def watch(self, token: str, state: str, key: tuple[str, str], wake: Wake) -> bool:
        """Answer ``token`` once ``wake()`` names a reason; False when the token is already watched."""
        with self._lock:
            if token in self._watching or self._closed.is_set():
                return False
            self._watching[token] = (state, key)
            self._acked[token] = threading.Event()
            t = threading.Thread(target=self._run, args=(token, wake), name=f"callback-{key[0]}-{key[1]}",
                                 daemon=True)
            self._threads.append(t)
        t.start()
        return True

    def observe(self, event: dict[str, Any]) -> None:
        """Every task invocation of the execution (the engine's dispatcher): the next task of a watched step
        (another state, same experiment and step) acknowledges that step's answer."""
        key = (str(event.get("experiment")), str(event.get("step")))
        with self._lock:
            for token, (state, watched) in self._watching.items():
                if watched == key and event.get("state") != state:
                    self._acked[token].set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for ev in self._acked.values():
                ev.set()
            threads = list(self._threads)
        for t in threads:
            t.join(timeout=5)

    def _run(self, token: str, wake: Wake) -> None:
        sfn = self._client()
        errors = (sfn.exceptions.InvalidToken, sfn.exceptions.TaskTimedOut, sfn.exceptions.TaskDoesNotExist)
        last_beat = time.monotonic()
        reason: str | None = None
        while not self._closed.is_set():
            reason = reason_of(wake)
            if reason:
                break
            if time.monotonic() - last_beat >= self.heartbeat_s:
                last_beat = time.monotonic()
                try:
                    sfn.send_task_heartbeat(taskToken=token)
                except (sfn.exceptions.InvalidToken, sfn.exceptions.TaskDoesNotExist):
                    pass  # not waiting yet (moto): the answer below is re-sent anyway
                except sfn.exceptions.TaskTimedOut:
                    return
            self._closed.wait(self.interval)
        if not reason:
            return
        first = True
        while not self._acked[token].is_set() and not self._closed.is_set():
            try:
                sfn.send_task_success(taskToken=token, output=json.dumps({"woken": reason}))
            except errors:
                return  # the task is over (timed out, or the execution ended): nothing to wake
            if first:
                self.sent.append((token, reason))
                first = False
            self._acked[token].wait(self.resend_s)
