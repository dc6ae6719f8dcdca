"""``paw zoo``: build tiny local models, fine-tunes and adapters to try PAW without downloads."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    zoo_app = typer.Typer(help="Tiny local models for trying PAW (nothing is downloaded).",
                          no_args_is_help=True)
    app.add_typer(zoo_app, name="zoo")

    @zoo_app.command("build")
    def build(
        output: Path = typer.Argument(..., help="Folder to create."),
        arch: str = typer.Option("llama", help="llama, qwen2, gemma or mistral."),
        hidden_size: int = typer.Option(64, help="Hidden size."),
        num_layers: int = typer.Option(2, help="Number of decoder layers."),
        vocab_size: int = typer.Option(300, help="Tokenizer vocabulary to train."),
        seed: int = typer.Option(0, help="Initialisation seed."),
        tokenizer: str = typer.Option("byte-bpe", help="Tokenizer kind: byte-bpe, sentencepiece-bpe or wordpiece."),
        lora: bool = typer.Option(True, help="Also write a LoRA adapter and a fine-tune next to the base."),
    ):
        """Build a tiny base model (+ a fine-tune and a LoRA adapter).

        Example: paw zoo build ./tiny --arch qwen2 --hidden-size 64
        """
        from paw import zoo
        from paw.io.atomic import check_output

        if tokenizer not in zoo.TOKENIZER_KINDS:
            from paw.errors import PawError

            raise PawError(f"--tokenizer {tokenizer!r}: choose one of {', '.join(zoo.TOKENIZER_KINDS)}")
        check_output(output, overwrite=False)
        base = zoo.tiny_model(output / "base", arch, seed=seed, vocab_size=vocab_size, tokenizer_kind=tokenizer,
                              hidden_size=hidden_size, num_layers=num_layers)
        typer.echo(f"base model:  {base}")
        if lora:
            zoo.fine_tune(base, output / "finetune", seed=seed + 1)
            zoo.make_lora(base, output / "lora", seed=seed + 2)
            typer.echo(f"fine-tune:   {output / 'finetune'}\nLoRA:        {output / 'lora'}")

    @zoo_app.command("fine-tune")
    def fine_tune(
        base: Path = typer.Argument(..., help="Model folder to start from (for example one `paw zoo build` wrote)."),
        output: Path = typer.Argument(..., help="Folder to create."),
        seed: int = typer.Option(1, help="Seed of the perturbation; different seeds give unrelated fine-tunes."),
        scale: float = typer.Option(0.01, help="Size of the change, relative to each tensor's std."),
        include: str = typer.Option(".*", help="Regex of the tensor names to change (for example 'mlp')."),
    ):
        """Write a stand-in fine-tune of BASE: the same model with every matching tensor moved a little.

        Enough for task vectors and merges to have something to measure; nothing is trained.

        Example: paw zoo fine-tune ./tiny/base ./tiny/ft-math --seed 1 --scale 0.02
        """
        from paw import zoo
        from paw.io.atomic import check_output

        check_output(output, overwrite=False)
        deltas = zoo.fine_tune(base, output, seed=seed, scale=scale, include=include)
        typer.echo(f"fine-tune:   {output} ({len(deltas)} tensors changed)")
