"""The load image's supply chain (stacks/images/load): its base must be pinned by digest unless the deployment
accepts a tag explicitly (check_base.sh, the Dockerfile's first step, run here as the build runs it), and
every Python package is one version with the hash of its wheel, installed with ``--require-hashes``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from benchctl.planning.aiperf_args import AIPERF_VERSION

LOAD = Path(__file__).resolve().parents[2] / "stacks" / "images" / "load"
DIGEST = "sha256:" + "0123456789abcdef" * 4
# what pip on the base (CPython 3.11, Debian bookworm: glibc 2.36, x86_64) accepts
_PLATFORMS = [f"manylinux_2_{v}_x86_64" for v in range(36, 4, -1)] + ["manylinux2014_x86_64", "manylinux2010_x86_64",
                                                                    "manylinux1_x86_64", "linux_x86_64"]
IMAGE_TAGS = {*cpython_tags((3, 11), platforms=_PLATFORMS), *compatible_tags((3, 11), "cp311", _PLATFORMS)}


def _check(base: str, allow: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(LOAD / "check_base.sh")], env={"BASE_IMAGE": base, "ALLOW_TAG_BASE": allow},
                          capture_output=True, text=True, check=False)


@pytest.mark.parametrize("base", ["python:3.11-slim-bookworm", "python:3.11-slim-bookworm@sha256:abc",
                                  "python@" + DIGEST.upper().replace("SHA256", "sha256"), "python@" + DIGEST + "0",
                                  "python@md5:" + "0" * 32, ""])
def test_a_base_without_a_digest_is_refused_unless_the_deployment_accepts_a_tag(base):
    refused = _check(base, "0")
    assert refused.returncode == 1
    assert "not pinned by digest" in refused.stderr and "benchctl:load_base_image" in refused.stderr
    accepted = _check(base, "1")
    assert accepted.returncode == 0 and "built anyway" in accepted.stderr


@pytest.mark.parametrize("base", ["python:3.11-slim-bookworm@" + DIGEST, "python@" + DIGEST,
                                  "public.ecr.aws/docker/library/python:3.11@" + DIGEST])
def test_a_base_pinned_by_digest_is_built(base):
    assert _check(base, "0").returncode == 0


def test_the_dockerfile_checks_its_base_and_installs_only_hash_pinned_wheels():
    text = (LOAD / "Dockerfile").read_text()
    assert text.index("FROM ${BASE_IMAGE}") < text.index("COPY check_base.sh")
    run = text[text.index("RUN "):]
    assert run.index("check_base.sh") < run.index("pip install")  # the check before anything is installed
    (pip,) = re.findall(r"pip install [^\\\n]*", run)
    assert "--require-hashes" in pip and "--only-binary=:all:" in pip and "-r /tmp/load/requirements.txt" in pip
    assert f"ARG AIPERF_VERSION={AIPERF_VERSION}" in text


def test_every_requirement_is_one_version_with_the_sha256_of_its_wheel():
    lines = [ln for ln in (LOAD / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    pins = {}
    for ln in lines:
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+) --hash=sha256:([0-9a-f]{64})  # (\S+\.whl)", ln)
        assert m, ln
        name, version, _, wheel = m.groups()
        wheel_name, wheel_version, _, tags = parse_wheel_filename(wheel)
        assert (wheel_name, str(wheel_version)) == (canonicalize_name(name), version), ln
        assert tags & IMAGE_TAGS, f"{wheel}: not installable on the image's platform"
        pins[name.lower()] = version
    assert pins["aiperf"] == AIPERF_VERSION and len(pins) == len(lines)  # one line per package
