"""What a benchctl function gets on AWS Lambda besides its code: the runtime, the two managed layers
(pinned versions, resolved per Region) and our own dependency layer. One place for these facts: the
control-plane stack builds the layer ARNs from them (and refuses a known-bad one given in its context),
``scripts/setup.sh`` builds the test environment that holds these library versions (``python -m
stacks.layers requirements <part>``), and ``tests/infra/test_lambda_environment.py`` runs each function's
code path in it. A managed layer is a binary built by someone else: the test environment holds PyPI wheels
of the same versions, which prove the *versions* work together, never the layer's own build; only an
invocation on AWS proves that (``benchctl doctor`` runs each function's self-test on the deployed layers).

Sources (read 2026; re-check when moving a version):

* Runtime: ``python3.13`` on Amazon Linux 2023, deprecation 2029-06-30 (AWS Lambda Developer Guide,
  "Building Lambda functions with Python"; ``python3.11`` runs on Amazon Linux 2, support ends
  2026-06-30). Module search order on 3.11 and later: ``/var/task`` (our code), the layers
  (``/opt/python``; a later layer overwrites an earlier one's files), then the runtime's own
  site-packages with its bundled boto3. AWS publishes no fixed version of that bundled SDK ("depends on
  the runtime version and your AWS Region", same guide, "Runtime-included SDK versions"), so we ship the
  boto3/botocore we need (``put_object(IfNoneMatch="*")`` needs botocore >= 1.35) in our own layer.
  A function and all its layers may hold 262,144,000 bytes unzipped (Lambda quotas); the test of the
  environment adds up the parts against it (``SDK_PANDAS_UNZIPPED_BYTES`` below for the one we cannot
  build here).
* Powertools for AWS Lambda (Python) v3: layer ``AWSLambdaPowertoolsPythonV3-python313-x86_64``
  version 27 is Powertools 3.23.0 (aws-powertools/powertools-lambda-python issue #7689, the layer of
  2025-11-13), published by account 017000801446 under the same name and version in every commercial
  Region (their docs' ``arn:aws:lambda:{region}:017000801446:layer:...`` form). Built with the ``[all]``
  extras, without boto3 (their layer_v3 stack: ``LambdaPowertoolsLayerPythonV3(include_extras=True)``).
* AWS SDK for pandas **3.16.0**, per-Region ARNs of ``AWSSDKPandas-Python313`` (x86_64) from
  aws/aws-sdk-pandas ``docs/source/layers.rst`` at commit a59ef2e3 ("Update layers.rst (#3296)",
  2026-04-08, the table headed "Version 3.16.0"): accounts and layer versions differ by Region, hence the
  table (27 commercial Regions; ca-west-1 has no 3.16.0 Python 3.13 layer).
  What the layer holds: its build (``building/lambda/build-lambda-layer.sh`` at the 3.16.0 release,
  a0c48eb3) compiles pyarrow 20.0.0 from source (``ARROW_VERSION=20.0.0``) and installs awswrangler with
  ``pip3 install . --no-binary numpy,pandas``: pandas and numpy are *resolved when the layer is built*, not
  taken from the release's ``uv.lock``. The release is of 2026-04-05 and the table of 2026-04-08; the newest
  on PyPI then (PyPI's upload times) were pandas 3.0.2 (2026-03-31; 3.0.3 came 2026-05-11) and numpy 2.4.4
  (2026-03-29; 2.4.5 came 2026-05-15): the versions ``PARTS`` gives the test environment. This is an
  inference from dates, stated as one; ``benchctl doctor`` reads the real versions on AWS.
  Why not the newest: **3.17.0's layers segfault** on any pandas datetime64 construction
  (``AWSSDKPandas-Python312:29``, ``-Python313:14``, the 3.14 ones; aws/aws-sdk-pandas#3393, "Layer version
  27 (3.16.1) is fine"): their build compiled pandas against numpy 2.5.0's headers (released 2026-06-21),
  whose ABI older numpy cannot run (pandas-dev/pandas#66090), beside another numpy. Fixed by PR #3398
  (PyPI wheels on AL2023), released as 3.17.1 (#3403, 2026-07-15), whose layer ARNs upstream has not
  published in ``layers.rst`` (its last table is 3.17.0's, f1e4b018): a layer version we cannot name from a
  published source is not pinned. 3.16.0 and 3.16.1 were built before numpy 2.5.0 existed, pandas against the
  same numpy they ship with. Between them, **3.16.1's layer is 204 MB unzipped against 3.16.0's 167 MB**
  (aws/aws-sdk-pandas#3331: "du -h ... 167M ./awswrangler-layer-3.16.0-py3.13, 204M
  ./awswrangler-layer-3.16.1-py3.13"): with the Powertools layer and ours, 3.16.1 (and 3.17.x, built the
  same way) exceed the 262,144,000 bytes a function may hold ("Layers consume more than the available size",
  the deployment fails), 3.16.0 leaves room. ``KNOWN_BAD_SDK_PANDAS`` lists the 3.17.0 layers (every
  Python, both architectures, from the 3.17.0 table): synth refuses them when given as
  ``benchctl:sdk_pandas_layer_arn``.
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

SDK_PANDAS_VERSION = "3.16.0"
# Region -> layer ARN of AWSSDKPandas-Python313 (x86_64) for awswrangler 3.16.0 (commercial Regions).
SDK_PANDAS_LAYER_ARNS: dict[str, str] = {
    "af-south-1": "arn:aws:lambda:af-south-1:336392948345:layer:AWSSDKPandas-Python313:8",
    "ap-northeast-1": "arn:aws:lambda:ap-northeast-1:336392948345:layer:AWSSDKPandas-Python313:8",
    "ap-northeast-2": "arn:aws:lambda:ap-northeast-2:336392948345:layer:AWSSDKPandas-Python313:9",
    "ap-northeast-3": "arn:aws:lambda:ap-northeast-3:336392948345:layer:AWSSDKPandas-Python313:9",
    "ap-south-1": "arn:aws:lambda:ap-south-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "ap-southeast-1": "arn:aws:lambda:ap-southeast-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "ap-southeast-2": "arn:aws:lambda:ap-southeast-2:336392948345:layer:AWSSDKPandas-Python313:8",
    "ca-central-1": "arn:aws:lambda:ca-central-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "eu-central-1": "arn:aws:lambda:eu-central-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "eu-north-1": "arn:aws:lambda:eu-north-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "eu-west-1": "arn:aws:lambda:eu-west-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "eu-west-2": "arn:aws:lambda:eu-west-2:336392948345:layer:AWSSDKPandas-Python313:8",
    "eu-west-3": "arn:aws:lambda:eu-west-3:336392948345:layer:AWSSDKPandas-Python313:9",
    "sa-east-1": "arn:aws:lambda:sa-east-1:336392948345:layer:AWSSDKPandas-Python313:8",
    "us-east-1": "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "us-east-2": "arn:aws:lambda:us-east-2:336392948345:layer:AWSSDKPandas-Python313:9",
    "us-west-1": "arn:aws:lambda:us-west-1:336392948345:layer:AWSSDKPandas-Python313:9",
    "us-west-2": "arn:aws:lambda:us-west-2:336392948345:layer:AWSSDKPandas-Python313:9",
    "ap-east-1": "arn:aws:lambda:ap-east-1:839552336658:layer:AWSSDKPandas-Python313:8",
    "ap-south-2": "arn:aws:lambda:ap-south-2:246107603503:layer:AWSSDKPandas-Python313:8",
    "ap-southeast-3": "arn:aws:lambda:ap-southeast-3:258944054355:layer:AWSSDKPandas-Python313:8",
    "ap-southeast-4": "arn:aws:lambda:ap-southeast-4:945386623051:layer:AWSSDKPandas-Python313:8",
    "eu-central-2": "arn:aws:lambda:eu-central-2:956415814219:layer:AWSSDKPandas-Python313:8",
    "eu-south-1": "arn:aws:lambda:eu-south-1:774444163449:layer:AWSSDKPandas-Python313:8",
    "eu-south-2": "arn:aws:lambda:eu-south-2:982086096842:layer:AWSSDKPandas-Python313:8",
    "il-central-1": "arn:aws:lambda:il-central-1:263840725265:layer:AWSSDKPandas-Python313:8",
    "me-central-1": "arn:aws:lambda:me-central-1:593833071574:layer:AWSSDKPandas-Python313:8",
}
# The unzipped size of that layer, the figure upstream's users published (aws/aws-sdk-pandas#3331, `du -h`:
# 167M, which rounds up): the one part of a function's 262,144,000 bytes that cannot be built here.
SDK_PANDAS_UNZIPPED_BYTES = 167 * 1024**2
# Layers known to crash (see the module's docstring): name -> "region:account:version ...", from the 3.17.0
# table of aws/aws-sdk-pandas docs/source/layers.rst (f1e4b018), aws and aws-cn partitions.
KNOWN_BAD_SDK_PANDAS: dict[str, str] = {
    "AWSSDKPandas-Python312": (
        "af-south-1:336392948345:28 ap-northeast-1:336392948345:29 ap-northeast-2:336392948345:29 "
        "ap-northeast-3:336392948345:29 ap-south-1:336392948345:29 ap-southeast-1:336392948345:29 "
        "ap-southeast-2:336392948345:29 ca-central-1:336392948345:29 eu-central-1:336392948345:29 "
        "eu-north-1:336392948345:29 eu-west-1:336392948345:29 eu-west-2:336392948345:29 "
        "eu-west-3:336392948345:29 sa-east-1:336392948345:29 us-east-1:336392948345:29 "
        "us-east-2:336392948345:29 us-west-1:336392948345:29 us-west-2:336392948345:29 "
        "ap-east-1:839552336658:26 ap-south-2:246107603503:26 ap-southeast-3:258944054355:26 "
        "ap-southeast-4:945386623051:26 ca-west-1:941713567376:3 eu-central-2:956415814219:26 "
        "eu-south-1:774444163449:26 eu-south-2:982086096842:26 il-central-1:263840725265:26 "
        "me-central-1:593833071574:26 cn-north-1:406640652441:10 cn-northwest-1:406640652441:10 "
    ),
    "AWSSDKPandas-Python312-Arm64": (
        "af-south-1:336392948345:28 ap-northeast-1:336392948345:29 ap-northeast-2:336392948345:29 "
        "ap-northeast-3:336392948345:29 ap-south-1:336392948345:29 ap-southeast-1:336392948345:29 "
        "ap-southeast-2:336392948345:29 ca-central-1:336392948345:29 eu-central-1:336392948345:29 "
        "eu-north-1:336392948345:29 eu-west-1:336392948345:29 eu-west-2:336392948345:29 "
        "eu-west-3:336392948345:29 sa-east-1:336392948345:29 us-east-1:336392948345:29 "
        "us-east-2:336392948345:29 us-west-1:336392948345:29 us-west-2:336392948345:29 "
        "ap-east-1:839552336658:26 ap-south-2:246107603503:26 ap-southeast-3:258944054355:26 "
        "ap-southeast-4:945386623051:26 ca-west-1:941713567376:3 eu-central-2:956415814219:26 "
        "eu-south-1:774444163449:26 eu-south-2:982086096842:26 il-central-1:263840725265:26 "
        "me-central-1:593833071574:26 cn-north-1:406640652441:10 cn-northwest-1:406640652441:10 "
    ),
    "AWSSDKPandas-Python313": (
        "af-south-1:336392948345:13 ap-northeast-1:336392948345:14 ap-northeast-2:336392948345:14 "
        "ap-northeast-3:336392948345:14 ap-south-1:336392948345:14 ap-southeast-1:336392948345:14 "
        "ap-southeast-2:336392948345:14 ca-central-1:336392948345:14 eu-central-1:336392948345:14 "
        "eu-north-1:336392948345:14 eu-west-1:336392948345:14 eu-west-2:336392948345:14 "
        "eu-west-3:336392948345:14 sa-east-1:336392948345:14 us-east-1:336392948345:14 "
        "us-east-2:336392948345:14 us-west-1:336392948345:14 us-west-2:336392948345:14 "
        "ap-east-1:839552336658:11 ap-south-2:246107603503:11 ap-southeast-3:258944054355:11 "
        "ap-southeast-4:945386623051:11 ca-west-1:941713567376:3 eu-central-2:956415814219:11 "
        "eu-south-1:774444163449:11 eu-south-2:982086096842:11 il-central-1:263840725265:11 "
        "me-central-1:593833071574:11 cn-north-1:406640652441:10 cn-northwest-1:406640652441:10 "
    ),
    "AWSSDKPandas-Python313-Arm64": (
        "af-south-1:336392948345:13 ap-northeast-1:336392948345:14 ap-northeast-2:336392948345:14 "
        "ap-northeast-3:336392948345:14 ap-south-1:336392948345:14 ap-southeast-1:336392948345:14 "
        "ap-southeast-2:336392948345:14 ca-central-1:336392948345:14 eu-central-1:336392948345:14 "
        "eu-north-1:336392948345:14 eu-west-1:336392948345:14 eu-west-2:336392948345:14 "
        "eu-west-3:336392948345:14 sa-east-1:336392948345:14 us-east-1:336392948345:14 "
        "us-east-2:336392948345:14 us-west-1:336392948345:14 us-west-2:336392948345:14 "
        "ap-east-1:839552336658:11 ap-south-2:246107603503:11 ap-southeast-3:258944054355:11 "
        "ap-southeast-4:945386623051:11 ca-west-1:941713567376:3 eu-central-2:956415814219:11 "
        "eu-south-1:774444163449:11 eu-south-2:982086096842:11 il-central-1:263840725265:11 "
        "me-central-1:593833071574:11 cn-north-1:406640652441:10 cn-northwest-1:406640652441:10 "
    ),
    "AWSSDKPandas-Python314": (
        "af-south-1:336392948345:8 ap-northeast-1:336392948345:9 ap-northeast-2:336392948345:9 "
        "ap-northeast-3:336392948345:9 ap-south-1:336392948345:9 ap-southeast-1:336392948345:9 "
        "ap-southeast-2:336392948345:9 ca-central-1:336392948345:9 eu-central-1:336392948345:9 "
        "eu-north-1:336392948345:9 eu-west-1:336392948345:9 eu-west-2:336392948345:9 "
        "eu-west-3:336392948345:9 sa-east-1:336392948345:9 us-east-1:336392948345:9 "
        "us-east-2:336392948345:9 us-west-1:336392948345:9 us-west-2:336392948345:9 "
        "ap-east-1:839552336658:6 ap-south-2:246107603503:6 ap-southeast-3:258944054355:6 "
        "ap-southeast-4:945386623051:6 ca-west-1:941713567376:3 eu-central-2:956415814219:6 "
        "eu-south-1:774444163449:6 eu-south-2:982086096842:6 il-central-1:263840725265:6 "
        "me-central-1:593833071574:6 cn-north-1:406640652441:5 cn-northwest-1:406640652441:5 "
    ),
    "AWSSDKPandas-Python314-Arm64": (
        "af-south-1:336392948345:8 ap-northeast-1:336392948345:9 ap-northeast-2:336392948345:9 "
        "ap-northeast-3:336392948345:9 ap-south-1:336392948345:9 ap-southeast-1:336392948345:9 "
        "ap-southeast-2:336392948345:9 ca-central-1:336392948345:9 eu-central-1:336392948345:9 "
        "eu-north-1:336392948345:9 eu-west-1:336392948345:9 eu-west-2:336392948345:9 "
        "eu-west-3:336392948345:9 sa-east-1:336392948345:9 us-east-1:336392948345:9 "
        "us-east-2:336392948345:9 us-west-1:336392948345:9 us-west-2:336392948345:9 "
        "ap-east-1:839552336658:6 ap-south-2:246107603503:6 ap-southeast-3:258944054355:6 "
        "ap-southeast-4:945386623051:6 ca-west-1:941713567376:3 eu-central-2:956415814219:6 "
        "eu-south-1:774444163449:6 eu-south-2:982086096842:6 il-central-1:263840725265:6 "
        "me-central-1:593833071574:6 cn-north-1:406640652441:5 cn-northwest-1:406640652441:5 "
    ),
}

# The library versions each part holds, for the environment test (pip requirement lines).
PARTS: dict[str, list[str]] = {
    # stands for the runtime's bundled SDK, which AWS does not pin: the last botocore before 1.35 (no
    # IfNoneMatch), so the test proves that our layer's SDK is the one in effect
    "runtime": ["boto3==1.34.162", "botocore==1.34.162"],
    "powertools": [f"aws-lambda-powertools[all]=={POWERTOOLS_VERSION}"],
    "sdk-pandas": [f"awswrangler=={SDK_PANDAS_VERSION}", "pyarrow==20.0.0", "pandas==3.0.2", "numpy==2.4.4"],
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


def known_bad_sdk_pandas(arn: str) -> str | None:
    """Why a layer version ARN must not be used (it is one of ``KNOWN_BAD_SDK_PANDAS``), or None."""
    parts = arn.split(":")
    if len(parts) != 8 or parts[5] != "layer":
        return None
    region, account, name, version = parts[3], parts[4], parts[6], parts[7]
    if f"{region}:{account}:{version}" in KNOWN_BAD_SDK_PANDAS.get(name, "").split():
        return (f"{name}:{version} in {region} is AWS SDK for pandas 3.17.0, whose layers segfault on any pandas "
                "datetime64 construction (every lake write): aws/aws-sdk-pandas#3393, fixed in 3.17.1 (#3403)")
    return None


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
