"""attncore tour: it runs, and the committed tutorial's deterministic tables are
what the code produces now."""

import os
import warnings

import pytest

from attncore import cli, teach, tour

TUTORIAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "tutorial.md")


@pytest.mark.parametrize("name,kwargs", [(name, full) for name, full, _, det, _ in
                                         tour.EXPERIMENTS if det])
def test_tutorial_tables_match_the_code(name, kwargs):
    with open(TUTORIAL) as f:
        text = f.read()
    table = tour.markdown_table(getattr(teach, name)(**kwargs))
    assert table in text, f"docs/tutorial.md is stale for {name}: rerun `attncore tour`"


def test_tour_quick_writes_tables_figures_and_tutorial(tmp_path, capsys):
    md = tmp_path / "tutorial.md"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(["tour", "--quick", "--out", str(tmp_path / "figs"),
                         "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    text = md.read_text()
    for name, *_ in tour.EXPERIMENTS:
        assert (tmp_path / "figs" / f"{name}.png").stat().st_size > 5_000
        assert f"attncore.teach.{name}(" in text and f"figs/{name}.png" in text
        assert out.count(f"{name}:") >= 1


def test_tutorial_prose_is_the_generators():
    with open(TUTORIAL) as f:
        text = f.read()
    assert text.startswith(tour.TUTORIAL_HEAD)
    for _, _, _, _, prose in tour.EXPERIMENTS:
        assert prose in text
