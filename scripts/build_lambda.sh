#!/usr/bin/env bash
# Builds, without Docker, what the Lambda functions get on AWS besides their code (stacks/layers.py):
#   build/lambda-layer/python  our own dependency layer (requirements-layer.txt) for the runtime's Python,
#                              which `make synth` packages as a layer asset
#   build/lambda-env/          the environment tests/infra/test_lambda_environment.py runs the functions in:
#                              runtime/      stands for the runtime's bundled SDK (stacks/layers.PARTS)
#                              opt/python/   the managed layers' library versions, then our layer, merged
#                                            in Lambda's order (a later layer overwrites an earlier one)
#                              python        the runtime's interpreter (python3.13), when this machine has it
# Wheels for manylinux x86_64 and the runtime's CPython come from PyPI through pip's --platform. Called by
# scripts/setup.sh; idempotent: a part is rebuilt only when its inputs changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
py="$venv/bin/python"
log="$venv/setup.log"
pyver=$("$py" -m stacks.layers python-version)

wheels() {  # wheels DIR REQUIREMENT... : install manylinux x86_64 wheels for the runtime's Python into DIR
  local dir=$1; shift
  "$py" -m pip --disable-pip-version-check -q install --target "$dir" --upgrade \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --implementation cp \
    --python-version "$pyver" --only-binary=:all: "$@" >>"$log" 2>&1 ||
    { echo "[setup] pip install --target $dir $* failed; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; }
}
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

layer="$root/build/lambda-layer"
want=$(stamp_of requirements-layer.txt stacks/layers.py scripts/build_lambda.sh)
if [ "$(cat "$layer/.stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "[setup] building the Lambda dependency layer in $layer (Python $pyver, x86_64)"
  rm -rf "$layer"
  wheels "$layer/python" -r requirements-layer.txt
  find "$layer/python" -name '__pycache__' -type d -prune -exec rm -rf {} +
  echo "$want" > "$layer/.stamp"
fi

env_dir="$root/build/lambda-env"
want_env=$(stamp_of "$layer/.stamp" stacks/layers.py scripts/build_lambda.sh)
if [ "$(cat "$env_dir/.stamp" 2>/dev/null || true)" != "$want_env" ]; then
  echo "[setup] building the Lambda test environment in $env_dir (runtime stand-in + managed layers' versions)"
  rm -rf "$env_dir"
  mkdir -p "$env_dir/opt/python"
  mapfile -t runtime < <("$py" -m stacks.layers requirements runtime)
  wheels "$env_dir/runtime" "${runtime[@]}"
  for part in powertools sdk-pandas; do
    mapfile -t reqs < <("$py" -m stacks.layers requirements "$part")
    wheels "$env_dir/layers/$part" "${reqs[@]}"
    for pkg in $("$py" -m stacks.layers stripped "$part"); do  # what the managed layer's own build removes
      rm -rf "$env_dir/layers/$part/$pkg" "$env_dir/layers/$part/$pkg"-*.dist-info
    done
  done
  # each managed layer's stand-in size (bytes, without bytecode), for the test of Lambda's size limit
  "$py" - "$env_dir" <<'PY'
import json, pathlib, sys
env = pathlib.Path(sys.argv[1])
sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
         for p in (env / "layers").iterdir()}
(env / "sizes.json").write_text(json.dumps(sizes, indent=1, sort_keys=True))
PY
  # /opt/python as Lambda lays it out: the layers in the functions' order, a later one overwriting
  for src in "$env_dir/layers/powertools" "$env_dir/layers/sdk-pandas" "$layer/python"; do
    cp -a "$src/." "$env_dir/opt/python/"
  done
  rm -rf "$env_dir/layers"
  echo "$want_env" > "$env_dir/.stamp"
fi
# the runtime's interpreter: BENCHCTL_LAMBDA_PYTHON, python3.13 on PATH, or a pyenv-installed 3.13
interp=${BENCHCTL_LAMBDA_PYTHON:-}
if [ -z "$interp" ]; then
  interp=$(command -v "python$pyver" 2>/dev/null || true)
  if [ -z "$interp" ] || ! "$interp" -c 'import sys' >/dev/null 2>&1; then
    interp=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$pyver".*/bin/python"$pyver" 2>/dev/null | sort -V | tail -1 || true)
  fi
fi
if [ -n "$interp" ] && "$interp" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$pyver'.split('.')))" 2>/dev/null; then
  ln -sfn "$interp" "$env_dir/python"
else
  rm -f "$env_dir/python"
  echo "[setup] WARNING: no Python $pyver interpreter (the Lambda runtime's) on this machine: set" \
       "BENCHCTL_LAMBDA_PYTHON or install one (e.g. pyenv install $pyver), then run scripts/setup.sh again;" \
       "tests/infra/test_lambda_environment.py fails until then" >&2
fi
