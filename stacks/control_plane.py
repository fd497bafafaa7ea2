"""Control-plane stack: one Lambda per handler and the campaign state machine from the ASL file.

The state machine is ``state_machines/campaign.asl.json`` itself, with each ``${...FunctionArn}``
substituted by the deployed function, exactly as the local engine substitutes its in-process ones.
"""

from pathlib import Path

from aws_cdk import Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from lambdas import FUNCTIONS
from stacks.results import ResultsStack

ROOT = Path(__file__).resolve().parents[1]
ASSET_EXCLUDES = [
    ".venv", ".git", "runs", "cdk.out", "tests", "bench", "examples", "stacks", "*.pyc", "__pycache__",
    ".*_cache", "benchctl/local",
]


class ControlPlaneStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, results: ResultsStack, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        layer_arn = self.node.try_get_context("benchctl:powertools_layer_arn")
        if not layer_arn:
            raise ValueError(
                "missing CDK context 'benchctl:powertools_layer_arn': set it in cdk.json or pass "
                "-c benchctl:powertools_layer_arn=arn:aws:lambda:REGION:017000801446:layer:AWSLambdaPowertoolsPythonV3-python311-x86_64:N"
            )
        powertools = lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", layer_arn)
        code = lambda_.Code.from_asset(str(ROOT), exclude=ASSET_EXCLUDES)
        self.functions: dict[str, lambda_.Function] = {}
        for var, handler in FUNCTIONS.items():
            name = var.removesuffix("FunctionArn")
            fn = lambda_.Function(
                self,
                f"{name}Function",
                runtime=lambda_.Runtime.PYTHON_3_11,
                handler=handler,
                code=code,
                layers=[powertools],
                timeout=Duration.minutes(5),
                memory_size=512,
                tracing=lambda_.Tracing.ACTIVE,
                environment={
                    "BENCHCTL_ENGINE": "aws",
                    "BENCHCTL_BUCKET": results.bucket.bucket_name,
                    "POWERTOOLS_SERVICE_NAME": "benchctl",
                },
            )
            results.bucket.grant_read_write(fn)
            self.functions[var] = fn
        self.state_machine = sfn.StateMachine(
            self,
            "Campaign",
            definition_body=sfn.DefinitionBody.from_string(
                (ROOT / "state_machines" / "campaign.asl.json").read_text(encoding="utf-8")
            ),
            definition_substitutions={var: fn.function_arn for var, fn in self.functions.items()},
            tracing_enabled=True,
        )
        for fn in self.functions.values():
            fn.grant_invoke(self.state_machine)
