"""``paw transfer-lora`` end to end: files, determinism, one-line errors with exit code 2."""

from __future__ import annotations

import csv
import json

from paw.io.adapter import read_adapter


def _run(cli, lora, source, target, out, *extra):
    return cli("transfer-lora", "--adapter", lora, "--source-base", source, "--target-base", target,
               "--output", out, "--device", "cpu", *extra)


def test_writes_adapter_report_csv_and_plot_deterministically(cli, tmp_path, src, src_lora, drifted):
    first = _run(cli, src_lora, src, drifted, tmp_path / "a")
    assert first.exit_code == 0, first.stderr
    assert "transferred 21/21 modules (copy: 21)" in first.stdout
    second = _run(cli, src_lora, src, drifted, tmp_path / "b")
    assert second.exit_code == 0
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["README.md", "adapter_config.json", "adapter_model.safetensors", "similarity_vs_depth.png",
                     "transfer_report.csv", "transfer_report.json"]
    for name in names:
        if name not in ("transfer_report.json", "README.md"):  # they name their own output path in the command
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    card = (tmp_path / "a" / "README.md").read_text().replace("# a\n", "# b\n")
    assert card.replace(f"{tmp_path / 'a'} ", f"{tmp_path / 'b'} ") == (tmp_path / "b" / "README.md").read_text()
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(drifted)  # the target, not the source
    assert config["r"] == 4 and config["lora_alpha"] == 8
    report = json.loads((tmp_path / "a" / "transfer_report.json").read_text())
    assert report["command"].startswith("paw ") and report["inputs"]["target_base"]["path"] == str(drifted)
    rows = list(csv.DictReader(open(tmp_path / "a" / "transfer_report.csv")))
    assert len(rows) == 21 and {r["method"] for r in rows} == {"copy"}
    assert all(float(r["similarity_chance"]) < float(r["similarity"]) for r in rows)
    assert read_adapter(tmp_path / "a").r == 4


def test_refuses_unrelated_target_with_evidence(cli, tmp_path, src, src_lora, independent):
    res = _run(cli, src_lora, src, independent, tmp_path / "out")
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert line.startswith("error: target looks unrelated") and "for the other layers" in line and "--force" in line
    assert "\n" not in line and not (tmp_path / "out").exists()
    forced = _run(cli, src_lora, src, independent, tmp_path / "out", "--force")
    assert forced.exit_code == 0 and (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_bad_inputs_exit_2_with_one_line(cli, tmp_path, src, src_lora, troot):
    res = _run(cli, src_lora, src, src, tmp_path / "x", "--method", "lora-x", "--layer-map", "nope")
    assert res.exit_code == 2
    res = _run(cli, tmp_path, src, src, tmp_path / "y")
    assert res.exit_code == 2 and "adapter_config.json is missing" in res.stderr
    (tmp_path / "exists").mkdir()
    res = _run(cli, src_lora, src, src, tmp_path / "exists")
    assert res.exit_code == 2 and "already exists" in res.stderr
    bad_map = tmp_path / "map.json"
    bad_map.write_text('{"format": "something-else"}')
    res = _run(cli, src_lora, src, src, tmp_path / "z", "--vocab-map", bad_map)
    assert res.exit_code == 2 and "not a vocabulary mapping" in res.stderr
    wide = troot / "wide-src"  # built by test_transfer; build here if run alone
    if not wide.exists():
        from paw import zoo

        zoo.tiny_model(wide, "llama", seed=1, hidden_size=48, num_layers=3)
    res = _run(cli, src_lora, wide, src, tmp_path / "w")
    assert res.exit_code == 2 and "is not this adapter's base" in res.stderr
    res = _run(cli, src_lora, src, wide, tmp_path / "w", "--method", "copy")
    assert res.exit_code == 2 and "copy needs equal shapes" in res.stderr
    assert res.stderr.count("\n") == 1


def test_plot_tells_lora_x_from_copy(tmp_path, src, src_lora, drifted):
    """Both see the same related bases (top panel); only the norm panel shows lora-x dropping the update."""
    from paw.transfer.folder_pipeline import transfer_adapter
    from paw.transfer.plots import similarity_figure

    panels = {}
    for method in ("copy", "lora-x"):
        result = transfer_adapter(src_lora, src, drifted, tmp_path / method, method=method, device="cpu")
        report = json.loads((tmp_path / method / "transfer_report.json").read_text())
        sim_ax, norm_ax = similarity_figure(report).axes
        panels[method] = ([list(line.get_ydata()) for line in sim_ax.lines],
                          [list(line.get_ydata()) for line in norm_ax.lines if not line.get_label().startswith("_")])
        assert result.output == tmp_path / method
    norms = {m: [v for line in panels[m][1] for v in line] for m in panels}
    assert panels["copy"][0] == panels["lora-x"][0]  # same bases, same similarity
    assert min(norms["copy"]) == max(norms["copy"]) == 1.0
    assert max(norms["lora-x"]) < 0.9  # the projection keeps only part of every update
