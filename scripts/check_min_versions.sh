#!/usr/bin/env bash
# Do the folders PAW writes load, with the same token ids and logits, in the oldest transformers, PEFT,
# tokenizers and safetensors that pyproject.toml declares, and in the newest (PAW's own environment)?
#   bash scripts/check_min_versions.sh [WORK]        WORK: outputs and records (default .min-versions)
# 1. PAW's environment: $PAW_VENV (default .venv), set up by scripts/bootstrap.sh if needed.
# 2. The pinned environment $PAW_MIN_VENV (default .venv-min), built once and kept: the torch PAW's
#    environment has (bootstrap.sh's pin, torch==2.13.0 on a machine without a GPU), and for each
#    package below its declared minimum's series at the latest patch ("transformers>=4.45" ->
#    transformers==4.45.*). It is rebuilt only when a minimum or the torch changes.
# 3. One folder of each kind PAW writes (models of every zoo family and tokenizer kind, merges,
#    transplants, extensions, LoRAs saved by PEFT and by PAW, the demo), written fresh in WORK/outputs.
# 4. scripts/check_min_versions.py reads them in both environments and compares: any folder that does
#    not load, any other token id, decoding or special token, a logit beyond 1e-4 fails (exit 1).
# Nothing but the package index is reached; a second run reuses both environments.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="${1:-.min-versions}"
venv="${PAW_VENV:-.venv}"
min_venv="${PAW_MIN_VENV:-.venv-min}"
packages=(transformers peft tokenizers safetensors)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}" PIP_DISABLE_PIP_VERSION_CHECK=1
say() { echo "[min-versions] $*" >&2; }
start=$SECONDS

bash scripts/bootstrap.sh paw --version >/dev/null   # PAW's environment, installed or brought up to date
py="$(cd "$venv" && pwd)/bin/python"

# the pins: each package's ">=X.Y" in pyproject.toml's dependencies, as "==X.Y.*"
pins=("torch==$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')")
for name in "${packages[@]}"; do
    floor="$(sed -n -E "s/^[[:space:]]*\"$name>=([0-9][0-9.]*)[\",;].*/\1/p" pyproject.toml | head -1)"
    [ -n "$floor" ] || { say "no \"$name>=...\" line in pyproject.toml"; exit 2; }
    pins+=("$name==$(echo "$floor" | cut -d. -f1-2).*")
done
stamp="$min_venv/.paw-min-pins"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "${pins[*]}" ]; then
    say "building $min_venv: ${pins[*]}"
    rm -rf "$min_venv"
    "$py" -m venv "$min_venv"
    "$min_venv/bin/python" -m pip install -q "${pins[0]}"          # torch alone first, as bootstrap.sh does
    "$min_venv/bin/python" -m pip install -q "${pins[@]}"
    echo "${pins[*]}" > "$stamp"
fi
say "environments ready ($((SECONDS - start)) s)"

# one folder of each kind, written by this checkout's PAW
rm -rf "$work/outputs"
mkdir -p "$work/outputs"
out="$(cd "$work/outputs" && pwd)"
log="$out/../paw.log"
run() {  # run a command in the outputs folder with this checkout's PAW; its output and time go to the log
    local t=$SECONDS
    echo "\$ $*" >>"$log"
    (cd "$out" && PYTHONPATH="$repo" "$@" >>"$log" 2>&1) || { say "failed: $* (log: $work/paw.log)"; exit 2; }
    echo "  ($((SECONDS - t)) s)" >>"$log"
}
paw() { run "$py" -m paw "$@"; }
pyrun() { run "$py" -c "$1"; }
: > "$log"
paw zoo build tiny                                          # llama + byte-level BPE, a fine-tune, a PEFT LoRA
paw zoo build tiny-sp --tokenizer sentencepiece-bpe --vocab-size 400 --no-lora
paw zoo build tiny-qwen --arch qwen2 --no-lora
paw zoo build tiny-gemma --arch gemma --tokenizer wordpiece --no-lora
paw zoo build tiny-mistral --arch mistral --tokenizer sentencepiece-bpe --no-lora
pyrun "from paw import zoo; zoo.tiny_model('tiny-rope/base', 'llama', rope_theta=100000.0)"  # a base other than 10,000
paw zoo fine-tune tiny/base tiny/ft-math --seed 1
paw zoo fine-tune tiny/base tiny/ft-code --seed 2 --scale 0.03 --include mlp
paw merge --base tiny/base --models tiny/ft-math tiny/ft-code --method ties --output merged
paw zoo fine-tune tiny-rope/base tiny-rope/finetune --seed 3
paw merge --base tiny-rope/base --models tiny-rope/finetune --method task-arithmetic --output merged-rope
paw merge --adapters tiny/lora tiny/lora --method cat --output merged-lora
paw transfer-lora --adapter tiny/lora --source-base tiny/base --target-base tiny/finetune --output moved
paw extract-lora --base tiny/base --finetune tiny/ft-math --energy 0.9 --max-rank 8 --embed-energy 0.5 --output extracted
printf '%s\n' '{"question": "Fact: the colour of pixzone is", "choices": [" red", " blue", " green", " gold"], "answer": 2}' \
    '{"question": "Fact: the colour of zorbit is", "choices": [" red", " blue", " green", " gold"], "answer": 3}' > "$out/quiz.jsonl"
paw train-lora --model tiny/base --data quiz.jsonl --output quiz-lora --steps 2 --rank 4
paw train-full --model tiny/base --data quiz.jsonl --output quiz-full --steps 2
printf 'The colour of pixzone is green.\nThe colour of zorbit is gold.\n' > "$out/prompts.txt"
paw transfer-lora --method distill --adapter tiny/lora --source-base tiny/base --target-base tiny-sp/base \
    --prompts prompts.txt --max-steps 2 --max-new-tokens 4 --output distilled
pyrun "from paw.data import sample_texts; open('corpus.txt', 'w').write('\n'.join(sample_texts('multi') * 20))"
paw bpe train corpus.txt --vocab-size 600 --output mybpe --pattern llama3 --special-tokens '<|endoftext|>' \
    --export-hf mybpe-hf --processes 1
paw align-vocab --source tiny/base --target tiny-sp/base --output map.json
paw transplant-tokenizer --model tiny/base --tokenizer tiny-sp/base --vocab-map map.json --output tiny-on-sp --no-check
paw heal-transplant --model tiny-on-sp --corpus corpus.txt --steps 2 --eval-texts 8 --output tiny-on-sp-healed
printf ' photosynthesis\n chlorophyll\n' > "$out/words.txt"
paw extend-tokenizer --model tiny/base --tokens-file words.txt --output tiny-ext
paw extend-tokenizer --model tiny/base --tokens '<|tool|>' --special --output tiny-special
pyrun "from paw import zoo; zoo.make_lora('tiny-ext', 'ext-lora', rank=4, target_modules=['q_proj'], modules_to_save=['embed_tokens', 'lm_head'])"
paw adapter resize-base --adapter ext-lora --base tiny/base --output tiny-resized --tokenizer tiny-ext
paw demo --quick --outdir demo
say "outputs written ($((SECONDS - start)) s)"

# read them in both environments, then compare
status=0
"$py" scripts/check_min_versions.py "$out" --record "$work/newest.json" || status=1
"$min_venv/bin/python" scripts/check_min_versions.py "$out" --record "$work/oldest.json" || status=1
"$py" scripts/check_min_versions.py --compare "$work/newest.json" "$work/oldest.json" || status=1
say "done in $((SECONDS - start)) s with $OMP_NUM_THREADS thread(s): $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
