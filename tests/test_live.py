"""The callbacks of the live notebooks, driven with a few widget values: every
number equals what the kernels (and the reference) give for the same inputs."""

import math

import numpy as np
import pytest

import attncore
from attncore.teach import live


@pytest.mark.parametrize("query", range(6))
def test_sentence_rows_are_the_kernels(query):
    r = live.sentence(query)
    Q, K = live.SENTENCE_Q, live.SENTENCE_K
    np.testing.assert_allclose(r["scores"], Q @ K.T / 2, rtol=1e-12)  # ÷√4
    np.testing.assert_allclose(r["weights"], attncore.reference.softmax(Q @ K.T / 2), rtol=1e-12)
    np.testing.assert_allclose(r["weights"].sum(1), 1, rtol=1e-12)
    np.testing.assert_allclose(r["output"], r["mix_of_v"], rtol=1e-12)
    assert r["looks_at"] == r["tokens"][int(np.argmax(r["weights"][query]))]


def test_it_looks_back_at_the_cat_in_both_languages():
    assert live.sentence(4)["looks_at"] == "cat"
    zh = live.sentence(4, language="zh")
    assert zh["asker"] == "它" and zh["looks_at"] == "猫"


def test_a_words_own_key_is_not_always_what_it_looks_at_most():
    # given x's key as its query, a word scores x at |k_x|²/2, the most any query of
    # that length can (Cauchy–Schwarz); yet a longer key elsewhere can score higher:
    # the dot product is not the cosine
    for x in range(6):
        r = live.sentence(4, q=live.SENTENCE_K[x])
        k = live.SENTENCE_K[x]
        assert r["scores"][4, x] == pytest.approx(k @ k / 2)
    assert live.sentence(4, q=live.SENTENCE_K[3])["looks_at"] == "so"
    assert live.sentence(4, q=live.SENTENCE_K[1])["looks_at"] == "tired"  # not "was"


def test_sliders_and_one_hot_values():
    q = [0.0, 0.0, 3.0, 0.0]
    r = live.sentence(1, q=q, v_equals_k=False, v=np.eye(6))
    np.testing.assert_allclose(r["Q"][1], q)
    np.testing.assert_allclose(r["output"], r["row"], rtol=1e-12)  # one-hot V: the weights
    want = attncore.reference.attention(r["Q"], live.SENTENCE_K, np.eye(6))[1]
    np.testing.assert_allclose(r["output"], want, rtol=1e-12)


def test_sentence_refuses_bad_values():
    with pytest.raises(ValueError, match="query"):
        live.sentence(6)
    with pytest.raises(ValueError, match="language"):
        live.sentence(4, language="fr")


@pytest.mark.parametrize("dk", [2, 64, 512])
def test_scaling_variance_and_entropy(dk):
    raw, scaled = live.scaling(dk, scaled=False), live.scaling(dk, scaled=True)
    assert scaled["variance"] == pytest.approx(1, rel=0.25)
    assert raw["variance"] == pytest.approx(dk, rel=0.25)
    assert scaled["variance_theory"] == pytest.approx(1) and raw["variance_theory"] == dk
    np.testing.assert_allclose(scaled["weights"], attncore.reference.softmax(scaled["scores"]),
                               rtol=1e-12)
    assert scaled["max_entropy"] == pytest.approx(math.log(6))
    if dk >= 64:
        assert raw["entropy"] < scaled["entropy"] < scaled["max_entropy"]
    assert [c[0] for c in scaled["curve"]] == [2 ** e for e in range(1, 11)]


def test_scaling_of_the_article_512_wide_example():
    # the geometry article's random Q, K of width 512 ÷ √512: rows far from uniform
    r = live.scaling(512, scaled=True, positions=10)
    assert r["variance"] == pytest.approx(1, rel=0.2)
    assert 1.6 < r["entropy"] < 2.1 < math.log(10)


@pytest.mark.parametrize("shift", [0.0, 10.0, -3.3, -100.0])
def test_normalise_guards_and_softmax_alone_is_unmoved(shift):
    r = live.normalise(shift=shift)
    soft, divide, clip, lifted = r["rows"]
    np.testing.assert_allclose(soft["weights"], attncore.reference.softmax(r["scores"]),
                               rtol=1e-12)
    assert soft["valid"] and soft["changed_by_shift"] is False
    assert not divide["valid"]  # negative weights
    assert lifted["valid"] and lifted["changed_by_shift"] is False  # positive, sums to 1, blind
    if shift <= -3.0:  # every score ≤ 0 after the shift
        assert clip["weights_shifted"] is None and "undefined" in clip["undefined"]
        assert clip["changed_by_shift"] is None
    elif shift != 0:
        assert clip["changed_by_shift"]


def test_normalise_divide_by_a_zero_sum_is_undefined():
    r = live.normalise([1.0, -1.0, 0.5, -0.5, 0.0, 0.0])
    assert r["rows"][1]["weights"] is None and "sum to 0" in r["rows"][1]["undefined"]


def test_the_tour_normalizers_give_no_nan_warning_for_any_shift():
    import warnings

    from attncore import teach

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = teach.normalizers(shift=-3.3).table()
    clip = [r for r in rows if r["method"] == "clip negatives, divide"]
    assert all("undefined" in r["verdict"] for r in clip)


def test_attncore_notebook_finds_the_notebooks(capsys, monkeypatch, tmp_path):
    import os

    from attncore import cli

    (tmp_path / "docs" / "notebooks").mkdir(parents=True)
    (tmp_path / "docs" / "notebooks" / "01-x.ipynb").write_text("{}")
    monkeypatch.chdir(tmp_path)  # a checkout: docs/notebooks under the current folder
    assert cli.main(["notebook", "--dry-run"]) == 0
    out = capsys.readouterr().out.split()
    assert out[1:3] == ["-m", "jupyterlab"] and out[3].endswith(os.path.join("docs", "notebooks"))
    # JupyterLab refuses root without --allow-root: attncore adds it there
    assert ("--allow-root" in out) == (os.geteuid() == 0)
    # what attncore does not know goes to JupyterLab
    assert cli.main(["notebook", "--dry-run", "--port", "8899", "--no-browser"]) == 0
    out = capsys.readouterr().out.split()
    assert out[4:6] == ["--port", "8899"] and "--no-browser" in out
    assert out.count("--allow-root") == (os.geteuid() == 0)
    assert cli.main(["notebook", "--dry-run", "--allow-root"]) == 0
    assert capsys.readouterr().out.split().count("--allow-root") == 1
    with pytest.raises(SystemExit):  # only the notebook command passes arguments on
        cli.main(["info", "--port", "8899"])
    assert cli.main(["notebook", "--dir", str(tmp_path / "docs" / "notebooks"), "--dry-run"]) == 0
    assert cli.main(["notebook", "--dir", str(tmp_path / "nowhere"), "--dry-run"]) == 2

@pytest.mark.parametrize("query", range(6))
def test_causal_row_is_the_kernels(query):
    r = live.causal_row(query)
    np.testing.assert_allclose(r["weights"], r["kernel_weights"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(r["output"], r["kernel_output"], rtol=1e-12, atol=1e-15)
    assert r["weights"][r["kept"]].sum() == pytest.approx(1)
    assert (r["weights"][~r["kept"]] == 0).all()
    assert r["causal_denominator"] <= r["full_denominator"]


@pytest.mark.parametrize("n, block", [(1024, 128), (1000, 128), (300, 64), (128, 256)])
def test_causal_blocks_match_the_kernels_count(n, block):
    b = live.causal_blocks(n, block)
    nb = -(-n // block)
    assert b["whole"] + b["masked"] + b["skipped"] == nb * nb
    assert b["kernel_computed"] == b["whole"] + b["masked"]
    assert b["kernel_masked"] == b["masked"] == nb


@pytest.mark.parametrize("order", [(5, 4, 3, 2, 1, 0), (1, 0, 2, 3, 4, 5), (0, 1, 2, 3, 4, 5)])
def test_permutation_is_equivariant_not_invariant(order):
    r = live.permutation(order)
    assert r["equivariant"]
    assert r["unchanged_in_place"] == (list(order) == list(range(6)))
    with pytest.raises(ValueError, match="permutation"):
        live.permutation([0, 0, 1, 2, 3, 4])


@pytest.mark.parametrize("i, j", [(2, 1), (0, 3), (3, 0)])
def test_trace_follows_the_kernels(i, j):
    r = live.trace(i, j)
    np.testing.assert_allclose(r["contributions"].sum(0), r["output"], rtol=1e-12)
    assert r["steps"]["weight of (i, j)"] == pytest.approx(r["weights"][j])
    assert r["steps"]["dot product"] == pytest.approx(r["products"].sum())
    from attncore.teach.formula import _TRACE_K, _TRACE_V

    q = np.arange(12.0).reshape(4, 3) / 10  # edited entries
    edited = live.trace(i, j, q=q)
    want = attncore.reference.attention(q, np.asarray(_TRACE_K), np.asarray(_TRACE_V))[i]
    np.testing.assert_allclose(edited["output"], want, rtol=1e-12)
    with pytest.raises(ValueError, match="outside"):
        live.trace(4, 0)


def test_memory_counts_and_measures():
    r = live.memory(8192, heads=32, d_head=128, bytes_per_value=2, measure_n=1024)
    assert r["scores_bytes"] == 8192 ** 2 * 32 * 2
    assert r["kv_cache_bytes"] == 2 * 8192 * 32 * 128 * 2
    assert r["scores_bytes"] / r["kv_cache_bytes"] == pytest.approx(r["ratio"]) == 32
    assert r["measured"]["naive"] > 1024 * 1024 * 4 > r["measured"]["flash"] > 0
    with pytest.raises(ValueError):
        live.memory(0)


@pytest.mark.parametrize("h, kv, kind", [(4, 4, "MHA"), (4, 2, "GQA"), (4, 1, "MQA")])
def test_heads_maps_and_ledger(h, kv, kind):
    r = live.heads(h, kv, d_model=16)
    assert r["kind"] == kind and r["weights"].shape == (h, 6, 6)
    np.testing.assert_allclose(r["weights"].sum(-1), 1, rtol=1e-12)
    d = 16 // h
    assert r["ledger"] == {"W_Q": 16 * h * d, "W_K": 16 * kv * d, "W_V": 16 * kv * d,
                           "W_O": h * d * 16, "total": 2 * 16 * h * d + 2 * 16 * kv * d}
    assert r["kv_cache_values_per_token"] == 2 * kv * d
    with pytest.raises(ValueError):
        live.heads(4, 3)


def test_regimes_places_prefill_and_decode():
    r = live.regimes(512, 4096, heads=2, d=64)
    rows = {(row["regime"], row["precision"]): row for row in r["rows"]}
    # the intensities are the cases' own (FLOPs over bytes); which side of the ridge
    # each falls on depends on this build's measured roofs, so only its rule is checked
    assert rows["prefill", "float32"]["intensity"] == 128
    assert rows["prefill", "bfloat16"]["intensity"] == 256
    assert all(rows["decode", c]["intensity"] < 2 for c in ("float32", "float16", "bfloat16",
                                                            "int8"))
    dot = r["facts"].get("bf16dot_gflops")
    for (regime, precision), row in rows.items():
        compute = dot if (regime, precision) == ("prefill", "bfloat16") and dot else \
            r["facts"]["fma_gflops"]
        ridge = compute / r["facts"]["read_gbs"]
        assert row["bound"] == ("compute" if row["intensity"] > ridge else "bandwidth")
        assert row["gflops"] > 0
