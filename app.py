#!/usr/bin/env python3
"""CDK app: wiring only. Never calls AWS; synthesises offline and without Docker."""

import json
import os
from pathlib import Path

import aws_cdk as cdk

from stacks.control_plane import ControlPlaneStack
from stacks.results import ResultsStack


def main() -> None:
    # `cdk synth` passes cdk.json's context itself; `python app.py` (CDK_OUTDIR set) reads it here
    context = None
    if "CDK_CONTEXT_JSON" not in os.environ:
        context = json.loads((Path(__file__).parent / "cdk.json").read_text())["context"]
    app = cdk.App(context=context)
    env_name = app.node.try_get_context("benchctl:env_name") or "dev"
    results = ResultsStack(app, f"benchctl-{env_name}-results")
    ControlPlaneStack(app, f"benchctl-{env_name}-control-plane", results=results)
    app.synth()


if __name__ == "__main__":
    main()
