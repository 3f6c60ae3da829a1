"""attncore tour: it runs, writes the tutorial in English and Chinese from one
run, its figures are large enough for a slide, and the committed tutorials'
deterministic tables are what the code produces now."""

import os
import re
import struct
import warnings

import pytest

from attncore import cli, teach, tour
from attncore.teach.result import Result
from helpers import not_emulated

# slow: the tour's experiments, run for real (`pytest -m slow`)
pytestmark = [pytest.mark.slow,
              not_emulated("the tour's experiments are sized for native speed (minutes each "
                           "there)")]

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
TUTORIALS = {"en": os.path.join(DOCS, "tutorial.md"), "zh": os.path.join(DOCS, "tutorial.zh.md")}


def _png_size_and_dpi(path):
    """(width, height, dots per inch) from a PNG's IHDR and pHYs chunks."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    at = data.find(b"pHYs")
    dpi = None
    if at > 0:
        ppu_x, _, unit = struct.unpack(">IIB", data[at + 4:at + 13])
        dpi = ppu_x * 0.0254 if unit == 1 else None
    return width, height, dpi


def _read(lang):
    with open(TUTORIALS[lang], encoding="utf-8") as f:
        return f.read()


# A number below 1e-12 in a deterministic section is a rounding error (a row sum's
# distance from 1, |Q·Kᵀ − x·W_Q·W_Kᵀ·xᵀ|): its last bits depend on the ISA that ran
# (the exp, the order of a SIMD sum), so it matches any number below 1e-12 there,
# 0 included; every other number must match digit for digit.
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_TINY = 1e-12


def _found_up_to_rounding(expected, text):
    pattern, at = [], 0
    for m in _NUMBER.finditer(expected):
        pattern.append(re.escape(expected[at:m.start()]))
        tiny = abs(float(m.group())) < _TINY
        pattern.append(f"({_NUMBER.pattern})" if tiny else re.escape(m.group()))
        at = m.end()
    pattern.append(re.escape(expected[at:]))
    return any(all(abs(float(g)) < _TINY for g in m.groups())
               for m in re.finditer("".join(pattern), text))


def test_only_rounding_errors_may_differ():
    row = "| max \\|Σ_j p_ij − 1\\| | {} | and 8.349 |"
    assert _found_up_to_rounding(row.format("1.11e-16"), row.format("0"))
    assert _found_up_to_rounding(row.format("0"), row.format("2.665e-15"))
    assert not _found_up_to_rounding(row.format("0"), row.format("3e-05"))
    changed = row.format("1.11e-16").replace("8.349", "8.35")
    assert not _found_up_to_rounding(row.format("1.11e-16"), changed)


@pytest.mark.parametrize("lang", tour.LANGUAGES)
@pytest.mark.parametrize("sec", [s for s in tour.SECTIONS if s.deterministic], ids=lambda s: s.name)
def test_tutorial_tables_match_the_code(sec, lang):
    res = getattr(teach, sec.name)(**sec.full)
    text = _read(lang)
    assert _found_up_to_rounding(tour.markdown_table(res, lang), text), (
        f"docs/tutorial{'' if lang == 'en' else '.zh'}.md is stale for {sec.name}: rerun "
        "`attncore tour --markdown docs/tutorial.md --markdown-zh docs/tutorial.zh.md --out docs/tour`")
    if sec.found:  # the sentences quoting a deterministic run's numbers are today's too
        assert _found_up_to_rounding(sec.found(res, lang), text), sec.found(res, lang)


@pytest.mark.parametrize("lang", tour.LANGUAGES)
def test_tutorial_prose_is_the_generators(lang):
    text = _read(lang)
    assert text.startswith(tour.TUTORIAL_HEAD[lang])
    for sec in tour.SECTIONS:
        assert f"## {sec.title[lang]}\n\n{sec.prose[lang]}" in text
        assert f"![{sec.name}](tour/{sec.name}.png)" in text
    if lang == "zh":  # translated, not copied: every heading carries Chinese
        for sec in tour.SECTIONS:
            assert any("\u4e00" <= ch <= "\u9fff" for ch in sec.title["zh"]), sec.name
            assert sec.prose["zh"] != sec.prose["en"]


def _tables(text):
    """Each section's table in a tutorial: name -> its Markdown lines."""
    out = {}
    for sec in tour.SECTIONS:
        start = text.index(f"attncore.teach.{sec.name}(")
        at = text.index("\n|", start) + 1
        out[sec.name] = text[at:text.index("\n\n", at)]
    return out


def test_both_tutorials_quote_the_same_run():
    en, zh = _tables(_read("en")), _tables(_read("zh"))
    for name, table in en.items():  # the same numbers, measured ones included, in both
        rows, rows_zh = table.splitlines()[2:], zh[name].splitlines()[2:]  # below the header
        assert len(rows) == len(rows_zh), name
        for row, row_zh in zip(rows, rows_zh):
            for cell, cell_zh in zip(row.split(" | "), row_zh.split(" | ")):
                if not re.sub(r"[\[\],| ]", "", _NUMBER.sub("", cell)):
                    assert cell == cell_zh, (name, cell, cell_zh)  # a number, as it is
        assert table.count("\n") == zh[name].count("\n"), name


# Latin words a Chinese table may keep: names of code, formats and functions
_KEPT = {"softmax", "attncore", "attention", "GQA", "MHA", "MQA", "DRAM", "exp", "max", "min",
         "diag", "float64", "lse", "GB", "GFLOP", "FLOPs", "batch", "rev", "teach", "scores",
         "merge", "block_k", "return_lse", "core", "inf", "nan",
         "float", "bfloat", "int"}  # the dtypes' names (float32, bfloat16, int8), as in the prose


def test_the_chinese_tables_are_in_chinese():
    for name, table in _tables(_read("zh")).items():
        for line in table.splitlines()[:1] + table.splitlines()[2:]:
            for cell in line.strip("|").split(" | "):
                words = set(re.findall(r"[A-Za-z]{3,}", cell)) - _KEPT
                cjk = any("\u4e00" <= ch <= "\u9fff" for ch in cell)
                assert not words or cjk, (name, cell)


def test_committed_figures_are_large_enough_for_a_slide():
    for sec in tour.SECTIONS:
        width, _, dpi = _png_size_and_dpi(os.path.join(DOCS, "tour", f"{sec.name}.png"))
        assert width >= 1200, (sec.name, width)
        assert dpi is not None and dpi >= 150, (sec.name, dpi)


def test_tour_quick_writes_tables_figures_and_both_tutorials(tmp_path, capsys):
    md, md_zh = tmp_path / "tutorial.md", tmp_path / "tutorial.zh.md"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(["tour", "--quick", "--out", str(tmp_path / "figs"),
                         "--markdown", str(md), "--markdown-zh", str(md_zh)]) == 0
    out = capsys.readouterr().out
    text, text_zh = md.read_text(), md_zh.read_text(encoding="utf-8")
    for sec in tour.SECTIONS:
        width, _, dpi = _png_size_and_dpi(tmp_path / "figs" / f"{sec.name}.png")
        assert width >= 1200 and dpi >= 150, (sec.name, width, dpi)
        for t, lang in ((text, "en"), (text_zh, "zh")):
            assert f"attncore.teach.{sec.name}(" in t and f"figs/{sec.name}.png" in t
            assert f"## {sec.title[lang]}" in t
        assert out.count(f"{sec.name}:") >= 1


def _crossover(ratios):
    rows = [{"n": n, "naive_seconds": r, "flash_seconds": 1.0, "naive_peak_bytes": 4 * n * n,
             "flash_peak_bytes": 64 * n, "naive_over_flash": r, "ratio_lowest": lo,
             "ratio_highest": hi} for n, r, lo, hi in ratios]
    return Result("crossover", "t", rows, {"rounds": 7})


@pytest.mark.parametrize("lang", tour.LANGUAGES)
def test_the_crossover_narrative_calls_only_what_every_round_shows(lang):
    crossover = next(s for s in tour.SECTIONS if s.name == "crossover")
    text = crossover.found(_crossover([(64, 0.5, 0.45, 0.6), (256, 0.98, 0.9, 1.1),
                                       (1024, 1.3, 1.2, 1.5)]), lang)
    if lang == "en":
        assert "Naive was faster in every round at n = 64;" in text
        assert "blockwise in every round at n = 1024;" in text
        assert "cannot call it, at n = 256" in text
        assert "256: 0.98 (0.90–1.10)" in text
    else:
        assert "每一轮都是朴素版更快的 n：64；" in text and "更快的 n：1024；" in text
        assert "分不出胜负的 n：256" in text


def test_the_family_narrative_is_the_measured_ratios():
    rows = [{"n": n, "member": m, "pairs": p, "seconds": s, "spread": 0.05}
            for n, m, p, s in ((256, "full", 9, 1.0), (256, "causal", 5, 0.6),
                               (256, "window 256", 5, 0.7), (256, "linear", 0, 2.0),
                               (1024, "full", 9, 16.0), (1024, "causal", 5, 9.0),
                               (1024, "window 256", 3, 4.0), (1024, "linear", 0, 8.0))]
    family = next(s for s in tour.SECTIONS if s.name == "family")
    text = family.found(Result("family", "t", rows), "en")
    assert "linear: 0.50× full's time, 4.0× slower from n = 256 to 1024" in text
    assert "full: 1.00× full's time, 16.0× slower" in text
    # the same work at n = 256: the narrative says the gap is noise, with the spread
    assert "At n = 256 the window keeps every causal pair" in text and "5 %" in text


def test_chinese_labels_render_with_a_cjk_font(tmp_path):
    from attncore.teach import live

    if live.cjk_font() is None:
        pytest.skip("no CJK font installed (tools/install-docs-tools.sh installs one); "
                    "the figures then label the words in English")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph is a UserWarning
        for res in (teach.sentence(), teach.causal_row()):
            ax = res.plot()
            labels = [t.get_text() for t in ax.get_xticklabels()]
            assert "cat\n猫" in labels and "it\n它" in labels
            ax.figure.savefig(tmp_path / f"{res.name}.png", dpi=100)
            plt.close(ax.figure)


def test_a_bar_inside_a_cell_does_not_split_the_row():
    res = Result("x", "t", [{"quantity": "max |S − Sᵀ|", "value": 1.5}])
    table = tour.markdown_table(res).splitlines()
    assert table[2] == "| max \\|S − Sᵀ\\| | 1.5 |"
    assert all(line.replace("\\|", "").count("|") == 3 for line in table)
