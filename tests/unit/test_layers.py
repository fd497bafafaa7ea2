"""The managed layers we pin are ones upstream published and none known to crash (stacks/layers.py)."""

from __future__ import annotations

import re

import pytest

from stacks import layers

_ARN = re.compile(r"^arn:aws:lambda:([a-z0-9-]+):(\d{12}):layer:AWSSDKPandas-Python313:(\d+)$")


def test_the_pinned_pandas_layer_is_no_known_bad_one_in_any_region():
    assert layers.SDK_PANDAS_LAYER_ARNS
    for region, arn in layers.SDK_PANDAS_LAYER_ARNS.items():
        m = _ARN.match(arn)
        assert m and m.group(1) == region, (region, arn)
        assert layers.known_bad_sdk_pandas(arn) is None, arn


def _known_bad_arns() -> list[str]:
    out = []
    for name, entries in layers.KNOWN_BAD_SDK_PANDAS.items():
        for entry in entries.split():
            region, account, version = entry.split(":")
            partition = "aws-cn" if region.startswith("cn-") else "aws"
            out.append(f"arn:{partition}:lambda:{region}:{account}:layer:{name}:{version}")
    return out


def test_every_layer_of_the_crashing_release_is_refused_with_the_upstream_issue():
    bad = _known_bad_arns()
    # the 3.17.0 table: 6 layer names (3.12-3.14, x86_64 and arm64) in 30 Regions each
    assert len(bad) == 6 * 30
    assert "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python313:14" in bad
    for arn in bad:
        why = layers.known_bad_sdk_pandas(arn)
        assert why is not None and "aws/aws-sdk-pandas#3393" in why, arn


@pytest.mark.parametrize("arn", [
    "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python313:12",  # 3.16.1
    "arn:aws:lambda:us-east-1:111122223333:layer:AWSSDKPandas-Python313:14",  # someone's own, same name
    "arn:aws:lambda:eu-west-1:336392948345:layer:AWSSDKPandas-Python313:9",   # 3.16.0, the pin
    "not an arn",
])
def test_other_layer_versions_are_not_refused(arn):
    assert layers.known_bad_sdk_pandas(arn) is None


def test_the_test_environment_holds_the_pinned_release():
    wanted = dict(r.split("==") for r in layers.PARTS["sdk-pandas"])
    assert wanted["awswrangler"] == layers.SDK_PANDAS_VERSION
