"""``paw bench real --check-device scores,distill`` on tiny models in the real models' places: the rows a lease's
log shows, and the distillation's recorded teacher scores equal to the same pairs scored directly."""

from __future__ import annotations

import math
import random

import pytest
import torch

from paw.bench.real.device_check import SCORE_ITEMS, check_device
from paw.bench.real.options import GEMMA, SMOL, RealCheck, RealOptions
from tests.bench.real.conftest import flat, write_raw


@pytest.fixture(scope="module")
def real_like(tmp_path_factory):
    """Tiny models named as the real ones (Gemma-3's stand-in with one key/value head and another tokenizer), and a
    commonsense folder with 1,040 PIQA items (1,000 of them its test part) and an ARC-Easy of invented facts."""
    from paw import zoo
    from paw.evaluate.synthetic import fact_task

    root = tmp_path_factory.mktemp("device-check")
    zoo.tiny_model(root / "models" / SMOL, "llama", seed=0, hidden_size=32, num_layers=2)
    zoo.tiny_model(root / "models" / GEMMA, "llama", seed=1, hidden_size=32, num_layers=2, num_kv_heads=1,
                   tokenizer_kind="sentencepiece-bpe")
    rng = random.Random(0)
    write_raw(root / "data", "piqa_validation", [{"goal": f"To keep item {i} dry,", "sol1": " cover it.",
                                                  "sol2": " soak it.", "label": rng.randrange(2)} for i in range(1040)])
    facts = fact_task("colour", n=16, seed=0)
    write_raw(root / "data", "arc-easy_train", flat(facts))
    write_raw(root / "data", "arc-easy_test", flat(facts))
    return RealOptions(models=str(root / "models"), data=str(root / "data"), device="cpu")


def test_on_the_cpu_each_check_gives_its_cpu_row_and_the_teacher_path_agrees(real_like):
    found = check_device(real_like, RealCheck(check_device=("scores", "distill")))
    assert list(found.scores) == [GEMMA, SMOL]
    for rows in found.scores.values():
        [row] = rows   # the device is the CPU: its own row only
        assert row.label == "cpu, batch 8" and len(row.scores) == 2 * SCORE_ITEMS
        assert 0 <= row.accuracy <= 1 and math.isfinite(row.sentence_loss) and row.sentence_loss > 0
    [row] = found.distill
    assert row.device == "cpu" and len(row.recorded) == len(row.direct) > 0
    assert row.recorded == pytest.approx(row.direct, abs=1e-4)   # what the distillation recorded is the teacher's
    lines = found.lines()
    assert lines[0] == f"== {GEMMA}" and lines[1].startswith("cpu, batch 8") and "max |dLL| vs cpu    0.0000" in lines[1]
    assert lines[-2] == "== distill path (ARC-Easy, Gemma-3 base teacher)"
    assert lines[-1].startswith("cpu   recorded [") and "max |dLL| vs cpu direct: recorded 0.0000, direct 0.0000" \
        in lines[-1]


def test_the_command_runs_the_checks_asked_for(real_like, cli):
    done = cli("bench", "real", "--check-device", "scores", "--models", real_like.models, "--data", real_like.data,
               "--device", "cpu")
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["==", "cpu,", "==", "cpu,"] and lines[2] == f"== {SMOL}"
    bad = cli("bench", "real", "--check-device", "scores,dance", "--models", real_like.models, "--data", real_like.data)
    assert bad.exit_code == 2 and "--check-device: unknown check 'dance'; choose from scores, distill" in bad.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_scores_as_the_cpu_does_in_every_guarded_setting(real_like):
    """The check's own code on the real kernels: guarded rows agree with the CPU, and so does the teacher path."""
    from dataclasses import replace

    found = check_device(replace(real_like, device="cuda"), RealCheck(check_device=("scores", "distill")))
    for rows in found.scores.values():
        assert [r.label for r in rows] == ["cpu, batch 8", "cuda, batch 8, unguarded", "cuda, batch 1", "cuda, batch 8",
                                           "cuda, batch 8, math sdpa", "cuda, batch 8, eager"]
        for row in rows[2:]:
            assert row.scores == pytest.approx(rows[0].scores, abs=1e-2), row.label
    cpu, cuda = found.distill
    assert cuda.device == "cuda" and cuda.recorded == pytest.approx(cpu.direct, abs=1e-2)
