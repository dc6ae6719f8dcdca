"""paw.io.reports: CSV cells, JSON and figures that are byte-identical run after run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from paw.errors import PawError
from paw.io.reports import format_value, json_safe, save_figure, write_csv, write_json


@pytest.mark.parametrize(("value", "text"), [(0.1, "0.1"), (1e-20, "1e-20"), (float("nan"), "nan"),
                                             (float("-inf"), "-inf"), (3, "3"), (None, ""), (True, "true"),
                                             (np.float32(0.5), "0.5"), ("a,b", "a,b")])
def test_format_value(value, text):
    assert format_value(value) == text


def test_write_csv_rows_as_dicts_or_sequences(tmp_path):
    path = write_csv(tmp_path / "t.csv", [{"a": 1, "b": 0.25}, [2, "x,y"]], ["a", "b"])
    assert path.read_text() == 'a,b\n1,0.25\n2,"x,y"\n'
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # readable by others, like a plain open
    with pytest.raises(PawError, match="lacks column"):
        write_csv(tmp_path / "bad.csv", [{"a": 1}], ["a", "b"])
    assert not (tmp_path / "bad.csv").exists()


def test_json_nan_becomes_null(tmp_path):
    assert json_safe({"x": [1.0, math.nan], "y": {"z": math.inf}}) == {"x": [1.0, None], "y": {"z": None}}
    path = write_json(tmp_path / "s.json", {"b": 1, "a": math.nan})
    assert json.loads(path.read_text()) == {"a": None, "b": 1}
    assert path.read_text().index('"a"') < path.read_text().index('"b"')  # sorted keys


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
def test_figures_are_byte_identical(tmp_path, suffix):
    from matplotlib.figure import Figure

    def draw():
        fig = Figure(figsize=(3, 2))
        fig.subplots().bar(["a", "b"], [1.0, 2.0])
        return fig

    first = save_figure(draw(), tmp_path / f"one.{suffix}").read_bytes()
    second = save_figure(draw(), tmp_path / f"two.{suffix}").read_bytes()
    assert first == second and len(first) > 100
    with pytest.raises(PawError, match="unsupported figure format"):
        save_figure(draw(), tmp_path / "x.gif")
