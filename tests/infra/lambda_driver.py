"""Runs INSIDE the Lambda-like environment of tests/infra/test_lambda_environment.py, started as
``<runtime python> -I -S -B lambda_driver.py CONFIG.json``: isolated, no site-packages, so ``sys.path`` is
the interpreter's standard library plus exactly what a function has on AWS, in Lambda's order: the code
asset (``/var/task``), the layers (``/opt/python``), the runtime's own packages. Nothing of the test's
environment (moto, the dev tools, the work tree) is importable here.

It calls the real handlers the way the state machine does, one campaign's path: Plan (from a spec URI; then
again from another execution with the same campaign id, which is refused),
Deploy, LaunchLoad (its dataset written create-only), CheckLoad, IngestPreviousStep or IngestLastStep (parquet + Glue partitions),
Report (the views created in Athena, the HTML report written), then every function's ``benchctl doctor``
self-test, and writes what happened, with the origin
and version of each library that was imported, to the result file the config names. With ``credentials``
in the config each handler runs as its own function's role (and the runner Job's part as the load Job role):
the credentials are set in the environment, where a function finds its role's, and the engine built anew.
Standard library only, besides what it imports from the function's own code.
"""

import importlib
import importlib.util
import json
import os
import sys
import traceback


def _origin(name):
    mod = sys.modules.get(name)
    if mod is None:
        return None
    return {"file": getattr(mod, "__file__", None), "version": getattr(mod, "__version__", None)}


def main(config_path):
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    sys.path[:0] = cfg["paths"]
    out = {"sys_path": list(sys.path), "calls": [], "error": None}
    try:
        def as_role(who):
            """The environment of ``who`` (a handler, or "runner"): its role's session, a new engine."""
            if who not in cfg.get("credentials", {}):
                return
            os.environ.update(cfg["credentials"][who])
            import boto3

            from benchctl.aws import providers

            boto3.DEFAULT_SESSION = None
            providers._ENGINES.clear()

        def call(handler, event):
            as_role(handler)
            module, fn = handler.rsplit(".", 1)
            result = getattr(importlib.import_module(module), fn)(event, None)
            out["calls"].append({"handler": handler, "state": event.get("state"), "result": result})
            return result

        call.as_role = as_role  # for what the driver calls directly, as a function's role

        start = {"spec_uri": cfg["spec_uri"], "campaign_id": cfg["campaign_id"], "poll_seconds": 30,
                 **({"fail_at": cfg["fail_at"]} if cfg.get("fail_at") else {})}
        plan = call("lambdas.plan.handler", {
            "action": "plan", "state": "Plan", "execution": cfg["execution"], "input": start})
        ctx = plan["ctx"]
        # another execution with the same campaign id: refused by the claim, as the Plan role, touching nothing
        try:
            call("lambdas.plan.handler", {
                "action": "plan", "state": "Plan", "execution": cfg["execution"] + "-again",
                "input": {"spec_uri": cfg["spec_uri"], "campaign_id": cfg["campaign_id"], "poll_seconds": 30}})
            out["reused_id"] = "accepted"
        except Exception as err:  # what the test reads
            out["reused_id"] = f"{type(err).__name__}: {err}"
        exp = plan["experiments"][0]["name"]
        step = next(s for s in plan["experiments"][0]["steps"] if s == cfg["step"])
        if cfg.get("fail_at") or cfg.get("stop"):  # scaled, deployed, the step launched, then it fails or stops
            call("lambdas.pools.handler", {"action": "scale", "state": "ScalePools", "ctx": ctx, "experiment": exp})
        call("lambdas.serving.handler", {"action": "deploy", "state": "Deploy", "ctx": ctx, "experiment": exp})
        # the seed plan prefetches the model: CheckReady applies the deployment once the prefetch Job is done
        call("lambdas.serving.handler", {"action": "check", "state": "CheckReady", "ctx": ctx, "experiment": exp})
        call("lambdas.load.handler", {"action": "launch", "state": "LaunchLoad", "ctx": ctx, "experiment": exp,
                                      "step": step})
        if cfg.get("stop"):  # stopped from outside while AwaitLoadEnd waits: its runner never wrote an end
            _stopped_path(call, out, cfg, start)
            return _finish(out, cfg)
        # the workload's runner Job (not running here) took the step's request and wrote its end record
        import boto3

        as_role("runner")

        import hashlib
        import hmac

        bucket = ctx["run_uri"].removeprefix("s3://").partition("/")[0]
        key = f"runner/{ctx['campaign_id']}/{exp}/{step}/"  # the campaign's hand-over (benchctl.constants)
        s3 = boto3.client("s3")
        out["runner_request"] = json.loads(s3.get_object(Bucket=bucket, Key=key + "request.json")["Body"].read())
        body = json.dumps({"exit_code": 0, "ended_at": 0, "step": step}).encode()  # signed as the control script signs
        end_key = json.loads(s3.get_object(Bucket=bucket, Key=key + "key.json")["Body"].read())["end_key"]
        sig = hmac.new(bytes.fromhex(end_key), body, hashlib.sha256).hexdigest()
        s3.put_object(Bucket=bucket, Key=key + "end.json", Body=body[:-1] + f', "hmac": "{sig}"}}'.encode())
        if cfg.get("fail_at") == "CheckLoad":
            _failed_path(call, out, cfg, start, ctx, exp, step)
            return _finish(out, cfg)
        call("lambdas.load.handler", {"action": "check", "state": "CheckLoad", "ctx": ctx, "experiment": exp,
                                      "step": step})
        steps = plan["experiments"][0]["steps"]
        if step == steps[-1]:
            call("lambdas.ingest.handler", {"action": "ingest_last", "state": "IngestLastStep", "ctx": ctx,
                                            "experiment": exp})
        else:  # as the step after it loads
            call("lambdas.ingest.handler", {"action": "ingest_previous", "state": "IngestPreviousStep", "ctx": ctx,
                                            "experiment": exp, "step": steps[steps.index(step) + 1]})
        # the raw input is create-only: other bytes under the same name are refused by S3 (If-None-Match)
        from benchctl.aws.s3 import S3Lake

        as_role("lambdas.load.handler")
        lake = S3Lake(cfg["bucket"], "lake")
        try:
            lake.write_raw(ctx["campaign_id"], exp, step, cfg["dataset_name"], b"other bytes\n")
            out["second_write"] = "accepted"
        except FileExistsError as err:
            out["second_write"] = f"refused: {err}"
        call("lambdas.report.handler", {"action": "report", "state": "Report", "ctx": ctx})
        # what `benchctl doctor` asks of every deployed function: its self-test on these layers, as its role
        from lambdas import FUNCTIONS

        for var, handler in FUNCTIONS.items():  # with the campaign's spec, as `benchctl doctor --spec` sends it
            call(handler, {"action": "self_test", "function": var.removesuffix("FunctionArn"), "spec": cfg["spec_data"]})
        call("lambdas.sweep.handler", {"action": "self_test", "function": "Sweep",  # the scheduled sweeper
                                       "spec": cfg["spec_data"]})
    except BaseException as err:  # report it to the test, with where it happened
        out["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    return _finish(out, cfg)


def _failed_path(call, out, cfg, start, ctx, exp, step):
    """What the state machine does when CheckLoad fails: the Catch payload to TeardownAfterFailure (until
    done), the campaign's abort (AbortCampaign, until done), then ReportFailure with the execution's state."""
    try:
        call("lambdas.load.handler", {"action": "check", "state": "CheckLoad", "ctx": ctx, "experiment": exp,
                                      "step": step})
        raise AssertionError("CheckLoad did not fail")
    except Exception as err:  # the Lambda error Step Functions turns into the Catch payload
        if type(err).__name__ != "InjectedFailure":
            raise
        error = {"Error": type(err).__name__, "Cause": json.dumps({"errorMessage": str(err)})}
    for _ in range(20):
        if call("lambdas.teardown.handler", {"action": "experiment_failed", "state": "TeardownAfterFailure",
                                             "ctx": ctx, "experiment": exp, "error": error})["done"]:
            break
    for _ in range(20):
        abort = call("lambdas.teardown.handler", {"action": "campaign", "state": "AbortCampaign", "ctx": ctx,
                                                  "error": error})
        if abort["done"]:
            break
    execution_state = {**start, "plan": {"ctx": ctx}, "error": error, "abort": abort, "ending": "failed"}
    call("lambdas.report.handler", {"action": "report_failure", "state": "ReportFailure", "input": execution_state,
                                    "ending": "failed", "execution": cfg["execution"]})


def _stopped_path(call, out, cfg, start):
    """What the stopped-campaign state machine does with the execution's status-change event (EventBridge's,
    as documented): ResolveStopped, AbortCampaign (until done), ReportFailure (ending "stopped"); then the same
    event again (a duplicate delivery), and the hourly sweeper."""
    name = cfg["execution"].rsplit(":", 1)[-1]
    event = {"version": "0", "id": "e1", "detail-type": "Step Functions Execution Status Change",
             "source": "aws.states", "account": cfg["execution"].split(":")[4], "time": "2026-12-05T16:00:00Z",
             "region": cfg["execution"].split(":")[3], "resources": [cfg["execution"]],
             "detail": {"executionArn": cfg["execution"], "name": name, "status": cfg["stop"],
                        "stateMachineArn": cfg["execution"].replace(":execution:", ":stateMachine:").rsplit(":", 1)[0],
                        "startDate": 1764950000000, "stopDate": 1764950400000, "input": json.dumps(start),
                        "inputDetails": {"included": True}}}
    for delivery in ("first", "duplicate"):
        resolved = call("lambdas.teardown.handler", {"action": "stopped", "state": "ResolveStopped", "event": event})
        out.setdefault("resolved", {})[delivery] = resolved
        if not resolved["todo"]:
            continue
        for _ in range(20):
            abort = call("lambdas.teardown.handler", {"action": "campaign", "state": "AbortCampaign",
                                                      "ctx": resolved["ctx"], "error": resolved["error"]})
            if abort["done"]:
                break
        call("lambdas.report.handler", {"action": "report_failure", "state": "ReportFailure", "ctx": resolved["ctx"],
                                        "ending": "stopped"})
    # the hourly sweeper afterwards, as its role (a dry run: the other cases' campaigns are the tests')
    from benchctl.aws.sweep import aws_sweep

    call.as_role("lambdas.sweep.handler")
    out["sweep"] = [line for line in aws_sweep(dry_run=True) if line["campaign_id"] == cfg["campaign_id"]]


def _finish(out, cfg):
    out["modules"] = {n: _origin(n) for n in ("boto3", "botocore", "s3transfer", "urllib3", "yaml", "pandas",
                                              "numpy", "pyarrow", "awswrangler", "aws_lambda_powertools",
                                              "pydantic", "sqlglot", "duckdb")}
    out["sqlglot_importable"] = importlib.util.find_spec("sqlglot") is not None
    out["python"] = list(sys.version_info[:3])
    with open(cfg["result"], "w", encoding="utf-8") as f:
        json.dump(out, f, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
