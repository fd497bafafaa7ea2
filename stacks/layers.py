"""What a benchctl function gets on AWS Lambda besides its code: the runtime, the two managed layers
(pinned versions, resolved per Region) and our own dependency layer. One place for these facts: the
control-plane stack builds the layer ARNs from them, ``scripts/setup.sh`` builds the test environment
that holds exactly these library versions (``python -m stacks.layers requirements <part>``), and
``tests/infra/test_lambda_environment.py`` runs each function's code path in it.

Sources (read 2026; re-check when moving a version):

* Runtime: ``python3.13`` on Amazon Linux 2023, deprecation 2029-06-30 (AWS Lambda Developer Guide,
  "Building Lambda functions with Python"; ``python3.11`` runs on Amazon Linux 2, support ends
  2026-06-30). Module search order on 3.11 and later: ``/var/task`` (our code), the layers
  (``/opt/python``; a later layer overwrites an earlier one's files), then the runtime's own
  site-packages with its bundled boto3. AWS publishes no fixed version of that bundled SDK ("depends on
  the runtime version and your AWS Region", same guide, "Runtime-included SDK versions"), so we ship the
  boto3/botocore we need (``put_object(IfNoneMatch="*")`` needs botocore >= 1.35) in our own layer.
* Powertools for AWS Lambda (Python) v3: layer ``AWSLambdaPowertoolsPythonV3-python313-x86_64``
  version 27 is Powertools 3.23.0 (aws-powertools/powertools-lambda-python issue #7689, the layer of
  2025-11-13), published by account 017000801446 under the same name and version in every commercial
  Region (their docs' ``arn:aws:lambda:{region}:017000801446:layer:...`` form). Built with the ``[all]``
  extras, without boto3 (their layer_v3 stack: ``LambdaPowertoolsLayerPythonV3(include_extras=True)``).
* AWS SDK for pandas 3.17.0: per-Region ARNs from aws/aws-sdk-pandas ``docs/source/layers.rst``
  (commit f1e4b018, "Version 3.17.0"): accounts and layer versions differ by Region, hence the table.
  Its layer (``building/lambda/build-lambda-layer.sh`` at the 3.17.0 release, 75b639a3) is pyarrow
  24.0.0 built from source, pandas and numpy resolved at build time (the release's ``uv.lock``: pandas
  3.0.1, numpy 2.4.2), with boto3, botocore, s3transfer and urllib3 removed.
"""

from __future__ import annotations

import sys

RUNTIME = "python3.13"
PYTHON_VERSION = "3.13"
ARCHITECTURE = "x86_64"

POWERTOOLS_VERSION = "3.23.0"
POWERTOOLS_ACCOUNT = "017000801446"
POWERTOOLS_LAYER = "AWSLambdaPowertoolsPythonV3-python313-x86_64"
POWERTOOLS_LAYER_VERSION = 27

SDK_PANDAS_VERSION = "3.17.0"
# Region -> layer ARN of AWSSDKPandas-Python313 (x86_64) for awswrangler 3.17.0 (commercial Regions).
SDK_PANDAS_LAYER_ARNS: dict[str, str] = {
    "af-south-1": "arn:aws:lambda:af-south-1:336392948345:layer:AWSSDKPandas-Python313:13",
    "ap-northeast-1": "arn:aws:lambda:ap-northeast-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "ap-northeast-2": "arn:aws:lambda:ap-northeast-2:336392948345:layer:AWSSDKPandas-Python313:14",
    "ap-northeast-3": "arn:aws:lambda:ap-northeast-3:336392948345:layer:AWSSDKPandas-Python313:14",
    "ap-south-1": "arn:aws:lambda:ap-south-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "ap-southeast-1": "arn:aws:lambda:ap-southeast-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "ap-southeast-2": "arn:aws:lambda:ap-southeast-2:336392948345:layer:AWSSDKPandas-Python313:14",
    "ca-central-1": "arn:aws:lambda:ca-central-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "eu-central-1": "arn:aws:lambda:eu-central-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "eu-north-1": "arn:aws:lambda:eu-north-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "eu-west-1": "arn:aws:lambda:eu-west-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "eu-west-2": "arn:aws:lambda:eu-west-2:336392948345:layer:AWSSDKPandas-Python313:14",
    "eu-west-3": "arn:aws:lambda:eu-west-3:336392948345:layer:AWSSDKPandas-Python313:14",
    "sa-east-1": "arn:aws:lambda:sa-east-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "us-east-1": "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "us-east-2": "arn:aws:lambda:us-east-2:336392948345:layer:AWSSDKPandas-Python313:14",
    "us-west-1": "arn:aws:lambda:us-west-1:336392948345:layer:AWSSDKPandas-Python313:14",
    "us-west-2": "arn:aws:lambda:us-west-2:336392948345:layer:AWSSDKPandas-Python313:14",
    "ap-east-1": "arn:aws:lambda:ap-east-1:839552336658:layer:AWSSDKPandas-Python313:11",
    "ap-south-2": "arn:aws:lambda:ap-south-2:246107603503:layer:AWSSDKPandas-Python313:11",
    "ap-southeast-3": "arn:aws:lambda:ap-southeast-3:258944054355:layer:AWSSDKPandas-Python313:11",
    "ap-southeast-4": "arn:aws:lambda:ap-southeast-4:945386623051:layer:AWSSDKPandas-Python313:11",
    "ca-west-1": "arn:aws:lambda:ca-west-1:941713567376:layer:AWSSDKPandas-Python313:3",
    "eu-central-2": "arn:aws:lambda:eu-central-2:956415814219:layer:AWSSDKPandas-Python313:11",
    "eu-south-1": "arn:aws:lambda:eu-south-1:774444163449:layer:AWSSDKPandas-Python313:11",
    "eu-south-2": "arn:aws:lambda:eu-south-2:982086096842:layer:AWSSDKPandas-Python313:11",
    "il-central-1": "arn:aws:lambda:il-central-1:263840725265:layer:AWSSDKPandas-Python313:11",
    "me-central-1": "arn:aws:lambda:me-central-1:593833071574:layer:AWSSDKPandas-Python313:11",
}

# The library versions each part holds, for the environment test (pip requirement lines).
PARTS: dict[str, list[str]] = {
    # stands for the runtime's bundled SDK, which AWS does not pin: the last botocore before 1.35 (no
    # IfNoneMatch), so the test proves that our layer's SDK is the one in effect
    "runtime": ["boto3==1.34.162", "botocore==1.34.162"],
    "powertools": [f"aws-lambda-powertools[all]=={POWERTOOLS_VERSION}"],
    "sdk-pandas": [f"awswrangler=={SDK_PANDAS_VERSION}", "pyarrow==24.0.0", "pandas==3.0.1", "numpy==2.4.2"],
}
# removed from a managed layer after installing it, as its own build does
STRIPPED: dict[str, list[str]] = {
    "runtime": [],
    "powertools": ["boto3", "botocore", "s3transfer"],
    "sdk-pandas": ["boto3", "botocore", "s3transfer", "urllib3"],
}


def powertools_layer_arn(partition: str, region: str) -> str:
    return (f"arn:{partition}:lambda:{region}:{POWERTOOLS_ACCOUNT}:layer:{POWERTOOLS_LAYER}:"
            f"{POWERTOOLS_LAYER_VERSION}")


def regions() -> list[str]:
    """Regions where both managed layers are published (the SDK-for-pandas table's)."""
    return sorted(SDK_PANDAS_LAYER_ARNS)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "requirements" and argv[1] in PARTS:
        print("\n".join(PARTS[argv[1]]))
        return 0
    if len(argv) == 2 and argv[0] == "stripped" and argv[1] in STRIPPED:
        print(" ".join(STRIPPED[argv[1]]))
        return 0
    if argv == ["python-version"]:
        print(PYTHON_VERSION)
        return 0
    print(f"usage: python -m stacks.layers requirements|stripped {'|'.join(PARTS)} | python-version",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
