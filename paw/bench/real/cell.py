"""One cell of ``paw bench real --parts tasks`` on its own: ``paw bench real --cell TASK SOURCE TARGET VARIANT``.

For a work folder that holds the main run's score files but not its adapters (a new machine, a GPU lease
that gets only what travels), and for several processes on one GPU. A cell is one move of one direction:
VARIANT ``lora`` is the source's LoRA alone (:func:`~paw.bench.real.tasks.own_lora`: what the others start
from), ``main`` the main move again (:func:`~paw.bench.real.tasks.run_direction`, from whatever source
LoRA the cache holds), any other a variant of :data:`~paw.bench.real.tasks.VARIANTS`
(:func:`~paw.bench.real.tasks.run_variant`). It runs on the bench's own cache in ``WORK/tasks/TASK``
(reusing whatever is there, writing what it makes) and writes its summary to
``WORK/variant-TASK-VARIANT-SOURCE-to-TARGET.json``, with ``vs_main`` (the main move minus this one,
paired) where the main move's scores are cached. The target's own LoRA is trained only where its score
is not cached (it gives nothing else). Several cells may run at once on one work folder if no two of
them train the same LoRA: ``lora`` for each model first, the rest once both LoRAs' ``lora-NAME.meta.json``
are there (``scripts/gpu_real_tasks.sh cells`` does).

``stand_in_loras`` is for the ``base-teacher`` control only: its teacher is the source base without the
LoRA and its student starts from a fresh adapter (the two tokenizers differ, so no weight-space start),
so the source LoRA gives the moved adapter nothing but its shape (rank, alpha, modules). Where the cache
holds no LoRA, one training step stands in for the 300 of the recipe and is removed afterwards; the four
conditions' scores must then be in the cache (they were computed with the real LoRAs), or the cell is
refused before anything is trained.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paw.bench.real.cache import Cache
from paw.bench.real.options import RealCell, RealOptions
from paw.bench.real.task_sets import load_task
from paw.bench.real.tasks import RECIPE, Recipe, own_lora, run_direction, run_variant
from paw.bench.testbed import load_base
from paw.errors import PawError
from paw.io.manifest import write_json
from paw.knobs import require

HEADLINE = ("accuracy", "moved_gain", "vs_main", "failed")   # what the command prints of a cell's summary


@dataclass(frozen=True)
class CellResult:
    """A cell's summary (what :func:`run_cell` wrote to ``path``)."""

    path: Path
    summary: dict[str, Any]

    def headline(self) -> dict[str, Any]:
        return {k: self.summary.get(k) for k in HEADLINE}


def run_cell(opts: RealOptions, cell: RealCell, workdir: str | Path, *, recipe: Recipe | None = None) -> CellResult:
    """Run ``cell.cell`` (TASK SOURCE TARGET VARIANT) on the models of ``opts.models`` and the cache in
    ``workdir/tasks/TASK``; ``recipe``: the part's :data:`~paw.bench.real.tasks.RECIPE` unless given."""
    require(opts, "models", "data")
    cell.check(opts.models)
    task, source, target, move = cell.cell
    workdir = Path(workdir)
    # stand-in LoRAs are not the ones the cached scores scored: those scores are kept as they are
    cache = Cache(workdir / "tasks" / task, keep_scores=cell.stand_in_loras)
    recipe = recipe or RECIPE
    if cell.stand_in_loras:
        _check_stand_ins(cache, source, target)
        recipe = replace(recipe, lora_steps=1)
    stand_ins = [f"lora-{n}" for n in (source, target)
                 if cell.stand_in_loras and not (cache.folder / f"lora-{n}.meta.json").is_file()]
    sides = {name: load_base(Path(opts.models) / name, opts.device) for name in (source, target)}
    train, test = load_task(opts.data, task, opts.seed)
    how = dict(recipe=recipe, seed=opts.seed)
    if move == "lora":   # the source's LoRA alone (trained unless cached): what the others start from
        _, seconds, report = own_lora(sides[source], train, cache, **how)
        out = {"seconds": seconds, "report": report}
    elif move == "main":
        out = run_direction(sides[source], sides[target], train, test, cache, n_boot=opts.n_boot, device=opts.device,
                            **how)
    else:
        out = run_variant(sides[source], sides[target], train, test, cache, move, n_boot=opts.n_boot,
                          device=opts.device, **how)
    for key in stand_ins:   # never left where the bench would take them for the real LoRAs
        shutil.rmtree(cache.folder / key, ignore_errors=True)
        (cache.folder / f"{key}.meta.json").unlink(missing_ok=True)
    out |= {"device": opts.device, "stand_in_loras": cell.stand_in_loras}
    path = workdir / f"variant-{task}-{move}-{source}-to-{target}.json"
    write_json(path, out)
    return CellResult(path, out)


def _check_stand_ins(cache: Cache, source: str, target: str) -> None:
    """Stand-in LoRAs need the four conditions' scores cached: nothing they would score may count."""
    needed = [f"score-{side}-{kind}" for side in (source, target) for kind in ("base", "lora")]
    missing = [k for k in needed if cache.found(k) is None]
    if missing:
        raise PawError(f"--stand-in-loras needs the cached scores {', '.join(missing)}", path=cache.folder)
