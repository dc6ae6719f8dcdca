#!/usr/bin/env bash
# Run the gpu-marked tests and time PAW's --device cuda paths against the CPU on one machine.
# Meant for a machine with an NVIDIA GPU and torch/transformers/peft already installed:
#   bash scripts/gpu_timings.sh [OUTDIR]
# Writes OUTDIR/gpu_tests.log and OUTDIR/timings.log (default ./gpu-timings).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-timings}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
py=python3
$py -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || export PYTHONPATH="$PWD"
{
  nvidia-smi -L; nproc
  $py -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
} 2>&1 | tee "$out/env.log"
$py -m pytest -m gpu -p no:cacheprovider -q tests 2>&1 | tee "$out/gpu_tests.log"
{
  echo "== transfer-lora, llama-3.2-3b shape, rank-16 adapter on 196 modules"
  for d in cuda cpu; do $py scripts/bench_transfer_speed.py --shape llama-3.2-3b --methods auto --device $d --full-layers 1 --workdir /tmp/bt --reuse --keep; done
  echo "== merge, Llama-3.2-1B shape, 3 fine-tunes"
  for d in cuda cpu; do $py scripts/bench_merge.py --shape 1b --device $d --skip-mergekit --methods task-arithmetic ties --workdir /tmp/bm --keep; done
  echo "== eval and train-lora on a zoo model"
  $py scripts/bench_gpu_loop.py
} 2>&1 | tee "$out/timings.log"
