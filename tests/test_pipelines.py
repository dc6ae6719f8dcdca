"""Library pipelines called directly write the same bytes as the ``paw`` commands that wrap them.

Only the provenance's ``command`` differs: the CLI records the arguments it parsed, a library call
records the function and its arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _same_folders(a: Path, b: Path) -> None:
    import json

    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    differ = [name for name in fa if fa[name] != fb[name] and name != "README.md"]
    if "README.md" in fa:  # the model card: equal but for its title (the output's name) and its command
        assert _card_without_command(fa["README.md"], a.name) == _card_without_command(fb["README.md"], b.name)
    for name in differ:  # the provenance JSON: equal but for its command
        ja, jb = json.loads(fa[name]), json.loads(fb[name])
        assert ja.pop("command").startswith("paw ") and jb.pop("command").startswith("paw.")
        assert ja == jb, name


def _card_without_command(card: bytes, title: str) -> str:
    head, rest = card.decode().replace(f"# {title}\n", "# TITLE\n").split("## How it was made", 1)
    command = rest.split("```bash\n", 1)[1].split("\n```", 1)[0]
    assert command.startswith(("paw ", "paw."))
    return head + rest.replace(command, "COMMAND")


def test_transplant_tokenizer_matches_the_cli(cli, tiny_llama, tiny_qwen, tmp_path):
    from paw.vocab.options import TransplantOptions
    from paw.vocab.pipelines import transplant_tokenizer

    res = cli("transplant-tokenizer", "--model", tiny_llama, "--tokenizer", tiny_qwen, "-o", tmp_path / "cli", "--no-check",
              "--device", "cpu")
    assert res.exit_code == 0, res.stderr
    result = transplant_tokenizer(TransplantOptions(model=tiny_llama, tokenizer=tiny_qwen, output=tmp_path / "lib",
                                                    check=False))
    _same_folders(tmp_path / "cli", tmp_path / "lib")
    assert result.output == tmp_path / "lib" and result.semantic_check is None
    assert sum(result.coverage.values()) == result.target_size == result.record["rows"]["after"]
    assert result.coverage["exact"] > 0 and result.record["methods"] == ["exact", "decompose"]


def test_extend_tokenizer_matches_the_cli(cli, tiny_llama, tmp_path):
    from paw.vocab.extend_pipeline import extend_tokenizer
    from paw.vocab.options import ExtendOptions

    res = cli("extend-tokenizer", "--model", tiny_llama, "--output", tmp_path / "cli", "--tokens", " zebra", "PAW")
    assert res.exit_code == 0, res.stderr
    result = extend_tokenizer(ExtendOptions(model=tiny_llama, output=tmp_path / "lib", tokens=(" zebra", "PAW")))
    _same_folders(tmp_path / "cli", tmp_path / "lib")
    cli_lines = res.stdout.splitlines()
    assert result.lines()[:-1] == cli_lines[:-1] and result.lines()[-1] == f"wrote {tmp_path / 'lib'}"
    assert result.rows == result.manifest["rows"] > result.old_rows


def test_resize_base_matches_the_cli(cli, tiny_llama, tmp_path):
    from paw.adaptercheck.options import ResizeOptions
    from paw.adaptercheck.pipeline import check_adapter, resize_base
    from paw.vocab.extend_pipeline import extend_tokenizer
    from paw.vocab.options import ExtendOptions
    from tests.extend.conftest import make_adapter

    ext = extend_tokenizer(ExtendOptions(model=tiny_llama, output=tmp_path / "ext", tokens=(" zebra", "PAW")))
    new_ids = sorted(i for route in ext.manifest["new_tokens"].values() for i in route.values())
    adapter = make_adapter(ext.output, tmp_path / "adapter", kind="save", new_ids=new_ids, tokenizer=True)
    report = check_adapter(adapter, tiny_llama)
    assert not report.ok and report.vocab_mismatch and report.expected_vocab == ext.rows
    res = cli("adapter", "resize-base", "--adapter", adapter, "--base", tiny_llama, "--output", tmp_path / "cli",
              "--device", "cpu")
    assert res.exit_code == 0, res.stderr
    result = resize_base(ResizeOptions(adapter=adapter, base=tiny_llama, output=tmp_path / "lib"))
    _same_folders(tmp_path / "cli", tmp_path / "lib")
    assert (result.old_rows, result.rows) == (ext.old_rows, ext.rows)
    assert set(result.rows_from_adapter) == {"model.embed_tokens.weight", "lm_head.weight"}
    assert check_adapter(adapter, result.output).ok


def test_pipelines_refuse_an_existing_output_before_reading(tiny_llama, tmp_path):
    from paw.errors import PawError
    from paw.vocab.extend_pipeline import extend_tokenizer
    from paw.vocab.options import ExtendOptions

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(PawError, match="exists"):
        extend_tokenizer(ExtendOptions(model=tmp_path / "no-such-model", output=tmp_path / "out", tokens=("PAW",)))
    assert (tmp_path / "out" / "keep.txt").read_text() == "x"
