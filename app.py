#!/usr/bin/env python3
"""CDK app: wiring only. Never calls AWS; synthesises offline and without Docker.

Configuration is CDK context (``cdk.json``, or ``-c benchctl:<key>=<value>`` on the CDK CLI), checked by
``stacks.config`` first: a missing, unknown or out-of-range key stops synth with a message naming it and
what is valid. cdk-nag's
AwsSolutions checks run on every stack; their findings are synth errors unless suppressed with a
written reason next to the resource.

With ``benchctl:platform`` ``new`` or ``existing`` a third stack, the platform (``stacks/platform.py``), is made
first: the control plane's cluster, node groups and namespace are then its outputs (not read again from the
context) and the control plane is deployed after it.
"""

import json
import os
import sys
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.config import ConfigError, load
from stacks.control_plane import ControlPlaneStack
from stacks.results import ResultsStack


def main() -> int:
    # The CDK CLI (`npx aws-cdk@2 synth|deploy [-c benchctl:key=value]`, which runs cdk.json's "app": this
    # project's own .venv interpreter) hands over cdk.json's context merged with -c, in CDK_CONTEXT_JSON or,
    # when large, a file named by CONTEXT_OVERFLOW_LOCATION_ENV; `make synth` runs `python app.py` without
    # the CLI, so cdk.json's context is read here.
    context = None
    if not {"CDK_CONTEXT_JSON", "CONTEXT_OVERFLOW_LOCATION_ENV"} & set(os.environ):
        context = json.loads((Path(__file__).parent / "cdk.json").read_text())["context"]
    app = cdk.App(context=context)
    try:
        config = load(app.node)
        platform = None
        if config.platform != "none":  # imported only then: the platform's kubectl layer package
            from stacks.platform import PlatformStack, control_plane_config

            platform = PlatformStack(app, f"benchctl-{config.env_name}-platform", config=config)
            config = control_plane_config(config, platform.outputs)
        results = ResultsStack(app, f"benchctl-{config.env_name}-results", config=config)
        control = ControlPlaneStack(app, f"benchctl-{config.env_name}-control-plane", config=config, results=results)
        if platform is not None:  # deployed after the cluster, its node groups and namespace exist
            control.add_dependency(platform)
    except ConfigError as err:
        print(f"benchctl: cannot synthesize: {err}", file=sys.stderr)
        return 2
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
