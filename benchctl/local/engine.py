"""The local engine: runs ``state_machines/campaign.asl.json`` on this machine.

The ASL is executed by moto's embedded Step Functions interpreter (a port of LocalStack's: Map,
Retry, Catch, Wait, Choice). Its Lambda tasks are dispatched in-process to the very handlers in
``lambdas/``; the providers behind them are real Dynamo frontend/mocker processes, real AIPerf and
a local parquet lake. Nothing leaves loopback; every process started is stopped, also on failure
and Ctrl-C (first Ctrl-C: orderly abort through the state machine; second: immediate teardown).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchctl import campaign, logtext
from benchctl.campaign import asl
from benchctl.campaign.context import StartInput, start_context
from benchctl.campaign.ports import Engine
from benchctl.campaign.runstate import RunState
from benchctl.lake.query import QueryPort
from benchctl.local.callbacks import CallbackRelay
from benchctl.local.runstore import LocalRunStore

REGION = "us-east-1"
ACCOUNT = "123456789012"


def function_arn(var: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:benchctl-{var.removesuffix('FunctionArn').lower()}"


@dataclass
class Progress:
    """What a person watching sees: state, experiment n/m, step n/m, elapsed time."""

    out: Any = sys.stderr
    started: float = field(default_factory=time.monotonic)
    experiments: list[str] = field(default_factory=list)
    steps: dict[str, list[str]] = field(default_factory=dict)  # each experiment's (plan entry's) step ids
    last: str = ""

    def show(self, event: dict[str, Any]) -> None:
        state = event.get("state") or event.get("action") or "?"
        exp = event.get("experiment")
        step = event.get("step")
        where = []
        if exp and exp in self.experiments:
            where.append(f"experiment {self.experiments.index(exp) + 1}/{len(self.experiments)} {exp}")
        steps = self.steps.get(exp or "", [])
        if step and step in steps:
            where.append(f"step {steps.index(step) + 1}/{len(steps)} {step}")
        line = f"{state}" + (f"  [{' · '.join(where)}]" if where else "")
        if line == self.last:
            return
        self.last = line
        el = int(time.monotonic() - self.started)
        print(f"[{el // 60:02d}:{el % 60:02d}] {line}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        el = int(time.monotonic() - self.started)
        print(f"[{el // 60:02d}:{el % 60:02d}] {text}", file=self.out, flush=True)


class Dispatcher:
    """botocore ``before-call`` hook: Lambda Invoke → the handler function, in this process."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.relay: CallbackRelay | None = None  # sees every invocation: the next task acknowledges an answer
        self.handlers: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {}
        from lambdas import FUNCTIONS

        for var, target in FUNCTIONS.items():
            mod, fn = target.rsplit(".", 1)
            self.handlers[function_arn(var)] = getattr(importlib.import_module(mod), fn)

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse
        from botocore.response import StreamingBody

        name = urllib.parse.unquote(params["url_path"].split("/functions/")[1].split("/")[0])
        body = params.get("body") or b"{}"
        event = json.loads(body)
        headers: dict[str, str] = {}
        handler = self.handlers.get(name)
        try:
            if handler is None:
                raise LookupError(f"no handler for function {name}")
            self.progress.show(event)
            if self.relay is not None:
                self.relay.observe(event)
            raw = json.dumps(handler(event, None), default=str).encode()
        except Exception as exc:  # becomes the ASL error name that Retry/Catch match
            raw = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode()
            headers["X-Amz-Function-Error"] = "Unhandled"
            if type(exc).__name__ != "NotReadyYet":
                self.progress.note(f"  ✗ {event.get('state')}: {type(exc).__name__}: {logtext.readable(str(exc))}")
        parsed: dict[str, Any] = {
            "StatusCode": 200,
            "Payload": StreamingBody(io.BytesIO(raw), len(raw)),
            "ExecutedVersion": "$LATEST",
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": headers},
        }
        if headers:
            parsed["FunctionError"] = "Unhandled"
        return AWSResponse(f"https://lambda.{REGION}.amazonaws.com", 200, headers, None), parsed


class Interrupts:
    """SIGINT, SIGTERM and SIGHUP while a local campaign runs: counted, never raised.

    The handlers are installed explicitly (main thread only): a process started in the background by a
    non-interactive shell inherits SIGINT *ignored*, and Python keeps it ignored, so without this a
    Ctrl-C or ``kill -INT`` was silently lost and the campaign ran on. The handler only counts; the
    engine acts on the count at its next poll (within 0.25 s), so no KeyboardInterrupt can be raised
    (and swallowed) in the middle of library code.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []
        self.during: list[str] = []  # what was running when each signal arrived (``describe()``)
        self.describe: Callable[[], str] = lambda: ""
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.count += 1
        self.names.append(signal.Signals(signum).name)
        self.during.append(self.describe())

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


@dataclass
class RunResult:
    campaign_id: str
    status: str  # SUCCEEDED | FAILED | ABORTED
    error: str | None
    cause: str | None
    run_dir: Path
    lake: Path
    history: list[dict[str, Any]]
    elapsed_s: float
    query: Callable[[], QueryPort] | None = None  # the run's query engine (the runner's), for what is printed


def _parse_once() -> None:
    """Moto's interpreter parses the definition with ANTLR on every create and every execution (~1.3 s
    of CPU each for ours). The syntax tree is a pure function of the definition text: keep it, and run
    moto's Preprocessor on it each time, so every execution still gets fresh evaluation components.
    Then the two other per-execution costs of moto's that buy nothing twice (below)."""
    from moto.stepfunctions.parser.asl.parse import asl_parser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    cls = asl_parser.AmazonStateLanguageParser
    if getattr(cls.parse, "_benchctl_memo", False):
        return
    original = cls.parse
    trees: dict[str, Any] = {}

    def parse(definition: str) -> tuple[Any, Any]:
        tree = trees.get(definition)
        if tree is None:
            _, tree = original(definition)  # raises on a syntax error, as before; only good trees are kept
            trees.clear()  # one definition per process in practice: keep memory bounded
            trees[definition] = tree
        return Preprocessor().visit(tree), tree

    parse._benchctl_memo = True  # type: ignore[attr-defined]
    cls.parse = staticmethod(parse)  # type: ignore[method-assign]
    _validate_once()
    _one_lambda_client()


def _validate_once() -> None:
    """create_state_machine validates by parsing and preprocessing the definition (~0.3 s), then drops the
    result; the execution does both again. A definition that passed once passes again: validate it once."""
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    validate = StepFunctionsParserBackend._validate_definition
    valid: set[str] = set()

    def validate_once(definition: str) -> None:
        if definition not in valid:
            validate(definition=definition)  # raises InvalidDefinition, as before; only a valid one is kept
            valid.clear()
            valid.add(definition)

    StepFunctionsParserBackend._validate_definition = staticmethod(validate_once)  # type: ignore[method-assign]


def _one_lambda_client() -> None:
    """Each Task state makes a new Lambda client of boto3's default session (~60 ms: the session's event
    handlers are copied into every client). One client per session and region makes the same calls: the
    session, with its Invoke dispatcher, is the execution's own (``execute``); botocore clients are
    thread-safe."""
    import boto3
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    make = lambda_eval_utils.boto_client_for
    held: dict[tuple[str, str], Any] = {}
    session: list[Any] = [None]  # the session the held clients were made from (held: its id is never reused)

    def client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        if session[0] is not boto3.DEFAULT_SESSION:  # a new execution: its own session, its own clients
            held.clear()
            session[0] = boto3.DEFAULT_SESSION
        client = held.get((region, service))
        if client is None:
            client = held[(region, service)] = make(region=region, service=service,
                                                    state_credentials=state_credentials)
        return client

    lambda_eval_utils.boto_client_for = client_for


def _quiet_moto() -> None:
    for name in ("moto", "moto.stepfunctions", "moto.stepfunctions.parser"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger().setLevel(logging.CRITICAL) if not logging.getLogger().handlers else None


def execute(
    *,
    engine: Engine,
    start: StartInput,
    progress: Progress | None = None,
    on_force_stop: Callable[[], object] | None = None,
    interrupts: Interrupts | None = None,
) -> RunResult:
    """Run one campaign execution of the ASL, started with ``start`` (the input both engines start with:
    the spec's URI, the campaign id, the poll period); blocks until it ends.

    A first interrupt (``interrupts``) asks the state machine to abort (the run state's abort request
    makes the next task fail with ``Aborted``, and the Catch paths stop the load first, then tear down).
    A second one tears down at once, here."""
    import boto3
    from moto import mock_aws

    from lambdas._runtime import use_callbacks, use_engine

    if not start.campaign_id:
        raise ValueError("a local execution is named after its campaign: give the start input a campaign_id")
    progress = progress or Progress()
    for k, v in {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": REGION}.items():
        os.environ.setdefault(k, v)
    _quiet_moto()
    _parse_once()
    ctx = start_context(start, None, runs_uri=engine.runs_uri, lake_uri=engine.lake_uri)
    run_dir, lake = Path(ctx.run_uri), Path(ctx.lake_uri)
    state = RunState(LocalRunStore(run_dir))
    use_engine(engine)
    dispatcher = Dispatcher(progress)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        intr = interrupts if interrupts is not None else stack.enter_context(Interrupts())
        intr.describe = lambda: progress.last
        stack.callback(use_engine, None)
        with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            session = boto3.session.Session(region_name=REGION)
            boto3.setup_default_session(region_name=REGION)  # moto's interpreter invokes via the default session
            assert boto3.DEFAULT_SESSION is not None
            boto3.DEFAULT_SESSION.events.register("before-call.lambda.Invoke", dispatcher)
            sfn = session.client("stepfunctions")
            # the answers to the callback states (AwaitLoadEnd): the load's end as an event, not a poll
            relay = CallbackRelay(lambda: sfn)
            dispatcher.relay = relay
            use_callbacks(relay)
            try:
                desc, history = _run_execution(sfn, start, ctx, state, progress, intr, engine, on_force_stop)
            finally:
                relay.close()  # inside the mock: no answer may ever go anywhere else
                use_callbacks(None)
                dispatcher.relay = None
            boto3.DEFAULT_SESSION.events.unregister("before-call.lambda.Invoke", dispatcher)
        interrupted = intr.count > 0
    status = desc.get("status", "FAILED")
    if status == "FAILED" and interrupted:
        status = "ABORTED"
    if status != "SUCCEEDED" and not (run_dir / "report" / "report.html").is_file():
        _report_after(engine, ctx, desc, progress)
    return RunResult(
        campaign_id=ctx.campaign_id,
        status=status,
        error=desc.get("error"),
        cause=desc.get("cause"),
        run_dir=run_dir,
        lake=lake,
        history=history,
        elapsed_s=time.monotonic() - started,
    )


def _report_after(engine: Engine, ctx: Any, desc: dict[str, Any], progress: Progress) -> None:
    """The state machine's report step failed (or never ran): every ending still has its report here, written
    as ReportFailure writes it, after the execution ended; that its own step failed is in the timeline."""
    from benchctl.lake import timeline

    p = engine.providers(ctx)
    if p.report is None:  # an engine that writes no report (a test's)
        return
    progress.note("the report step did not write the report: writing it now")
    with contextlib.suppress(Exception):  # the lake may be what failed: the report says what it can
        campaign.record_event(p, ctx.campaign_id, timeline.CAMPAIGN, timeline.CLEANUP_ERROR, key="report-step",
                              item="report step", error=str(desc.get("error") or "Unknown"),
                              cause="the state machine's report step did not write the report; the local engine "
                                    "wrote it after the execution ended")
    campaign.report_ending(p, ctx, campaign.Task(state="ReportFailure",
                                                 ending="untorn" if desc.get("error") == "AbortFailed" else "failed"))


def _run_execution(sfn: Any, start: StartInput, ctx: Any, state: RunState, progress: Progress, intr: Interrupts,
                   engine: Engine, on_force_stop: Callable[[], object] | None) -> tuple[dict[str, Any], list[Any]]:
    """Create and start the state machine, follow it to its end (acting on interrupts): (description, history)."""
    from lambdas import FUNCTIONS

    definition = asl.substitute({var: function_arn(var) for var in FUNCTIONS})
    arn = sfn.create_state_machine(
        name="benchctl-campaign", definition=definition,
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/benchctl-local",
    )["stateMachineArn"]
    before = set(threading.enumerate())
    execution = sfn.start_execution(
        stateMachineArn=arn, name=ctx.campaign_id[:80], input=json.dumps(start.to_json())
    )["executionArn"]
    # moto runs the execution in a thread of its own: wait on that thread rather than asking for the
    # execution's description 4 times a second (each answer is serialized: ~50 ms of CPU, taken from the
    # processes under load). Without such a thread, poll as before.
    runners = [t for t in threading.enumerate() if t not in before]
    worker = runners[0] if len(runners) == 1 else None
    desc: dict[str, Any] = {}
    handled = 0
    last_look = 0.0
    while True:
        if intr.count > handled:
            if handled == 0:
                progress.note("interrupt: stopping the load first, then tearing down (Ctrl-C again to force)")
                state.request_abort(f"interrupted ({intr.names[0]})", during=intr.during[0])
            if intr.count >= 2:
                progress.note("forced stop: tearing down now")
                if on_force_stop:
                    on_force_stop()
                ending = "failed"
                try:
                    campaign.abort_campaign(engine.providers(ctx), ctx,
                                            campaign.Task(error={"Error": "Aborted", "Cause": "forced stop"}))
                except Exception as exc:  # the report still follows, saying the teardown failed
                    progress.note(f"  ✗ forced teardown: {type(exc).__name__}: {logtext.readable(str(exc))}")
                    ending = "untorn"
                # what ReportFailure does on the state machine's own path (never raises)
                campaign.report_ending(engine.providers(ctx), ctx, campaign.Task(state="ReportFailure", ending=ending))
                desc = {"status": "ABORTED", "error": "Aborted", "cause": "forced stop"}
                break
            handled = intr.count
        if not progress.steps and time.monotonic() - last_look >= 1.0:
            last_look = time.monotonic()
            if state.has_plan():
                plan = state.plan()
                progress.experiments = [e.name for e in plan.experiments]
                progress.steps = {e.name: [s.step_id for s in e.steps] for e in plan.experiments}
        if worker is not None and worker.is_alive():
            worker.join(timeout=0.1)  # wakes for interrupts; costs nothing while the campaign runs
            continue
        desc = sfn.describe_execution(executionArn=execution)
        if desc["status"] != "RUNNING":
            break
        time.sleep(0.25)  # no thread to wait on: poll
    # the events as moto keeps them (the API's names and shapes; timestamps as datetimes): serializing them
    # for get_execution_history costs ~0.3 s a campaign, for what only tests read
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    history = list(stepfunctions_parser_backends[DEFAULT_ACCOUNT_ID][REGION].get_execution_history(execution)["events"])
    return desc, history

