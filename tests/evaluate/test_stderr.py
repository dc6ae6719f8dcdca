"""``paw eval``'s stderr is lm-eval's: the sample standard deviation of the 0/1 outcomes (n - 1) over sqrt(n)."""

from __future__ import annotations

import math

import pytest

from paw.evaluate.items import MCItem
from paw.evaluate.mc import summarize
from paw.evaluate.stats import mean_stderr


def test_mean_stderr_by_hand():
    # [1, 1, 1, 0]: mean 3/4, squared deviations 3 x 1/16 + 9/16 = 12/16, / (n - 1) = 1/4, / n = 1/16
    assert mean_stderr([1, 1, 1, 0]) == pytest.approx(0.25)
    assert mean_stderr([1, 0]) == pytest.approx(0.5)             # var 1/2, / 2 -> 1/4, sqrt 1/2
    assert mean_stderr([0.5, 1.5, 2.5]) == pytest.approx(math.sqrt(1 / 3))   # var 1, / 3
    assert mean_stderr([1]) is None and mean_stderr([]) is None   # lm-eval prints N/A


def test_summarize_reports_lm_evals_stderr_not_the_binomial_one():
    items = [MCItem(f"q{i}", (" a", " b"), 0) for i in range(10)]
    # items 0..6 pick choice 0 (right), 7..9 pick choice 1 (wrong): p = 0.7, n = 10
    scores = [s for i in range(10) for s in (((-1.0, 1), (-2.0, 1)) if i < 7 else ((-2.0, 1), (-1.0, 1)))]
    m = summarize(items, scores)
    assert m["accuracy"] == pytest.approx(0.7)
    assert m["stderr"] == pytest.approx(math.sqrt(0.7 * 0.3 / 9))   # 0.152753, lm-eval's acc_stderr
    assert m["stderr"] != pytest.approx(math.sqrt(0.7 * 0.3 / 10))  # 0.144914, the binomial one
    assert summarize(items[:1], scores[:2])["stderr"] is None


def test_cli_prints_the_stderr_and_n_a_for_one_item(cli, tiny_llama, tmp_path):
    import json

    from paw.evaluate.synthetic import fact_task
    from paw.io.mcdata import write_items

    data = write_items(tmp_path / "quiz.jsonl", fact_task("colour", n=6, seed=0))
    result = cli("eval", "--model", tiny_llama, "--data", data, "--output", tmp_path / "m.json")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())["metrics"]
    p = metrics["accuracy"]
    assert metrics["stderr"] == pytest.approx(math.sqrt(p * (1 - p) / 5))
    assert f"{p:.4f} ± {metrics['stderr']:.4f}   (n=6)" in result.stdout
    one = cli("eval", "--model", tiny_llama, "--data", data, "--limit", "1")
    assert one.exit_code == 0 and "± N/A   (n=1)" in one.stdout, one.stdout + one.stderr
