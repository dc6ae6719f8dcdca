"""``paw eval`` and ``paw train-lora``: measure a model on multiple-choice data, train a small LoRA."""

from __future__ import annotations

import typer

from paw.cli._options import RunOptions, WriteOptions, command_line, options_command
from paw.evaluate.options import EvalOptions, TrainLoraOptions


def register(app: typer.Typer) -> None:
    options_command(app, "eval", [(EvalOptions, ""), (RunOptions, "")], eval_command, doc=eval_command.__doc__)
    options_command(app, "train-lora", [(TrainLoraOptions, ""), (RunOptions, ""), (WriteOptions, "")],
                    train_lora_command, doc=train_lora_command.__doc__)


def eval_command(options: EvalOptions, run: RunOptions) -> None:
    """Multiple-choice accuracy (raw and length-normalised), its standard error, and the loss and
    perplexity of the correct answers; with --text, a text's word and byte perplexity; with --generate,
    greedy answers scored by exact match.

    Example: paw eval --model ./paw_demo/models/base --data ./paw_demo/data/colour.jsonl --limit 200

    5-shot: paw eval --model ./m --data arc-easy_test.jsonl --num-fewshot 5 --fewshot-data arc-easy_train.jsonl

    Perplexity (rolling windows, as lm-eval's wikitext): paw eval --model ./m --text notes.txt

    Chat template, as lm-eval's --apply_chat_template: paw eval --model ./m --data d.jsonl --apply-chat-template

    Generation: paw eval --model ./m --data qa.jsonl --generate --until '\\n' --ignore-case --ignore-punctuation

    Proxy-tuning (a LoRA of another model, applied at scoring time): paw eval --model ./b --data d.jsonl --proxy-base ./a --proxy-adapter ./a-lora
    """
    from paw.evaluate.pipeline import evaluate_model

    result = evaluate_model(options, run, command=command_line())
    if "proxy" in result.metrics:
        alone = result.metrics["proxy"]["target_alone"]
        typer.echo(f"target alone   {alone['accuracy']:.4f} ± {_se(alone['stderr'])}   (proxy-tuned below, "
                   f"scale {result.metrics['proxy']['scale']:g})")
    if options.text is not None:
        _print_perplexity(result.metrics)
    elif options.generate:
        _print_generation(result.metrics)
    else:
        _print_metrics(result.metrics)
    if result.output is not None:
        typer.echo(f"results: {result.output}")
    if options.per_item is not None:
        typer.echo(f"per item: {options.per_item}")


def train_lora_command(options: TrainLoraOptions, run: RunOptions, write: WriteOptions) -> None:
    """Train a PEFT LoRA on the correct answers of a multiple-choice set (loss on answer tokens only).

    Example: paw train-lora --model ./tiny/base --data train.jsonl --eval-data test.jsonl --output ./lora --steps 200 --lr 3e-3

    On N processes: torchrun --nproc-per-node N -m paw train-lora ... (same --batch-size and --lr; docs/scale.md)
    """
    from paw.distributed import is_main
    from paw.evaluate.pipeline import train_lora_adapter

    options.check()
    result = train_lora_adapter(options.model, options.data, options.output, **options.knobs(), device=run.device,
                                track=run.track, overwrite=run.overwrite, command=command_line())
    if not is_main():
        return
    _print_training(result.metrics)
    typer.echo(f"adapter: {options.output}" + (f"  (tracking: {result.tracking})" if result.tracking else ""))


def _print_metrics(metrics: dict, prefix: str = "") -> None:
    m = {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}
    typer.echo(f"accuracy       {m['accuracy']:.4f} ± {_se(m['stderr'])}   (n={m['n']})")
    typer.echo(f"accuracy_norm  {m['accuracy_norm']:.4f} ± {_se(m['stderr_norm'])}")
    typer.echo(f"loss           {m['loss']:.4f}   perplexity {m['perplexity']:.2f}   ({m['n_tokens']} answer tokens)")


def _se(stderr: float | None) -> str:
    """lm-eval's stderr, ``N/A`` for a single item as lm-eval prints it."""
    return "N/A" if stderr is None else f"{stderr:.4f}"


def _print_generation(m: dict) -> None:
    stopped = m["stopped"]
    typer.echo(f"exact_match    {m['exact_match']:.4f} ± {_se(m['stderr'])}   (n={m['n']})")
    typer.echo(f"generated      {m['n_generated_tokens']} tokens; stopped by --until {stopped['until']}, "
               f"by end of sequence {stopped['eos']}, at --max-gen-tokens {stopped['length']}")


def _print_perplexity(m: dict) -> None:
    docs = f"{m['n_documents']} document" + ("s" if m["n_documents"] != 1 else "")
    typer.echo(f"word_perplexity   {figure(m['word_perplexity'])}   ({m['n_words']} words in {docs})")
    typer.echo(f"byte_perplexity   {figure(m['byte_perplexity'])}   ({m['n_bytes']} bytes)")
    typer.echo(f"bits_per_byte     {figure(m['bits_per_byte'])}")
    typer.echo(f"token_perplexity  {figure(m['token_perplexity'])}   ({m['n_tokens']} tokens in {m['n_windows']} windows)")


def figure(value: float) -> str:
    """Four decimals, or four significant digits past a million (an untrained model's word perplexity).

    >>> figure(26.12346), figure(198071474716.1174)
    ('26.1235', '1.9807e+11')
    """
    return f"{value:.4f}" if abs(value) < 1e6 else f"{value:.4e}"


def _print_training(metrics: dict) -> None:
    typer.echo(f"train loss     {metrics['train_loss_start']:.4f} -> {metrics['train_loss_end']:.4f} "
               f"over {metrics['steps']} steps ({metrics['trainable_parameters']:,} trainable parameters)")
    if "test/accuracy" in metrics:
        typer.echo(f"test accuracy  {metrics['base/accuracy']:.4f} -> {metrics['test/accuracy']:.4f}")
        _print_metrics(metrics, prefix="test/")
