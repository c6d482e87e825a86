# Sourced by every script in scripts/: finds the repo, makes sure the virtual environment
# exists with the project installed at the versions in constraints.txt (re-installs only when
# pyproject.toml, constraints.txt or the flavour changes).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${FLEET_VENV:-$ROOT/.venv}
PY=$VENV/bin/python
export PYTHONUNBUFFERED=1
# ONNX Runtime's and faiss's flavour: pyproject.toml's extra `cpu` (the default) or `gpu`
# (onnxruntime-gpu, faiss-gpu: what a CUDA worker needs). Chosen, never guessed from the machine:
# the model build calibrates on ONNX Runtime, and only the same pinned CPU wheel on every machine
# builds the same models (the GPU wheel is another release).
FLAVOUR=${FLEET_FLAVOUR:-cpu}
CPU_DISTS=(onnxruntime faiss-cpu)
GPU_DISTS=(onnxruntime-gpu faiss-gpu)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_python() {
    case "$FLAVOUR" in
        cpu | gpu) ;;
        *) log "FLEET_FLAVOUR=$FLAVOUR: expected cpu or gpu"; return 2 ;;
    esac
    if [ ! -x "$PY" ]; then
        log "creating virtual environment in $VENV"
        python3 -m venv "$VENV"
    fi
    local stamp
    stamp="$VENV/.installed-$FLAVOUR-$(cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" | sha256sum | cut -c1-16)"
    if [ ! -f "$stamp" ]; then
        log "installing the project and its dependencies, $FLAVOUR flavour (first run downloads torch: a few minutes)"
        "$PY" -m pip install -q --upgrade pip
        # The flavours provide the same imports and overwrite each other's files, and pip would
        # install one on top of the other: where the other one is, both go before one comes back.
        local other=("${GPU_DISTS[@]}")
        [ "$FLAVOUR" = cpu ] || other=("${CPU_DISTS[@]}")
        if "$PY" -m pip show -q "${other[@]}" >/dev/null 2>&1; then
            log "removing the other flavour (${other[*]})"
            "$PY" -m pip uninstall -y -q "${CPU_DISTS[@]}" "${GPU_DISTS[@]}" 2>/dev/null
        fi
        # Not quiet: on a fresh machine this is minutes, and each "Collecting"/"Downloading" line is progress.
        "$PY" -m pip install --progress-bar off -c "$ROOT/constraints.txt" -e "$ROOT[dev,$FLAVOUR]" \
            | { grep -v "^Requirement already satisfied" || true; }
        rm -f "$VENV"/.installed-*
        touch "$stamp"
    fi
}

# promtool validates the shipped alert rules; the tests skip that check where it is missing.
ensure_promtool() {
    command -v promtool >/dev/null && return 0
    log "installing promtool (Debian package prometheus)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; } \
        || log "promtool not installable here; its checks will be skipped"
}

# Headless Chromium and its driver for the browser tests (the console, the API docs, the docs site):
# Debian's packages, never a browser download of a test library's own. The tests fail, not skip,
# where the browser is missing.
ensure_chromium() {
    command -v chromium >/dev/null && command -v chromedriver >/dev/null && return 0
    log "installing chromium and chromedriver (Debian packages, for the browser tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
}
