"""The transfer benchmark's printed tables and plots show what was measured, not a grid of †."""

from __future__ import annotations

from paw.bench.report import markdown, plot, table


def _row(task, target, condition, acc=None, kept=None, status=("ok",), **extra):
    row = {"task": task, "target": target, "condition": condition, "status": list(status), **extra}
    if acc is not None:
        row["accuracy"] = {"mean": acc, "stderr": 0.05}
    if kept is not None:  # (value, ceiling_ok)
        row["kept"] = row["recovered"] = {"value": kept[0], "stderr": 0.1, "ceiling_ok": kept[1]}
    return row


def _results(methods=("auto", "copy")):
    """Two tasks: `facts` with one meaningful kept fraction, `rule` whose every fraction is †."""
    rows = []
    for task, ok in (("facts", True), ("rule", False)):
        for target in ("upgrade", "pruned"):
            rows += [_row(task, target, "base", 0.3), _row(task, target, "direct", 0.6)]
            good = ok and target == "upgrade"
            rows.append(_row(task, target, "auto", 0.55, kept=(0.8 if good else 0.1, good)))
            rows.append(_row(task, target, "copy", status=("n/a",), reasons=["copy needs equal shapes"])
                        if target == "pruned" else _row(task, target, "copy", 0.5, kept=(0.7, good)))
            rows.append(_row(task, target, "random", 0.3, kept=(0.0, good)))
    return {"settings": {"methods": list(methods)}, "rows": rows, "notes": {}}


def test_table_leaves_out_rows_and_columns_without_a_number():
    cells = {"upgrade": ["0.80 ± 0.10", "†", "n/a"], "pruned": ["†", "†", "n/a"], "grown": ["0.50", "–", "n/a"]}
    assert table("kept", ["auto", "copy", "structural"], cells) == [
        "### kept", "",
        "| target | auto |", "|---|---|", "| upgrade | 0.80 ± 0.10 |", "| grown | 0.50 |", "",
        "Left out, no number (†, n/a, –): target pruned; columns copy, structural.", ""]
    assert table("kept", ["auto"], {"upgrade": ["†"], "pruned": ["n/a"]}) == ["### kept: no number (†, n/a).", ""]
    two = table("distill", ["accuracy"], {("upgrade", "generic"): ["30.0 ± 5.0"]}, labels=("target", "inputs"))
    assert two[2:5] == ["| target | inputs | accuracy |", "|---|---|---|", "| upgrade | generic | 30.0 ± 5.0 |"]


def test_markdown_prints_numbers_and_explains_dagger_once():
    text = markdown(_results())
    assert "| upgrade | 0.80 ± 0.10 | 0.70 ± 0.10 | 0.00 ± 0.10 |" in text  # facts, kept: the measured row
    assert "Left out, no number (†, n/a): target pruned." in text
    assert "### Task `rule`: kept fraction (transfer − target base) / (source + LoRA − source base) ± stderr: " \
           "no number (†, n/a)." in text  # a table of † is one line
    assert "| pruned | † |" not in text and text.count("† the denominator's gain") == 1
    assert "[a, b]" not in text  # no interval cell, no note about intervals
    assert "| pruned | 30.0 ± 5.0 | 60.0 ± 5.0 | 55.0 ± 5.0 | n/a | 30.0 ± 5.0 |" in text  # accuracy stays whole


def test_distill_rows_that_did_not_run_are_one_line_each():
    results = _results(methods=("auto", "distill[inputs]", "distill[generic]"))
    for target in ("upgrade", "pruned"):
        results["rows"] += [
            _row("facts", target, "distill[inputs]", status=("n/a",), reasons=["no input has text", "the same"]),
            _row("facts", target, "distill[generic]", 0.4, kept=(0.2, False), cpu_seconds=2.25)]
    text = markdown(results)
    assert text.count("Not run") == 1
    assert "Not run, inputs `inputs` on every target: no input has text (and 1 more like it)." in text
    assert "| upgrade | generic | 40.0 ± 5.0 | 2.2 |" in text
    assert "Left out, no number (†): columns kept, recovered." in text


def test_kept_plot_draws_no_empty_panel():
    results = _results()
    for row in results["rows"]:
        if row["task"] == "rule" and "kept" in row:
            row["kept"]["value"] = None  # the source's gain is zero: no fraction at all
    fig = plot(results, "kept")
    assert [ax.get_title().split()[1] for ax in fig.axes] == ["facts"]
    assert "task rule" in fig._suptitle.get_text()
    for row in results["rows"]:
        row.pop("kept", None)
    fig = plot(results, "kept")
    assert len(fig.axes) == 1 and not fig.axes[0].axison  # one message, no empty axes
    assert "no kept fraction to draw" in fig.axes[0].texts[0].get_text()


def test_plot_leaves_out_a_method_with_no_bar():
    results = _results(methods=("auto", "copy", "distill[inputs]"))
    results["rows"].append(_row("facts", "upgrade", "distill[inputs]", status=("n/a",)))
    fig = plot(results, "kept")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["auto", "copy", "random"] and "distill[inputs]" in fig._suptitle.get_text()
