#!/usr/bin/env bash
# Run the gpu-marked tests and time PAW's --device cuda paths against the CPU on one machine.
# Meant for a machine with an NVIDIA GPU and torch/transformers/peft already installed:
#   [PARTS="tests distill scale distill-cpu transfer merge loop"] [BUDGET=seconds] [LIKE=models-folder] \
#       bash scripts/gpu_timings.sh [OUTDIR]
# Writes one log per part in OUTDIR (default ./gpu-timings). A step that would not end inside BUDGET
# (default: no limit) is skipped and says so. LIKE holds smollm2-135m-instruct/ and gemma-3-270m/
# (their config.json and tokenizer files are enough: the distill timing of that pair uses random
# weights of the real shapes), default ~/paw-models.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-timings}"; mkdir -p "$out"
parts="${PARTS:-tests distill scale distill-cpu transfer merge loop}"
budget="${BUDGET:-1000000}"; like="${LIKE:-$HOME/paw-models}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PAW_PROGRESS=1
py=python3
start=$SECONDS
step() {  # step LOG TIMEOUT command...: run under a timeout unless it could outlast the budget
  local log=$1 limit=$2; shift 2
  if (( SECONDS - start + limit > budget )); then echo "skipped (budget): $*" | tee -a "$out/$log"; return; fi
  echo "== $* (limit ${limit} s, at $((SECONDS - start)) s)" | tee -a "$out/$log"
  timeout "$limit" "$@" 2>&1 | tee -a "$out/$log"
  echo "-- exit ${PIPESTATUS[0]}" | tee -a "$out/$log"
}
$py -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || export PYTHONPATH="$PWD"
{
  nvidia-smi -L; nproc; git log -1 --format=%h 2>/dev/null
  $py -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
} 2>&1 | tee "$out/env.log"
for part in $parts; do case $part in
  tests) step gpu_tests.log 180 $py -m pytest -m gpu -p no:cacheprovider -q -rs tests ;;
  distill)
    step distill.log 100 $py scripts/bench_distill.py --hidden 256 --layers 4 --steps 100
    pair=(--source-like "$like/smollm2-135m-instruct" --target-like "$like/gemma-3-270m" --work /tmp/paw-real-shape)
    step distill.log 120 $py scripts/bench_scale_memory.py "${pair[@]}" --device cuda --max-steps 1
    step distill.log 150 $py scripts/bench_scale_memory.py "${pair[@]}" --device cuda --max-steps 201 ;;
  distill-cpu)  # the same pair on this machine's CPU, 11 steps (the per-step ratio)
    step distill.log 120 $py scripts/bench_scale_memory.py --source-like "$like/smollm2-135m-instruct" \
        --target-like "$like/gemma-3-270m" --work /tmp/paw-real-shape --device cpu --max-steps 11 ;;
  scale)
    step scale.log 150 $py scripts/bench_scale_memory.py --work /tmp/paw-1b --device cuda
    step scale.log 45 $py scripts/bench_scale_memory.py --work /tmp/paw-1b --device cuda --gradient-checkpointing
    step scale.log 60 $py scripts/bench_scale_memory.py --work /tmp/paw-1b --device cuda --max-steps 51 ;;
  transfer)
    for d in cuda cpu; do step transfer.log 300 $py scripts/bench_transfer_speed.py --shape llama-3.2-3b --methods auto --device $d --full-layers 1 --workdir /tmp/bt --reuse --keep; done ;;
  merge)
    for d in cuda cpu; do step merge.log 300 $py scripts/bench_merge.py --shape 1b --device $d --skip-mergekit --methods task-arithmetic ties --workdir /tmp/bm --keep; done ;;
  loop) step loop.log 200 $py scripts/bench_gpu_loop.py ;;
  *) echo "unknown part: $part" >&2; exit 2 ;;
esac; done
echo "total $((SECONDS - start)) s" | tee -a "$out/env.log"
