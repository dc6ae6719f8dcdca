"""Options first for ``paw demo``: ``--config FILE.yaml`` gives its knobs, a typed flag wins, a bad value is named."""

from __future__ import annotations

from types import SimpleNamespace


def test_demo_reads_a_config_file_and_typed_flags_win(cli, tmp_path, monkeypatch):
    import paw.demo

    seen = {}

    def run_demo(outdir, *, quick, overwrite, on_step, on_begin):   # the tour itself is tested in test_demo
        seen.update(outdir=outdir, quick=quick, overwrite=overwrite)
        return SimpleNamespace(evals={}, seconds=1.0, outdir=outdir, summary_path=outdir / "summary.json")

    monkeypatch.setattr(paw.demo, "run_demo", run_demo)
    config = tmp_path / "demo.yaml"
    config.write_text(f"outdir: {tmp_path / 'from-file'}\nquick: false\noverwrite: true\n")
    result = cli("demo", "--config", config, "--quick")                     # the typed --quick wins
    assert result.exit_code == 0, result.stderr
    assert seen == {"outdir": tmp_path / "from-file", "quick": True, "overwrite": True}
    result = cli("demo", "--outdir", tmp_path / "typed")
    assert result.exit_code == 0 and seen == {"outdir": tmp_path / "typed", "quick": False, "overwrite": False}
    config.write_text("quick: sometimes\n")
    bad = cli("demo", "--config", config)
    assert bad.exit_code == 2 and "quick" in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr
