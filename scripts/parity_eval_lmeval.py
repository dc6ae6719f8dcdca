"""Parity of ``paw eval`` with lm-evaluation-harness: the same items, the same model, item by item.

lm-eval runs in its own virtualenv (``--install`` creates it: the CPU torch wheel first, so that pip
keeps it, then ``lm_eval[hf]`` at the pinned version with PAW's ``transformers``). The script writes the first ``--limit`` items of
ARC-Easy (test), PIQA (validation) and BoolQ (validation) as JSON lines into ``--workdir`` (the
ARC raw files are Python reprs; they are rewritten as JSON), and offline task YAMLs that read them
(``dataset_path: json``) with lm-eval's own ``arc_easy``, ``piqa`` and ``boolq`` templates. PAW
reads the same files with its raw-layout readers, whose prompts are those templates. Both run in a
child process of their own, one after the other, timed by wall clock from start to exit; lm-eval
with ``--log_samples``, PAW through ``paw.evaluate.mc.evaluate(per_item=True)``.

Printed per set: items where both pick the same choice by raw log-likelihood (accuracy) and by
length-normalised log-likelihood (accuracy_norm), the largest |log-likelihood difference| over all
choices, and both tools' accuracies and stderrs; then the wall times and their ratio.

``--num-fewshot K``: ARC-Easy K-shot, the examples from its train split (``training_split`` in the task
YAML, the whole split written as JSON lines). lm-eval draws them with its default sampler and few-shot
seed 1234, PAW with ``paw.evaluate.fewshot`` and the same seed; "prompt or choice text differs" then
counts items whose few-shot contexts differ, i.e. whether the two drew the same examples.

``--apply-chat-template`` (with ``--system-instruction TEXT``, ``--no-fewshot-as-multiturn``): both tools render
every context with the model's chat template (lm-eval's ``--apply_chat_template``, whose few-shot examples are
turns of their own unless ``--fewshot_as_multiturn false``; PAW's ``paw.evaluate.chat``), and the choices
are scored without the target delimiter.

``--sets ...,arc_easy_gen``: generation scored by exact match. The first ``--limit`` ARC-Easy test
questions as ``{"question": "Question: ...\nAnswer:", "answer": <the right choice's text, stripped>}``
(``paw eval --generate``'s layout; lm-eval reads the same file in a ``generate_until`` task with
``doc_to_text: "{{question}}"``, ``doc_to_target: "{{answer}}"``), ``--gen-fewshot`` examples (default 3;
``--num-fewshot`` when given) from the train split written the same way, greedy up to
``--max-gen-tokens`` (default 32) until ``"\n\n"``, lm-eval's ``remove_whitespace`` filter and
``exact_match`` with ``ignore_case`` and ``ignore_punctuation``. Compared per item: the prompt, the
generated text (before stripping) and the match.

``--sets ...,text``: perplexity. The first ``--text-docs`` BoolQ passages (Wikipedia paragraphs), one
document each, in a ``loglikelihood_rolling`` task with lm-eval's wikitext metrics (word_perplexity,
byte_perplexity, bits_per_byte), once per window length in ``--windows`` (0: the model's own; lm-eval's
``max_length`` model argument otherwise); PAW's ``paw.evaluate.perplexity`` with ``max_length`` the same.

    python scripts/parity_eval_lmeval.py --install                       # first time: the venv (~3 GB)
    python scripts/parity_eval_lmeval.py --model ~/paw-models/smollm2-135m-instruct --limit 300
    python scripts/parity_eval_lmeval.py --limit 20 --sets piqa           # quick
    python scripts/parity_eval_lmeval.py --limit 100 --sets arc_easy,text --num-fewshot 5 --windows 0,64
    python scripts/parity_eval_lmeval.py --limit 50 --sets arc_easy,piqa,boolq,arc_easy_gen --apply-chat-template

The model is a local Hugging Face folder (``bash scripts/real_models.sh ~/paw-models``); nothing
is downloaded (``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LM_EVAL = "0.4.13"          # the version this script was written against and last run with
TORCH = "2.13.0"            # the CPU wheel; an unpinned torch pulls the CUDA build
DEFAULT_VENV = Path.home() / ".cache" / "paw-parity" / "lmeval-venv"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "commonsense" / "raw"
DEFAULT_MODEL = Path.home() / "paw-models" / "smollm2-135m-instruct"

# set -> (raw file, PAW format, lm-eval task body: lm-eval's own template for the set)
SETS = {
    "arc_easy": ("arc-easy_test.jsonl", "arc", {
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{choices.label.index(answerKey)}}",
        "doc_to_choice": "{{choices.text}}",
    }),
    "piqa": ("piqa_validation.jsonl", "piqa", {
        "doc_to_text": "Question: {{goal}}\nAnswer:",
        "doc_to_target": "{{answer}}",            # lm-eval's piqa names it label; this file, answer
        "doc_to_choice": "{{[sol1, sol2]}}",
    }),
    "boolq": ("boolq_validation.jsonl", "boolq", {
        "doc_to_text": "{{passage}}\nQuestion: {{question}}?\nAnswer:",
        "doc_to_target": "{{answer | int}}",      # a JSON boolean here, 0/1 in lm-eval's copy
        "doc_to_choice": '["no", "yes"]',
    }),
}
TRAIN = {"arc_easy": "arc-easy_train.jsonl", "arc_easy_gen": "arc-easy_train.jsonl"}   # few-shot sources
GEN = {"arc_easy_gen": "arc-easy_test.jsonl"}   # generation sets: ARC-Easy questions, the right answer's text
TEXT_SOURCE = "boolq_validation.jsonl"          # the perplexity documents: its passages
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"}


def ensure_venv(venv: Path, install: bool) -> Path:
    """``venv/bin/lm_eval``, creating the virtualenv when ``install`` (torch first, then lm_eval)."""
    exe = venv / "bin" / "lm_eval"
    if exe.exists():
        return exe
    if not install:
        sys.exit(f"lm_eval not found in {venv}; pass --install to create that virtualenv")
    from importlib.metadata import version

    transformers = version("transformers")  # PAW's own, so that both load the model with the same code
    for step in ([sys.executable, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "pip"), "install", "-q", f"torch=={TORCH}"],
                 [str(venv / "bin" / "pip"), "install", "-q", f"lm_eval[hf]=={LM_EVAL}", f"transformers=={transformers}"]):
        print("+", " ".join(step), flush=True)
        subprocess.run(step, check=True)
    return exe


def write_data(data: Path, sets: list[str], limit: int, workdir: Path, *, text_docs: int = 5) -> dict[str, Path]:
    """The first ``limit`` records of each set as JSON lines (ARC's Python reprs become JSON), its whole train
    split as ``<set>_train`` where it has one, and ``text``: ``text_docs`` BoolQ passages as ``{"text": ...}``;
    a generation set's records in ``paw eval --generate``'s layout (:func:`_gen_record`)."""
    out = {}
    for name in sets:
        if name == "text":
            records = [{"text": r["passage"]} for r in _records(data / TEXT_SOURCE, text_docs)]
            out[name] = _write_lines(workdir / "data" / "text.jsonl", records)
            continue
        source = GEN.get(name) or SETS[name][0]
        shape = _gen_record if name in GEN else (lambda r: r)
        out[name] = _write_lines(workdir / "data" / f"{name}.jsonl", [shape(r) for r in _records(data / source, limit)])
        if name in TRAIN:
            out[f"{name}_train"] = _write_lines(workdir / "data" / f"{name}_train.jsonl",
                                                [shape(r) for r in _records(data / TRAIN[name], None)])
    return out


def _gen_record(record: dict) -> dict:
    """An ARC record as a generation item: lm-eval's ARC prompt, the right choice's text as the reference."""
    answer = record["choices"]["text"][record["choices"]["label"].index(record["answerKey"])]
    return {"question": f"Question: {record['question'].strip()}\nAnswer:", "answer": answer.strip(),
            "id": record.get("id", "")}


def _records(path: Path, limit: int | None) -> list[dict]:
    from paw.io.mcdata import read_records

    out = []
    for _, record in read_records(path):
        if len(out) == limit:
            break
        out.append(record)
    return out


def _write_lines(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def write_tasks(files: dict[str, Path], workdir: Path, *, max_gen_tokens: int = 32, gen_fewshot: int = 3) -> Path:
    """One lm-eval task YAML per set, ``paw_<set>``, reading the local file as its test split."""
    folder = workdir / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        if name.endswith("_train"):
            continue
        if name == "text":   # lm-eval's wikitext task over local documents
            body = {"task": "paw_text", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(path)}},
                    "test_split": "test", "output_type": "loglikelihood_rolling", "doc_to_text": "",
                    "doc_to_target": "{{text}}",
                    "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")]}
            (folder / "paw_text.yaml").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
            continue
        splits = {"test": str(path)}
        if f"{name}_train" in files:   # the few-shot examples come from here
            splits["train"] = str(files[f"{name}_train"])
        if name in GEN:
            body = gen_task(name, splits, max_gen_tokens=max_gen_tokens, num_fewshot=gen_fewshot)
            (folder / f"paw_{name}.yaml").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
            continue
        body = {"task": f"paw_{name}", "dataset_path": "json",
                "dataset_kwargs": {"data_files": splits}, "test_split": "test",
                **({"training_split": "train"} if "train" in splits else {}),
                "output_type": "multiple_choice", **SETS[name][2],
                "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                                {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}]}
        # JSON is YAML: no quoting rules to get wrong for the templates
        (folder / f"paw_{name}.yaml").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return folder


def gen_task(name: str, splits: dict[str, str], *, max_gen_tokens: int, num_fewshot: int) -> dict:
    """A ``generate_until`` task over a file in ``paw eval --generate``'s layout, scored as lm-eval's TriviaQA is
    (``remove_whitespace``, then ``exact_match`` ignoring case and punctuation)."""
    return {"task": f"paw_{name}", "dataset_path": "json", "dataset_kwargs": {"data_files": splits},
            "test_split": "test", **({"training_split": "train"} if "train" in splits else {}),
            "num_fewshot": num_fewshot, "output_type": "generate_until",
            "doc_to_text": "{{question}}", "doc_to_target": "{{answer}}",
            "generation_kwargs": {"until": ["\n\n"], "max_gen_toks": max_gen_tokens, "do_sample": False,
                                  "temperature": 0.0},
            "filter_list": [{"name": "remove_whitespace",
                             "filter": [{"function": "remove_whitespace"}, {"function": "take_first"}]}],
            "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                             "ignore_case": True, "ignore_punctuation": True}]}


def run_lm_eval(exe: Path, model: Path, tasks: Path, sets: list[str], batch_size: int, out: Path, *,
                num_fewshot: int = 0, max_length: int = 0, chat: dict | None = None) -> tuple[float, float]:
    window = f",max_length={max_length}" if max_length else ""
    cmd = [str(exe), "--model", "hf", "--model_args", f"pretrained={model},dtype=float32{window}",
           "--tasks", ",".join(f"paw_{s}" for s in sets), "--include_path", str(tasks), "--device", "cpu",
           "--batch_size", str(batch_size), "--log_samples", "--output_path", str(out)]
    if num_fewshot:   # lm-eval's default few-shot seed (1234) is PAW's default --seed
        cmd += ["--num_fewshot", str(num_fewshot)]
    if chat:
        cmd += ["--apply_chat_template", "--fewshot_as_multiturn", "true" if chat["multiturn"] else "false"]
        cmd += ["--system_instruction", chat["system"]] if chat.get("system") else []
    print("+", " ".join(cmd), flush=True)
    return _timed(cmd)


def run_paw(model: Path, files: dict[str, Path], batch_size: int, out: Path, *, num_fewshot: int = 0,
            windows: tuple[int, ...] = (), chat: dict | None = None, gen: dict | None = None) -> tuple[float, float]:
    """``paw eval``'s library calls in a child process, per-item results to ``out`` (JSON)."""
    cmd = [sys.executable, __file__, "--paw-child", str(out), "--model", str(model), "--batch-size", str(batch_size),
           "--files", json.dumps({k: str(v) for k, v in files.items()}), "--num-fewshot", str(num_fewshot),
           "--windows", ",".join(map(str, windows)), "--child-settings", json.dumps({"chat": chat, "gen": gen})]
    print("+", " ".join(cmd[:4]), "...", flush=True)
    return _timed(cmd, env={"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """``(wall s, CPU s)`` of a child process; CPU seconds (user + system, the child and its own
    children) hold up better than wall time on a machine that other jobs share."""
    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    wall, used = time.perf_counter(), cpu()
    subprocess.run(cmd, check=True, env={**os.environ, **OFFLINE, **(env or {})})   # PAW: this checkout's
    return time.perf_counter() - wall, cpu() - used


def paw_child(out: Path, model: Path, files: dict[str, str], batch_size: int, num_fewshot: int = 0,
              windows: tuple[int, ...] = (), chat: dict | None = None, gen: dict | None = None) -> None:
    from paw.evaluate.chat import ChatFormat, pairs_of, renderer
    from paw.evaluate.fewshot import with_examples
    from paw.evaluate.formats import read_items
    from paw.evaluate.mc import argmax_choice, evaluate
    from paw.io.lm import load_lm

    lm, tokenizer = load_lm(model, dtype="float32")
    form = None
    if chat:   # as paw eval --apply-chat-template [--system-instruction S] [--fewshot-as-multiturn]
        form = ChatFormat(renderer(tokenizer, model=model), system=chat.get("system"),
                          multiturn=bool(chat.get("multiturn")))
    results = {}
    for name, path in files.items():
        if name.endswith("_train"):
            continue
        if name == "text":
            results[name] = paw_perplexity(lm, tokenizer, Path(path), windows, batch_size)
            continue
        if name in GEN:
            results[name] = paw_generation(lm, tokenizer, path, files.get(f"{name}_train"), batch_size, form,
                                           num_fewshot=num_fewshot or gen["fewshot"], max_gen_tokens=gen["max_tokens"])
            continue
        items = read_items(path, format=SETS[name][1])
        if num_fewshot and f"{name}_train" in files:   # as paw eval --num-fewshot K --fewshot-data TRAIN --seed 1234
            pool = read_items(files[f"{name}_train"], format=SETS[name][1])
            items, _ = with_examples(items, pool, num_fewshot, seed=1234)
        cpu = time.process_time()
        m = evaluate(lm, tokenizer, items, batch_size=batch_size, progress=False, per_item=True, chat=form)
        lls = m["choice_logprobs"]
        results[name] = {
            "score_cpu_s": time.process_time() - cpu,   # the scoring alone: no start-up, no loading
            "accuracy": m["accuracy"], "accuracy_norm": m["accuracy_norm"], "lls": lls,
            "stderr": m["stderr"], "stderr_norm": m["stderr_norm"],
            "pairs": pairs_of(items, form),
            "pred": [argmax_choice(x) for x in lls],
            "pred_norm": [argmax_choice([ll / n for ll, n in zip(x, item.norm_lengths(), strict=True)])
                          for x, item in zip(lls, items, strict=True)],
        }
    out.write_text(json.dumps(results), encoding="utf-8")


def paw_generation(lm, tokenizer, path: str, train: str | None, batch_size: int, chat, *, num_fewshot: int,
                   max_gen_tokens: int) -> dict:
    """As ``paw eval --generate --num-fewshot K --fewshot-data TRAIN --max-gen-tokens N --ignore-case
    --ignore-punctuation [--apply-chat-template]`` (``--until`` its default, ``"\n\n"``)."""
    from paw.evaluate.chat import prompt_of
    from paw.evaluate.exact import Rules
    from paw.evaluate.fewshot import with_examples
    from paw.evaluate.gendata import read_gen_items
    from paw.evaluate.generate import generate, score

    items = read_gen_items(path)
    if num_fewshot and train:
        items, _ = with_examples(items, read_gen_items(train), num_fewshot, seed=1234)
    prompts = [prompt_of(item, chat) for item in items]
    out = generate(lm, tokenizer, prompts, max_new_tokens=max_gen_tokens, batch_size=batch_size, progress=False)
    metrics, hits = score(items, out, Rules(ignore_case=True, ignore_punctuation=True))
    return {"prompts": prompts, "texts": [g.text for g in out], "match": hits, "exact_match": metrics["exact_match"],
            "stderr": metrics["stderr"], "stopped": metrics["stopped"]}


def compare_gen(name: str, paw: dict, samples: list[dict], theirs: dict) -> dict:
    """Item by item: the same prompt, the same generated text (lm-eval's response before its whitespace filter),
    the same exact match."""
    prompts_differ = texts_differ = same_match = 0
    examples = []
    for k, sample in enumerate(samples):
        prompt, text = _gen_prompt(sample["arguments"]), sample["resps"][0][0]
        prompts_differ += prompt != paw["prompts"][k]
        texts_differ += text != paw["texts"][k]
        same_match += int(float(sample["exact_match"])) == paw["match"][k]
        if text != paw["texts"][k] and len(examples) < 3:
            examples.append({"item": k, "lm-eval": text, "PAW": paw["texts"][k]})
    n = len(samples)
    return {"set": name, "n": n, "prompts_differ": prompts_differ, "texts_differ": texts_differ,
            "same_match": same_match, "paw_em": paw["exact_match"], "lmeval_em": theirs.get("exact_match"),
            "paw_stderr": paw["stderr"], "lmeval_stderr": theirs.get("exact_match_stderr"),
            "paw_stopped": paw["stopped"], "differing": examples}


def _gen_prompt(arguments) -> str:
    """The context of a logged ``generate_until`` sample (a list ``[[ctx, kwargs]]`` or a dict of dicts)."""
    if isinstance(arguments, dict):
        return next(iter(arguments.values()))["arg_0"]
    return arguments[0][0]


def gen_table(rows: list[dict]) -> str:
    lines = ["| set | items | prompt differs | generated text differs | same exact match | exact_match PAW / lm-eval "
             "| stderr PAW / lm-eval |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['n']} | {r['prompts_differ']} | {r['texts_differ']} | {r['same_match']}/{r['n']} "
                     f"| {_num(r['paw_em'])} / {_num(r['lmeval_em'])} | {_num(r['paw_stderr'])} / "
                     f"{_num(r['lmeval_stderr'])} |")
    for r in rows:
        for example in r["differing"]:
            lines.append(f"{r['set']} item {example['item']}: lm-eval {example['lm-eval']!r}, PAW {example['PAW']!r}")
    return "\n".join(lines)


def paw_perplexity(lm, tokenizer, path: Path, windows: tuple[int, ...], batch_size: int) -> dict:
    """PAW's perplexity metrics of the documents of ``path`` at each window length (0: the model's own)."""
    from paw.evaluate.perplexity import context_length, score_documents, summarize
    from paw.io.textdata import read_documents

    documents = read_documents(path)
    return {str(w): summarize(score_documents(lm, tokenizer, documents, batch_size=batch_size, progress=False,
                                              max_length=w or context_length(lm, tokenizer)))
            for w in windows}


def lm_eval_metrics(out: Path, task: str) -> dict:
    """lm-eval's aggregated metrics of ``task`` (``{"acc": ..., "acc_stderr": ...}``, filter names dropped)."""
    found = sorted(out.rglob("results_*.json"))
    if not found:
        sys.exit(f"no results under {out}")
    results = json.loads(found[-1].read_text(encoding="utf-8"))["results"][task]
    return {k.split(",")[0]: v for k, v in results.items() if "," in k}


def compare_text(paw: dict, out_by_window: dict[int, Path]) -> list[dict]:
    rows = []
    for window, out in out_by_window.items():
        theirs, ours = lm_eval_metrics(out, "paw_text"), paw[str(window)]
        row = {"window": window or "model's own", "documents": ours["n_documents"], "windows": ours["n_windows"]}
        for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
            row[metric] = (ours[metric], float(theirs[metric]), abs(ours[metric] / float(theirs[metric]) - 1))
        rows.append(row)
    return rows


def text_table(rows: list[dict]) -> str:
    lines = ["| window (tokens) | documents | windows | metric | PAW | lm-eval | relative difference |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
            ours, theirs, rel = r[metric]
            lines.append(f"| {r['window']} | {r['documents']} | {r['windows']} | {metric} | {ours:.6f} | {theirs:.6f} "
                         f"| {rel:.1e} |")
    return "\n".join(lines)


def lm_eval_samples(out: Path, name: str) -> list[dict]:
    """lm-eval's logged samples of task ``paw_<name>``, in document order."""
    found = sorted(out.rglob(f"samples_paw_{name}_2*.jsonl"))   # _<date>: not paw_<name>_gen's file
    if not found:
        sys.exit(f"no samples for paw_{name} under {out}")
    rows = [json.loads(line) for line in found[-1].read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["doc_id"])


def compare(name: str, paw: dict, samples: list[dict], theirs: dict) -> dict:
    """Item by item: the same prompt texts, the same picks; ``theirs``: lm-eval's aggregated metrics (stderrs)."""
    import numpy as np

    same = same_norm = texts_differ = 0
    worst = 0.0
    acc, acc_norm = [], []
    for k, sample in enumerate(samples):
        lls = np.array([float(r[0]) for r in sample["filtered_resps"]])
        pairs = _pairs(sample["arguments"])
        lengths = np.array([float(len(c.removeprefix(" "))) for _, c in pairs])  # lm-eval: len(doc_to_choice)
        texts_differ += pairs != [tuple(x) for x in paw["pairs"][k]]
        pred, pred_norm = int(np.argmax(lls)), int(np.argmax(lls / lengths))
        acc.append(sample["acc"])
        acc_norm.append(sample["acc_norm"])
        assert (pred == int(sample["target"])) == bool(sample["acc"]), (name, k)  # our reading of lm-eval's pick
        assert (pred_norm == int(sample["target"])) == bool(sample["acc_norm"]), (name, k)
        same += pred == paw["pred"][k]
        same_norm += pred_norm == paw["pred_norm"][k]
        worst = max(worst, float(np.max(np.abs(lls - np.array(paw["lls"][k])))))
    n = len(samples)
    return {"set": name, "n": n, "texts_differ": texts_differ, "same": same, "same_norm": same_norm, "max_abs_ll_diff": worst,
            "paw_acc": paw["accuracy"], "lmeval_acc": float(np.mean(acc)),
            "paw_acc_norm": paw["accuracy_norm"], "lmeval_acc_norm": float(np.mean(acc_norm)),
            "paw_stderr": paw["stderr"], "lmeval_stderr": theirs.get("acc_stderr"),
            "paw_stderr_norm": paw["stderr_norm"], "lmeval_stderr_norm": theirs.get("acc_norm_stderr")}


def _pairs(arguments) -> list[tuple[str, str]]:
    """``[(context, continuation), ...]`` from a logged sample's ``arguments`` (a list, or a dict of dicts)."""
    if isinstance(arguments, dict):
        return [(a["arg_0"], a["arg_1"]) for _, a in sorted(arguments.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[1]))]
    return [(a[0], a[1]) for a in arguments]


def versions(exe: Path) -> dict:
    def of(python: str) -> str:
        code = ("from importlib import metadata; print(' '.join(f'{p} {metadata.version(p)}' for p in "
                "('torch', 'transformers') ))")
        return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()

    lm_python = str(exe.parent / "python")
    lm = subprocess.run([lm_python, "-c", "from importlib import metadata; print(metadata.version('lm_eval'))"],
                        capture_output=True, text=True).stdout.strip()
    return {"lm_eval": lm, "lm-eval venv": of(lm_python), "PAW venv": of(sys.executable)}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.processor() or "unknown"


def table(rows: list[dict], paw_s: tuple[float, float], lm_s: tuple[float, float]) -> str:
    lines = ["| set | items | prompt or choice text differs | same pick, accuracy | same pick, accuracy_norm | max abs LL difference "
             "| accuracy PAW / lm-eval | accuracy_norm PAW / lm-eval | stderr PAW / lm-eval |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['n']} | {r['texts_differ']} | {r['same']}/{r['n']} | {r['same_norm']}/{r['n']} | "
                     f"{r['max_abs_ll_diff']:.2e} | {r['paw_acc']:.4f} / {r['lmeval_acc']:.4f} | "
                     f"{r['paw_acc_norm']:.4f} / {r['lmeval_acc_norm']:.4f} | "
                     f"{_num(r['paw_stderr'])} / {_num(r['lmeval_stderr'])} |")
    lines.append("")
    for what, i in (("wall time", 0), ("CPU time", 1)):
        lines.append(f"{what}, start to exit of each child process: PAW {paw_s[i]:.1f} s, lm-eval {lm_s[i]:.1f} s, "
                     f"ratio lm-eval / PAW {lm_s[i] / paw_s[i]:.2f}")
    return "\n".join(lines)


def _num(value) -> str:
    return f"{value:.4f}" if isinstance(value, float | int) else str(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="local Hugging Face model folder")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of the raw commonsense files")
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    ap.add_argument("--limit", type=int, default=300, help="first N items of each set (default 300)")
    ap.add_argument("--batch-size", type=int, default=8, help="both tools (default 8)")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help=f"lm-eval's virtualenv (default {DEFAULT_VENV})")
    ap.add_argument("--install", action="store_true", help="create --venv when it is missing")
    ap.add_argument("--workdir", type=Path, default=None, help="keep data, tasks and outputs here (default: temp)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    ap.add_argument("--num-fewshot", type=int, default=0, help="K-shot ARC-Easy from its train split (default 0)")
    ap.add_argument("--windows", default="0", help="perplexity window lengths for the text set, 0: the model's own")
    ap.add_argument("--text-docs", type=int, default=5, help="BoolQ passages in the text set (default 5)")
    ap.add_argument("--apply-chat-template", action="store_true", help="both tools render contexts with the "
                                                                        "model's chat template")
    ap.add_argument("--system-instruction", default=None, help="with --apply-chat-template: a system message")
    ap.add_argument("--no-fewshot-as-multiturn", action="store_true",
                    help="with --apply-chat-template: examples in the one user turn, not turns of their own")
    ap.add_argument("--max-gen-tokens", type=int, default=32, help="generation sets: new tokens at most (default 32)")
    ap.add_argument("--gen-fewshot", type=int, default=3, help="generation sets: examples when --num-fewshot is 0")
    ap.add_argument("--paw-child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--files", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--child-settings", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    windows = tuple(int(w) for w in args.windows.split(",") if w.strip())
    if args.paw_child:
        settings = json.loads(args.child_settings)
        return paw_child(args.paw_child, args.model, json.loads(args.files), args.batch_size, args.num_fewshot,
                         windows, chat=settings.get("chat"), gen=settings.get("gen"))

    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in (*SETS, *GEN, "text")]
    if unknown or args.limit < 1:
        sys.exit(f"--sets: unknown {unknown}; choose from {', '.join([*SETS, *GEN])}, text" if unknown
                 else "--limit must be >= 1")
    chat = ({"system": args.system_instruction, "multiturn": not args.no_fewshot_as_multiturn}
            if args.apply_chat_template else None)
    gen = {"fewshot": args.gen_fewshot, "max_tokens": args.max_gen_tokens}
    if not (args.model / "config.json").is_file():
        sys.exit(f"{args.model}: not a model folder (bash scripts/real_models.sh ~/paw-models makes one)")
    exe = ensure_venv(args.venv, args.install)
    mc = [s for s in sets if s in SETS]
    scored = [s for s in sets if s != "text"]
    with tempfile.TemporaryDirectory(prefix="paw-parity-") as tmp:
        work = args.workdir or Path(tmp)
        files = write_data(args.data, sets, args.limit, work, text_docs=args.text_docs)
        tasks = write_tasks(files, work, max_gen_tokens=args.max_gen_tokens, gen_fewshot=args.gen_fewshot)
        model = args.model.resolve()
        lm_s = (0.0, 0.0)
        if scored:
            lm_s = run_lm_eval(exe, model, tasks, scored, args.batch_size, work / "lm-eval",
                               num_fewshot=args.num_fewshot, chat=chat)
        text_out = {w: work / f"lm-eval-text-{w}" for w in windows} if "text" in sets else {}
        for w, out in text_out.items():
            lm_s = tuple(a + b for a, b in zip(lm_s, run_lm_eval(exe, model, tasks, ["text"], args.batch_size, out,
                                                                  max_length=w), strict=True))
        paw_s = run_paw(model, files, args.batch_size, work / "paw.json", num_fewshot=args.num_fewshot,
                        windows=windows if text_out else (), chat=chat, gen=gen)
        paw = json.loads((work / "paw.json").read_text(encoding="utf-8"))
        rows = [compare(name, paw[name], lm_eval_samples(work / "lm-eval", name),
                        lm_eval_metrics(work / "lm-eval", f"paw_{name}")) for name in mc]
        gen_rows = [compare_gen(name, paw[name], lm_eval_samples(work / "lm-eval", name),
                                lm_eval_metrics(work / "lm-eval", f"paw_{name}")) for name in sets if name in GEN]
        text_rows = compare_text(paw["text"], text_out) if text_out else []
    info = {"model": str(args.model), "limit": args.limit, "num_fewshot": args.num_fewshot, "chat": chat,
            **({"generation": gen} if gen_rows else {}),
            "batch_size": args.batch_size, "cpu": cpu_name(), "threads": os.environ.get("OMP_NUM_THREADS", "default"),
            **versions(exe)}
    print()
    for key, value in info.items():
        print(f"{key}: {value}")
    print(table(rows, paw_s, lm_s))
    if gen_rows:
        print()
        print(gen_table(gen_rows))
    if text_rows:
        print()
        print(text_table(text_rows))
    if args.json:
        args.json.write_text(json.dumps({**info, "rows": rows, "generation_rows": gen_rows, "text": text_rows,
                                         "paw_s": paw_s[0],
                                         "lm_eval_s": lm_s[0], "paw_cpu_s": paw_s[1], "lm_eval_cpu_s": lm_s[1]},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
