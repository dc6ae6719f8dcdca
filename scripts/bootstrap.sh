#!/usr/bin/env bash
# One-step set-up and run for a fresh machine.
#   bash scripts/bootstrap.sh demo [paw demo options]   set up, then run the demo
#   bash scripts/bootstrap.sh test [pytest options]     set up, then run the test suite
#   bash scripts/bootstrap.sh paw ARGS...               set up, then any paw command
# Creates .venv (or $PAW_VENV) once. torch is installed first and on its own: the local CPU wheel
# (torch==2.13.0) where no NVIDIA GPU is visible, pip's default CUDA build where one is, or whatever
# PAW_TORCH_SPEC says (for example "torch==2.5.1"). The package then installs with that torch kept.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-test}"; shift || true
venv="${PAW_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
stamp="$venv/.paw-installed"
# The stamp holds a hash of pyproject.toml: a fresh clone of the same project (new file times) reuses
# the venv, a changed dependency list reinstalls. An older, empty stamp falls back to comparing times.
want="$("$py" -c 'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest())')"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ ! -f "$stamp" ] || { [ -n "$have" ] && [ "$have" != "$want" ]; } || { [ -z "$have" ] && [ pyproject.toml -nt "$stamp" ]; }; then
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    if ! "$py" -c "import torch" 2>/dev/null; then
        if [ -n "${PAW_TORCH_SPEC:-}" ]; then spec="$PAW_TORCH_SPEC"
        elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then spec="torch"
        else spec="torch==2.13.0"; fi
        echo "[paw] installing $spec" >&2
        "$py" -m pip install -q "$spec"
    fi
    echo "[paw] installing paw and its dependencies" >&2
    "$py" -m pip install -q -e ".[dev]"
    echo "$want" > "$stamp"
fi
case "$what" in
    # `python -m` from the checkout's root runs this checkout's code, even with a venv shared by several
    demo) exec "$py" -m paw demo "$@" ;;
    test) exec "$py" -m pytest "$@" ;;
    paw)  exec "$py" -m paw "$@" ;;
    *) echo "usage: bash scripts/bootstrap.sh demo|test|paw [args...]" >&2; exit 2 ;;
esac
