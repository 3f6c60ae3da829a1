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
    assert _found_up_to_rounding(tour.markdown_table(res), text), (
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


def test_both_tutorials_quote_the_same_run():
    en, zh = _read("en"), _read("zh")
    for sec in tour.SECTIONS:  # the same tables, measured ones included, in both
        start = en.index(f"attncore.teach.{sec.name}(")
        table = en[en.index("\n|", start) + 1:en.index("\n\n", en.index("\n|", start))]
        assert table in zh, sec.name


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
             "flash_peak_bytes": 64 * n, "naive_over_flash": r} for n, r in ratios]
    return Result("crossover", "t", rows)


@pytest.mark.parametrize("lang", tour.LANGUAGES)
def test_the_crossover_narrative_states_what_the_table_shows(lang):
    crossover = next(s for s in tour.SECTIONS if s.name == "crossover")
    never = crossover.found(_crossover([(64, 2.05), (256, 1.15), (1024, 0.996), (4096, 1.42)]),
                            lang)
    sometimes = crossover.found(_crossover([(64, 0.5), (256, 0.9), (1024, 1.3)]), lang)
    if lang == "en":
        assert "clearly faster (ratio below 0.95) at no n" in never
        assert "about even (0.95–1.05) at n = 1024" in never
        assert "0.996 " not in never and "1.00 (n = 1024) to 2.05 (n = 64)" in never
        assert "at n = 64, 256" in sometimes and "cheap enough to win" in sometimes
    else:
        assert "没有哪个 n 上朴素版明显更快" in never and "打平（0.95–1.05）的 n：1024" in never
        assert "n：64, 256" in sometimes and "足以胜出" in sometimes


def test_the_family_narrative_is_the_measured_ratios():
    rows = [{"n": n, "member": m, "pairs": 0, "seconds": s}
            for n, m, s in ((256, "full", 1.0), (256, "linear", 2.0),
                            (1024, "full", 16.0), (1024, "linear", 8.0))]
    family = next(s for s in tour.SECTIONS if s.name == "family")
    text = family.found(Result("family", "t", rows), "en")
    assert "linear: 0.50× full's time, 4.0× slower from n = 256 to 1024" in text
    assert "full: 1.00× full's time, 16.0× slower" in text


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
