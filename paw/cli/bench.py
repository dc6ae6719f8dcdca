"""``paw bench transfer`` (the transfer quality benchmark) and ``paw bench real`` (SmolLM2 and Gemma-3)."""

from __future__ import annotations

from pathlib import Path

import typer

from paw.cli._options import DEVICE, OVERWRITE, command_line, multi_value_command
from paw.device import DEVICE_HELP
from paw.progress import format_duration


def register(app: typer.Typer) -> None:
    from paw.bench.conditions import CONDITIONS
    from paw.bench.options import BenchOptions
    from paw.bench.real_options import RealOptions
    from paw.bench.targets import TARGETS
    from paw.bench.tasks import TASKS

    _REAL = RealOptions(models="")  # the documented run's defaults, stated once
    budgets = [c.choice for c in CONDITIONS.values() if c.family.option == "distill"]  # --help from the registries
    bench_app = typer.Typer(help="Benchmarks that anyone can rerun on a CPU.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")

    @bench_app.command("transfer", cls=multi_value_command("--merge"))
    def transfer(
        output: Path = typer.Option(..., "--output", "-o", help="Folder for results.json, results.md, recovered.png, kept.png."),
        seeds: str = typer.Option("0,1", help="Task-data and LoRA seeds, comma-separated."),
        tasks: str = typer.Option("", help=f"Tasks (comma list): {', '.join(TASKS)}. "
                                  f"Default: {', '.join(BenchOptions.tasks)}."),
        targets: str = typer.Option("", help=f"Target kinds (comma list): {', '.join(TARGETS)}. Default: all."),
        methods: str = typer.Option("", help="Transfer methods (comma list). Default: auto and every method."),
        distill: str = typer.Option(",".join(BenchOptions.distill), help="Distillation rows (comma list of input "
                                    f"budgets: {', '.join(budgets)}; -shift: the shift target), or none."),
        distill_steps: int = typer.Option(None, help="Steps of each distillation. Default: 3 x --lora-steps."),
        distill_token_focus: float = typer.Option(0.0, help="Distill's --token-focus in every distill row (0: off)."),
        distill_lr: float = typer.Option(None, help="Distill's learning rate in every distill row. Default: the "
                                         "LoRAs' own (3e-3)."),
        jobs: int = typer.Option(1, help="Worker processes: the (seed, task) units run side by side, with the same "
                                 "results as one (forked; spawned where PyTorch sees a GPU; --device cuda: they "
                                 "share it)."),
        items: int = typer.Option(300, help="Held-out items per task and seed."),
        hidden_size: int = typer.Option(64, min=4, help="Source hidden size."),
        num_layers: int = typer.Option(4, min=1, help="Source depth."),
        pretrain_steps: int = typer.Option(400, min=1, help="Source pretraining steps (targets scale with it)."),
        lora_steps: int = typer.Option(300, min=1, help="LoRA training steps."),
        lora_rank: int = typer.Option(8, min=1, help="LoRA rank."),
        data: Path = typer.Option(None, "--data",
                                  help="Folder of the commonsense *_formatted.jsonl files (ARC, OpenBookQA, PIQA, "
                                  "Winogrande, BoolQ) for the pretraining corpus. Without it the corpus is embedded "
                                  "fallback text, said loudly in the output and in results.json (notes.corpus_fallback)."),
        model_seed: int = typer.Option(0, help="Initialisation and corpus-order seed of the models (pool runs of "
                                       "several with --merge to see the spread between model builds)."),
        threads: int = typer.Option(1, min=1, help="Torch CPU threads per process (tiny models run best on one)."),
        merge: list[Path] = typer.Option(None, "--merge", metavar="<folder>...", help="Pool finished result folders of runs with other "
                                         "--seeds, --tasks or --model-seed into --output instead of running."),
        workdir: Path = typer.Option(None, help="Where models are kept (default: a temporary folder, removed)."),
        quick: bool = typer.Option(False, "--quick", help="Seconds-long smoke configuration (tiny everything)."),
        device: str = typer.Option("cpu", "--device", help="Where the tiny models run (default cpu, their "
                                   f"fastest: a GPU is slower at this size): {DEVICE_HELP}."),
        overwrite: bool = OVERWRITE,
    ):
        """Pretrain a small LM, build sibling targets, train LoRAs, transfer them, and score every method.

        Example: paw bench transfer --output bench-out --seeds 0,1 --targets upgrade,pruned,unrelated
        """
        from paw.bench.options import options_from
        from paw.bench.quality import benchmark_to_folder, pool_to_folder
        from paw.bench.report import markdown
        from paw.bench.tasks import FALLBACK_WARNING

        if merge:
            typer.echo(markdown(pool_to_folder(merge, output, overwrite=overwrite, command=command_line())))
            typer.echo(f"wrote {output}/results.json, results.md, recovered.png, kept.png ({len(merge)} runs pooled)")
            return
        opts = options_from(seeds=seeds, tasks=tasks, targets=targets, methods=methods, items=items,
                            hidden_size=hidden_size, num_layers=num_layers, pretrain_steps=pretrain_steps,
                            lora_steps=lora_steps, lora_rank=lora_rank, data=data, device=device, quick=quick,
                            distill=distill, distill_steps=distill_steps, distill_token_focus=distill_token_focus,
                            distill_lr=distill_lr, jobs=jobs, model_seed=model_seed,
                            threads=threads)
        if data is None:
            typer.echo(FALLBACK_WARNING, err=True)
        results = benchmark_to_folder(opts, output, workdir=workdir, overwrite=overwrite, command=command_line())
        typer.echo(markdown(results))
        if results["notes"].get("corpus_fallback"):
            typer.echo(FALLBACK_WARNING)
        typer.echo(f"wrote {output}/results.json, results.md, recovered.png, kept.png "
                   f"({format_duration(results['notes']['seconds']['total'])})")

    @bench_app.command("real")
    def real(
        output: Path = typer.Option(..., "--output", "-o", help="Folder for results.json, results.md, real.png."),
        models: Path = typer.Option(..., "--models", help="Folder written by scripts/real_models.sh (holds "
                                    "smollm2-135m-instruct/ and gemma-3-270m/)."),
        data: Path = typer.Option(..., "--data",
                                  help="Commonsense folder with raw/*.jsonl (ARC, OpenBookQA, PIQA, BoolQ, Winogrande)."),
        parts: str = typer.Option(",".join(_REAL.parts), help="Parts to run (comma list): eval, tokenizers, "
                                  "transfer, merge; and tasks (real task LoRAs moved both ways: hours on a CPU, "
                                  "resumable with --workdir)."),
        real_tasks: str = typer.Option(",".join(_REAL.real_tasks), "--real-tasks",
                                       help="Tasks of the part 'tasks' (comma list): arc-easy, piqa, boolq."),
        eval_items: int = typer.Option(_REAL.eval_items, help="Seeded subset of each evaluation set."),
        task_items: int = typer.Option(_REAL.task_items, help="Held-out items of the LoRA tasks."),
        lora_steps: int = typer.Option(_REAL.lora_steps, help="LoRA training steps."),
        distill_steps: int = typer.Option(None, help="Steps of the distillation. Default: 3 x --lora-steps."),
        methods: str = typer.Option("", help="Transfer methods (comma list). Default: auto and every method."),
        seed: int = typer.Option(_REAL.seed, help="Subset, task and LoRA seed."),
        workdir: Path = typer.Option(None, help="Where fine-tunes and merges are kept (default: temporary)."),
        device: str = DEVICE,
        overwrite: bool = OVERWRITE,
    ):
        """SmolLM2-135M and Gemma-3-270M: eval, tokenizers, LoRA transfer across families, task vectors, merge.

        Example: paw bench real --models ~/paw-models --data ../shared/data/commonsense --output bench-real
        """
        from paw.bench.real_report import markdown, real_to_folder
        from paw.device import resolve_device
        from paw.io.manifest import command_line

        split = [p.strip() for p in parts.split(",") if p.strip()]
        chosen = tuple(m.strip() for m in methods.split(",") if m.strip()) or None
        opts = RealOptions(models=str(models), data=str(data) if data else None, parts=tuple(split),
                           eval_items=eval_items, task_items=task_items, lora_steps=lora_steps,
                           distill_steps=distill_steps, methods=chosen,
                           real_tasks=tuple(t.strip() for t in real_tasks.split(",") if t.strip()),
                           seed=seed, device=str(resolve_device(device)))
        results = real_to_folder(opts, output, workdir=workdir, overwrite=overwrite, command=command_line())
        typer.echo(markdown(results))
        typer.echo(f"wrote {output}/results.json, results.md, real.png ({format_duration(results['seconds']['total'])})")
