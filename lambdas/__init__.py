"""Lambda handlers: parse the event, call one function of ``benchctl.campaign``, return a small dict.

``FUNCTIONS`` maps each ASL substitution variable to its handler: the CDK stack deploys one Lambda
per entry and the local engine dispatches the same names in-process.
"""

FUNCTIONS = {
    "PlanFunctionArn": "lambdas.plan.handler",
    "PoolsFunctionArn": "lambdas.pools.handler",
    "ServingFunctionArn": "lambdas.serving.handler",
    "LoadFunctionArn": "lambdas.load.handler",
    "IngestFunctionArn": "lambdas.ingest.handler",
    "TeardownFunctionArn": "lambdas.teardown.handler",
    "ReportFunctionArn": "lambdas.report.handler",
}
