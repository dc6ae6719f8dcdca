"""``paw bench real --cell TASK SOURCE TARGET VARIANT``: one cell of the part 'tasks' on its own, on the bench's
cache, with the bench's own moves, its summary beside the cache (what a GPU lease runs, one process a cell)."""

from __future__ import annotations

import json
import shutil

import pytest

from paw.bench.real import cell as cell_module
from paw.bench.real import tasks as real_tasks
from paw.bench.real.cache import Cache
from paw.bench.real.cell import run_cell
from paw.bench.real.options import RealCell, RealOptions
from paw.errors import PawError
from tests.bench.real.conftest import flat, write_raw

RECIPE = real_tasks.Recipe(lora_rank=4, lora_alpha=8, lora_steps=30, lora_batch=8, lora_lr=1e-2, train_inputs=12,
                           distill_steps=10)


@pytest.fixture(scope="module")
def data(pair):
    """A commonsense folder whose ARC-Easy is the pair's 12 facts, for training and testing alike."""
    _, items, root = pair
    write_raw(root / "data", "arc-easy_train", flat(items))
    write_raw(root / "data", "arc-easy_test", flat(items))
    return root / "data"


def _options(root, data) -> RealOptions:
    return RealOptions(models=str(root), data=str(data), device="cpu", n_boot=50)


def test_a_cell_is_the_bench_s_own_move_on_its_cache(pair, data, tmp_path):
    """lora, main and a variant, each alone: the summary written beside the cache is what the bench's own
    functions give on that cache (the main move again: every score and adapter reused, nothing made anew)."""
    sides, items, root = pair
    opts = _options(root, data)
    lora = run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "lora")), tmp_path, recipe=RECIPE)
    assert lora.path == tmp_path / "variant-arc-easy-lora-a-to-b.json"
    assert set(lora.summary) == {"seconds", "report", "device", "stand_in_loras"}
    assert (tmp_path / "tasks" / "arc-easy" / "lora-a.meta.json").is_file()     # the bench's cache layout
    main = run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "main")), tmp_path, recipe=RECIPE)
    again = real_tasks.run_direction(sides["a"], sides["b"], items, items, Cache(tmp_path / "tasks" / "arc-easy"),
                                     recipe=RECIPE, n_boot=50)
    assert main.summary["accuracy"] == again["accuracy"] and main.summary["kept"] == again["kept"]
    assert json.loads(main.path.read_text()) == json.loads(json.dumps(main.summary))
    assert (main.summary["device"], main.summary["stand_in_loras"]) == ("cpu", False)
    control = run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "base-teacher")), tmp_path, recipe=RECIPE)
    assert control.path.name == "variant-arc-easy-base-teacher-a-to-b.json"
    assert control.headline()["vs_main"]["difference"] == pytest.approx(
        main.summary["accuracy"]["target + moved LoRA"]["mean"]
        - control.summary["accuracy"]["target + moved LoRA"]["mean"])


def test_stand_in_loras_only_for_the_control_and_only_with_the_scores_cached(pair, data, tmp_path):
    """A work folder with the four conditions' scores and no adapters (a GPU lease): one-step LoRAs stand in
    for the control's, never outlive the cell, and leave the cached scores as they were."""
    _, _, root = pair
    opts = _options(root, data)
    with pytest.raises(PawError, match="base-teacher control only"):
        run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "token-focus"), stand_in_loras=True), tmp_path)
    with pytest.raises(PawError, match="needs the cached scores score-a-base, score-a-lora, score-b-base"):
        run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "base-teacher"), stand_in_loras=True), tmp_path)
    assert not (tmp_path / "tasks" / "arc-easy").exists() or not any((tmp_path / "tasks" / "arc-easy").iterdir())
    run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "main")), tmp_path, recipe=RECIPE)
    folder = tmp_path / "tasks" / "arc-easy"
    for name in ("a", "b"):   # the adapters (and their training's state) did not travel, their scores did
        shutil.rmtree(folder / f"lora-{name}")
        shutil.rmtree(folder / f"lora-{name}-work")
        (folder / f"lora-{name}.meta.json").unlink()
    scores = {p.name: p.read_text() for p in folder.glob("score-*.json")}
    out = run_cell(opts, RealCell(cell=("arc-easy", "a", "b", "base-teacher"), stand_in_loras=True), tmp_path,
                   recipe=RECIPE)
    assert out.summary["stand_in_loras"] is True and out.summary["vs_main"] is not None
    assert not list(folder.glob("lora-a*")) and not list(folder.glob("lora-b.*")) and not (folder / "lora-b").exists()
    assert all((folder / name).read_text() == text for name, text in scores.items())


def test_the_cell_flags_are_checked_before_any_work(cli, pair, data, tmp_path):
    _, _, root = pair
    common = ("--models", root, "--data", data, "--workdir", tmp_path, "--device", "cpu")
    for args, says in ((("--cell", "arc-easy", "a", "b"), "--cell takes TASK SOURCE TARGET VARIANT, not 3 value(s)"),
                       (("--cell", "mmlu", "a", "b", "main"), "--cell: unknown task 'mmlu'"),
                       (("--cell", "piqa", "a", "b", "dance"), "--cell: unknown variant 'dance'; choose from lora, "
                                                               "main, base-teacher"),
                       (("--cell", "piqa", "a", "zz", "main"), "--cell: no model folder zz/ here"),
                       (("--stand-in-loras",), "--stand-in-loras goes with --cell"),
                       (("--cell", "piqa", "a", "b", "main", "--check-device", "scores"), "one at a time")):
        bad = cli("bench", "real", *args, *common)
        assert bad.exit_code == 2 and says in bad.stderr, (args, bad.stderr)
    missing = cli("bench", "real", "--cell", "piqa", "a", "b", "main", "--models", root, "--data", data)
    assert missing.exit_code == 2 and "missing option '--workdir'" in missing.stderr
    assert not any(tmp_path.iterdir())


def test_the_command_runs_a_cell_from_a_config_file(cli, pair, data, tmp_path, monkeypatch):
    """The cell as the command runs it: the bench's recipe (here a small one), the headline printed."""
    _, _, root = pair
    monkeypatch.setattr(cell_module, "RECIPE", RECIPE)
    config = tmp_path / "cell.yaml"
    config.write_text(f"cell: [arc-easy, b, a, lora]\nmodels: {root}\ndata: {data}\nworkdir: {tmp_path / 'w'}\n")
    done = cli("bench", "real", "--config", config, "--device", "cpu")
    assert done.exit_code == 0, done.stderr
    path = tmp_path / "w" / "variant-arc-easy-lora-b-to-a.json"
    assert done.stdout.endswith(f"wrote {path}\n")
    assert json.loads(done.stdout[:done.stdout.rindex("wrote")]) == dict.fromkeys(cell_module.HEADLINE)
    assert json.loads(path.read_text())["report"]["train_loss_end"] < json.loads(path.read_text())["report"][
        "train_loss_start"]
