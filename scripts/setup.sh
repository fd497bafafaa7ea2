#!/usr/bin/env bash
# Idempotent set-up for a fresh machine of this kind: creates .venv/, installs the control plane,
# the dev/test tools and the local engine (real Dynamo + AIPerf), then generates the offline
# tokenizer/model directory the mocker and AIPerf need. Re-runs are a no-op unless a dependency
# file changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${BENCHCTL_PYTHON:-$(command -v python3.11 || command -v python3)}
venv="$root/.venv"
stamp="$venv/.benchctl-setup"
want=$(cat requirements.txt requirements-dev.txt requirements-local.txt pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)

if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv"
  "$py" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "[setup] installing dependencies into $venv (first time: several minutes)"
  log="$venv/setup.log"
  pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@" >>"$log" 2>&1 ||
    { echo "[setup] pip $* failed; last lines of $log:" >&2; grep -v '^WARNING: Location' "$log" | tail -20 >&2; exit 1; }; }
  : >"$log"
  pip install --upgrade pip wheel
  pip install -r requirements-dev.txt -r requirements-local.txt
  # ai-dynamo pins aisimulate, a PyPI placeholder that cannot be installed here (docs/FACTS.md)
  pip install --no-deps ai-dynamo-runtime==1.6.1 ai-dynamo==1.6.1
  pip install --no-deps -e .
  rm -f "$venv/.benchctl-model-ok"
  echo "$want" > "$stamp"
fi
# What the Lambda functions get on AWS besides their code (our layer) and the environment the tests run
# them in: scripts/build_lambda.sh (pip --platform wheels, no Docker; rebuilt only when its inputs change)
bash "$root/scripts/build_lambda.sh"
# The oldest aws-cdk-lib requirements-dev.txt admits, beside the venv's (tests/infra/test_cdk_lower_bound.py
# synthesizes the app with it): installed once into build/, so no test downloads anything
cdk_low=$(sed -n 's/^aws-cdk-lib>=\([0-9.]*\),<3.*/\1/p' requirements-dev.txt)
case "$cdk_low" in *.*.*) ;; *) cdk_low="$cdk_low.0" ;; esac
if [ ! -d "$root/build/aws-cdk-lib-$cdk_low/aws_cdk/aws_eks_v2" ]; then
  echo "[setup] installing aws-cdk-lib $cdk_low (the lower bound) into build/aws-cdk-lib-$cdk_low"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps \
    --target "$root/build/aws-cdk-lib-$cdk_low" "aws-cdk-lib==$cdk_low" 2>&1 | grep -v '^WARNING: Location' || true
  [ -d "$root/build/aws-cdk-lib-$cdk_low/aws_cdk/aws_eks_v2" ] ||
    { echo "[setup] aws-cdk-lib $cdk_low could not be installed into build/" >&2; exit 1; }
fi
# Node.js tools, project-local (scripts/node/node_modules, from its package-lock.json): AWS's States
# Language checker @wmfs/statelint (tests/infra) and the CDK CLI (`cdk synth/deploy -c benchctl:...`)
node_dir="$root/scripts/node"
node_want=$(cat "$node_dir/package.json" "$node_dir/package-lock.json" | sha256sum | cut -c1-16)
if [ "$(cat "$node_dir/node_modules/.benchctl-stamp" 2>/dev/null || true)" != "$node_want" ]; then
  command -v npm >/dev/null 2>&1 ||
    { echo "[setup] npm is missing: install Node.js (the CDK needs it too), then run scripts/setup.sh again" >&2; exit 1; }
  echo "[setup] installing the Node.js tools (statelint, CDK CLI) into $node_dir/node_modules"
  log="$venv/setup.log"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) >>"$log" 2>&1 ||
    { echo "[setup] npm ci in $node_dir failed; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; }
  echo "$node_want" > "$node_dir/node_modules/.benchctl-stamp"
fi
# A C compiler for the local engine's loopback shim (benchctl/local/loopback.py: Dynamo's event-plane ZMQ
# sockets and the mocker's bootstrap server bind 0.0.0.0 with no flag to change it); installed from Debian
# when missing and we are root, then the shim is built once so that a missing compiler fails here, not in a run
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's gcc (the local engine's loopback shim)"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev; } \
      >>"$venv/setup.log" 2>&1 || { echo "[setup] apt-get install gcc failed; last lines of $venv/setup.log:" >&2;
                                    tail -5 "$venv/setup.log" >&2; exit 1; }
  else
    echo "[setup] no C compiler (cc): install one (apt-get install gcc), then run scripts/setup.sh again" >&2
    exit 1
  fi
fi
"$venv/bin/python" -m benchctl.local.loopback >/dev/null ||
  { echo "[setup] building the loopback shim failed (see above)" >&2; exit 1; }
if [ ! -f "$venv/.benchctl-model-ok" ]; then
  echo "[setup] generating the offline tokenizer/model directory"
  "$venv/bin/python" -m benchctl.local.modeldir --install
  touch "$venv/.benchctl-model-ok"
fi
# --- prometheus (the dashboard tier) ---
# Debian's Prometheus (2.42 on Debian 12, with promtool) evaluates every dashboard query against a local campaign
# in tests/e2e/test_dashboards_live.py; installed when missing and we are root, like the C compiler. The package
# would start a system service on :9090 under systemd: it is stopped and disabled at once (the tier starts its
# own on loopback).
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's prometheus (the dashboard tier's query engine)"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } \
      >>"$venv/setup.log" 2>&1 || { echo "[setup] apt-get install prometheus failed; last lines of $venv/setup.log:" >&2;
                                    tail -5 "$venv/setup.log" >&2; exit 1; }
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      systemctl disable --now prometheus >>"$venv/setup.log" 2>&1 || true
    fi
  else
    echo "[setup] note: prometheus is missing and we are not root: tests/e2e/test_dashboards_live.py fails" \
         "until it is installed (apt-get install -y --no-install-recommends prometheus)" >&2
  fi
fi
# --- end prometheus ---
# --- chromium (report screenshot test) ---
# Headless Chromium renders the HTML report in tests/e2e/test_report.py (screenshot + DOM). Installed
# from Debian only when missing and we are root; a failure here never fails the set-up: that test then
# fails naming the problem.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's chromium (headless browser for the report test)"
    mkdir -p "$venv"
    chromium_log="$venv/setup.log"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
         >>"$chromium_log" 2>&1; then
      echo "[setup] WARNING: installing chromium failed (last lines of $chromium_log below); the set-up" \
           "goes on, tests/e2e/test_report.py will fail until" \
           "'apt-get install -y --no-install-recommends chromium' succeeds" >&2
      tail -5 "$chromium_log" >&2 || true
    fi
  else
    echo "[setup] note: chromium is missing and we are not root: tests/e2e/test_report.py is skipped" \
         "until it is installed (apt-get install -y --no-install-recommends chromium)" >&2
  fi
fi
# --- end chromium ---
