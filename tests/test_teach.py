"""The teaching experiments state facts; these tests hold them to theory, with
tolerances set by the sampling error of each experiment."""

import math
import warnings

import numpy as np
import pytest

import attncore
from attncore import _api, teach


@pytest.fixture(scope="module")
def scaling():
    return teach.scaling()


def test_scaling_variance_is_dk(scaling):
    # X = q·k is a sum of d_k products of independent N(0,1): Var X = d_k and
    # E X⁴ = 3d_k² + 6d_k, so the sample variance over N = 300·6 scores has a
    # relative standard error sqrt((2 + 6/d_k)/N) <= 5.3% (d_k = 2): 25% is
    # more than 4.5 standard errors for every d_k.
    for r in scaling.table():
        assert r["var_theory"] == r["dk"]
        assert abs(r["var_measured"] / r["dk"] - 1) < 0.25, r


def test_scaling_keeps_entropy_flat_and_raw_collapses(scaling):
    rows = scaling.table()
    scaled = [r["entropy_scaled"] for r in rows]
    raw = [r["entropy_raw"] for r in rows]
    # the mean over 300 samples of an entropy whose spread is ~0.2 nats has a
    # standard error ~0.012: scaled entropies agree within 0.15 (±6σ) and stay
    # below the maximum ln 6
    assert max(scaled) - min(scaled) < 0.15
    assert max(scaled) < math.log(6) == pytest.approx(scaling.facts["max_entropy"])
    # unscaled, the spread grows as √d_k and the softmax collapses onto one key
    assert raw[-1] < raw[0] / 10 and raw[-1] < 0.2
    for r in rows:
        if r["dk"] >= 16:
            assert r["entropy_raw"] < r["entropy_scaled"] - 0.5
            assert r["max_weight_raw"] > r["max_weight_scaled"] + 0.2
    ranges = [r["score_range"] for r in rows]
    assert all(b > a for a, b in zip(ranges, ranges[1:]))


def test_scaling_is_reproducible_by_seed():
    assert teach.scaling(dks=(8,), seed=3).table() == teach.scaling(dks=(8,), seed=3).table()
    assert teach.scaling(dks=(8,), seed=3).table() != teach.scaling(dks=(8,), seed=4).table()


def test_normalizers_softmax_keeps_the_odds_and_min_subtraction_survives_the_shift_too():
    rows = {r["method"]: r for r in teach.normalizers().table()}
    soft = rows["softmax"]
    assert np.allclose(soft["weights"], soft["weights after the shift"], rtol=0, atol=1e-15)
    assert soft["verdict"] == "a weighting, shift-blind, odds kept"
    assert abs(soft["sum"] - 1) < 1e-15 and min(soft["weights"]) > 0
    assert rows["divide by sum"]["verdict"] == "negative weights, moved by the shift"
    assert min(rows["divide by sum"]["weights"]) < 0
    assert rows["clip negatives, divide"]["verdict"] == ("keys at weight 0 get no gradient, "
                                                         "moved by the shift")
    # positive, sums to 1 and blind to the shift, like softmax: what differs is the odds
    lifted = rows["subtract min, divide"]
    assert lifted["all ≥ 0"] and abs(lifted["sum"] - 1) < 1e-12
    assert lifted["moved by the shift"] is False
    assert lifted["odds w1/w2 moved by a 7th key"] is True
    assert soft["odds w1/w2 moved by a 7th key"] is False


def test_memory_formulas_are_exact():
    res = teach.memory(ns=(512, 4096), heads=32, d_head=128, bytes_per_value=2)
    for r in res.table():
        n = r["n"]
        assert r["scores_bytes_head"] == n * n * 2
        assert r["scores_bytes_layer"] == n * n * 2 * 32
        assert r["kv_cache_bytes"] == 2 * n * 32 * 128 * 2
        assert r["ratio"] == n / 256  # n²·h / (2·n·h·d): grows linearly in n


def test_memory_measured_naive_holds_the_table():
    rows = teach.memory(ns=(256, 1024), measured=True).table()
    for r in rows:
        assert r["measured_naive_bytes"] >= 4 * r["n"] ** 2  # the float32 n×n table
        assert r["measured_flash_bytes"] < r["measured_naive_bytes"]
    assert rows[1]["measured_naive_bytes"] / rows[0]["measured_naive_bytes"] > 10  # ~16×


def test_trace_follows_one_cell_to_the_kernel_output():
    res = teach.trace()  # cell (3, 1): q_3 = [0.5, -1, 2], k_1 = [0, 1, 1]
    steps = {r["step"]: r["value"] for r in res.table()}
    assert steps["dot product"] == sum(steps["products q[i,t]·k[j,t]"]) == 1.0
    assert steps["scaled score (× 1/√3)"] == pytest.approx(1 / math.sqrt(3), abs=1e-15)
    assert len(set(steps["row i's scores (C core)"])) == 4  # no ties in the traced row
    assert steps["denominator Σ exp"] == pytest.approx(sum(steps["exp(score − max)"]), abs=1e-15)
    w = steps["weight of (i, j)"]
    assert w == pytest.approx(steps["exp(score − max)"][1] / steps["denominator Σ exp"], abs=1e-15)
    out = attncore.attention(teach._TRACE_Q, teach._TRACE_K, teach._TRACE_V)[3]
    assert np.array_equal(steps["output row i (attncore.attention)"], out)
    assert np.allclose(steps["Σ_j contributions"], out, rtol=0, atol=1e-15)
    # any arrays and any cell
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((6, 5)) for _ in range(3))
    t = teach.trace(q, k, v, i=4, j=0)
    assert t.facts["max_abs_diff_sum_vs_output"] < 1e-14


def test_permutation_reverses_exactly_to_rounding():
    res = teach.permutation(n=16, d=8, seed=2)
    assert res.facts["max_abs_diff"] < 1e-14
    assert len(res.table()) == 16


def test_every_result_renders_headless_without_warnings(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [teach.scaling(dks=(4, 64)), teach.normalizers(), teach.memory(ns=(512, 1024)),
               teach.trace(), teach.permutation(), teach.causal(n=256, d=8, heads=1),
               teach.crossover(ns=(64, 128), d=8, heads=1), teach.scorers(),
               teach.saturation(dks=(4, 16)), teach.regimes(n_prefill=256, m_decode=1024, heads=1),
               teach.multihead(), teach.family(ns=(64, 128), d=8, heads=1, window=16),
               teach.sentence(), teach.shapes(), teach.weighted_mean(), teach.causal_row(),
               teach.corrections(), teach.kv_sharing(heads=4, kv_heads=(4, 2, 1), d_head=8, m=64,
                                                     d_model=32)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for res in results:
            ax = res.plot()
            # a chart names its axes; a diagram (the trace) turns them off
            assert ax.get_title() and ((ax.get_xlabel() and ax.get_ylabel()) or not ax.axison)
            ax.figure.savefig(tmp_path / f"{res.name}.png")
            plt.close(ax.figure)
            text = repr(res)
            assert text.startswith(res.name) and "\n" in text
            for row in res.table():  # plain Python values only
                for value in row.values():
                    assert isinstance(value, (int, float, str, bool, list, type(None)))


@pytest.mark.parametrize("n,block", [(1024, 128), (1000, 128), (300, 64)])
def test_causal_block_counts_are_the_analytic_ones(n, block):
    res = teach.causal(n=n, d=16, heads=2, block=block)
    full, causal = res.table()
    nb = -(-n // block)
    assert full["blocks_computed"] == nb * nb and full["blocks_masked"] == 0
    # the kernel visits the lower triangle of the block grid and masks its diagonal
    assert causal["blocks_computed"] == nb * (nb + 1) // 2
    assert causal["blocks_masked"] == nb
    assert causal["blocks_skipped"] == nb * nb - nb * (nb + 1) // 2
    assert causal["cells_working"] == n * (n + 1) // 2 and causal["cells_total"] == n * n
    assert res.facts["rows_sum_to_one_max_error"] < 1e-15
    assert res.facts["weights_above_diagonal"] == 0


def test_block_counts_under_a_window():
    x = np.random.default_rng(0).standard_normal((1024, 8)).astype(np.float32)
    counts = np.zeros(2, np.int64)  # the kernel's own tile count, a private keyword
    out = _api._attention(x, x, x, causal=True, window=128, block_q=128, block_k=128,
                          block_counts=counts)
    computed, masked = int(counts[0]), int(counts[1])
    # each Q block sees its diagonal block and the one before it (but the first)
    assert computed == 2 * 8 - 1 and masked == computed
    assert np.allclose(out, attncore.attention(x, x, x, causal=True, window=128), atol=1e-6)


def test_crossover_memory_is_n_squared_for_naive_only():
    rows = teach.crossover(ns=(128, 512), d=16, heads=2).table()
    for r in rows:
        assert r["naive_peak_bytes"] >= 4 * r["n"] ** 2
    assert rows[1]["naive_peak_bytes"] / rows[0]["naive_peak_bytes"] > 8
    assert rows[1]["flash_peak_bytes"] / rows[0]["flash_peak_bytes"] < 5


def test_scorers_length_grows_dot_cosine_removes_it():
    rows = teach.scorers().table()
    base = rows[[r["length"] for r in rows].index(1.0)]
    for r in rows:
        # the dot product scales as length², exactly up to rounding; cosine not at all
        assert np.allclose(r["dot"], np.array(base["dot"]) * r["length"] ** 2, rtol=1e-12)
        assert np.allclose(r["cosine"], base["cosine"], rtol=0, atol=1e-14)
        assert max(abs(x) for x in r["cosine"]) <= 1 + 1e-12
    sharp = [r["max_weight_dot"] for r in rows]
    assert all(b >= a for a, b in zip(sharp, sharp[1:])) and sharp[-1] > 0.99
    assert len({round(r["max_weight_cosine"], 12) for r in rows}) == 1


def test_saturation_gradient_vanishes_only_unscaled():
    rows = teach.saturation().table()
    raw = [r["grad_norm_raw"] for r in rows]
    scaled = [r["grad_norm_scaled"] for r in rows]
    assert all(b < a for a, b in zip(raw, raw[1:])) and raw[-1] < raw[0] / 5
    # the scaled scores are N(0,1) whatever d_k: the mean gradient norm over 200
    # samples (random values and dout: spread ~0.4, standard error ~0.03) agrees
    # within 0.15, about five standard errors
    assert max(scaled) - min(scaled) < 0.15


def test_regimes_place_prefill_and_decode_either_side_of_the_ridge():
    res = teach.regimes(n_prefill=512, m_decode=4096, heads=2, d=64)
    rows = {(r["regime"], r["precision"]): r for r in res.table()}
    assert set(rows) == {("prefill", "float32"), ("prefill", "bfloat16"), ("decode", "float32"),
                         ("decode", "float16"), ("decode", "bfloat16"), ("decode", "int8")}
    ridge = res.facts["ridge_flop_per_byte"]
    pre, dec = rows["prefill", "float32"], rows["decode", "float32"]
    assert dec["intensity"] < ridge < pre["intensity"]
    assert dec["bound"] == "bandwidth" and pre["bound"] == "compute"
    # decode: 4·d FLOPs per key against 2·d values of 4 bytes read: 0.5 FLOP/byte;
    # a 16-bit cache reads half the bytes, an int8 one d + 4 (its scale) a row
    assert dec["intensity"] == pytest.approx(0.5, rel=0.01)
    for cache in ("float16", "bfloat16"):
        assert rows["decode", cache]["intensity"] == pytest.approx(1.0, rel=0.01)
    assert rows["decode", "int8"]["intensity"] == pytest.approx(0.5 * 256 / 68, rel=0.01)
    assert rows["prefill", "bfloat16"]["intensity"] == pytest.approx(2 * pre["intensity"])
    for r in rows.values():
        assert r["gflops"] > 0 and r["roof_gflops"] > 0
    # the bfloat16 dot products' roof is a fact where the kernels use them
    from attncore import _core
    assert ("bf16dot_gflops" in res.facts) == bool(_core.bf16dot_supported())
    assert teach.regimes(n_prefill=256, m_decode=1024, heads=1, d=64,
                         precisions=False).table()[0]["precision"] == "float32"


def test_multihead_heads_differ_and_the_ledger_does_not():
    res = teach.multihead(tokens=6, heads=4, d_model=16)
    assert res.facts["distinct_maps"] == 4
    assert {v for k, v in res.facts.items() if k.startswith("params_")} == {4 * 16 * 16}
    for r in res.table():
        assert np.allclose(np.sum(r["weights"], axis=1), 1, atol=1e-14)
    assert res.facts["output_shape"] == [6, 16]


def test_family_counts_the_pairs_each_member_works_on():
    rows = teach.family(ns=(64, 300), d=8, heads=1, window=32).table()
    by = {(r["n"], r["member"]): r for r in rows}
    for n in (64, 300):
        assert by[n, "full"]["pairs"] == n * n
        assert by[n, "causal"]["pairs"] == n * (n + 1) // 2
        assert by[n, "window 32"]["pairs"] == sum(min(i + 1, 32) for i in range(n))
        assert by[n, "linear"]["pairs"] == 0
        assert all(by[n, m]["seconds"] > 0 for m in ("full", "causal", "window 32", "linear"))


def test_the_sentence_it_looks_back_at_cat():
    res = teach.sentence()
    rows = {r["query"]: r for r in res.table()}
    assert rows["it 它"]["looks at most"] == "cat 猫"
    assert res.facts["weight_it_cat"] == pytest.approx(rows["it 它"]["cat 猫"])
    for r in rows.values():
        assert sum(v for k, v in r.items() if k not in ("query", "looks at most")) == \
            pytest.approx(1, abs=1e-14)


def test_shapes_are_the_kernels():
    rows = teach.shapes(n=5, m=7, d_k=3, d_v=2).table()
    assert [r["output"] for r in rows] == ["S (5, 7)", "P (5, 7)", "O (5, 2)"]
    assert rows[0]["operations"] == 2 * 5 * 7 * 3 and rows[2]["operations"] == 2 * 5 * 7 * 2
    assert "exponentials" in rows[1]["counted"] and rows[1]["operations"] == 5 * 7


def test_weighted_mean_bilinear_form_rank_and_hull():
    res = teach.weighted_mean(tokens=8, d=16, d_k=4)
    v = {r["quantity"]: r["value"] for r in res.table()}
    assert v["max |Q·Kᵀ − x·W_Q·W_Kᵀ·xᵀ|"] < 1e-12
    assert v["rank of W_Q·W_Kᵀ (16×16)"] == 4
    assert v["max |S − Sᵀ| (asymmetry)"] > 0.1
    assert v["min weight"] > 0 and v["max |Σ_j p_ij − 1|"] < 1e-14
    assert v["every output inside the values' convex hull (left of every hull edge)"] is True
    # the test itself tells inside from outside: the hull of a square, and points around it
    from attncore.teach.chapter import _hull, _inside_hull

    square = _hull(np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.5, 0.5]]))
    pts = np.array([[0.5, 0.5], [1.0, 0.5], [1.01, 0.5], [0.9, 0.95], [0.6, -0.01]])
    assert _inside_hull(pts, square).tolist() == [True, True, False, True, False]
    assert v["parameters W_Q, W_K at d=512, d_k=64: 2·d·d_k vs d²"] == "65536 vs 262144"


def test_causal_row_arithmetic():
    res = teach.causal_row(query=4)
    rows = res.table()
    kept = [r for r in rows if r["kept"]]
    assert len(kept) == 5 and not rows[5]["kept"] and rows[5]["weight causal"] == 0
    assert sum(r["weight causal"] for r in rows) == pytest.approx(1, abs=1e-14)
    f = res.facts
    assert f["full_denominator"] == pytest.approx(f["causal_denominator"] + f["dropped_numerators"])
    for r in kept:  # each kept weight grows by full ÷ causal denominator
        assert r["weight causal"] == pytest.approx(
            r["weight full"] * f["full_denominator"] / f["causal_denominator"], rel=1e-12)
        assert r["weight causal"] == pytest.approx(r["kernel causal"], abs=1e-15)


def test_the_corrections_numbers():
    f = teach.corrections().facts
    assert 0.8 < f["variance_512"] < 1.3  # ÷√512 scores have variance 1
    assert f["weights_min"] < 0.02 and f["weights_max"] > 0.3  # not 0.098–0.102
    assert 1.6 < f["entropy_512"] < 2.1 < f["ln10"]
    assert f["variance_dk2_uniform"] == pytest.approx(2, rel=0.03)
    assert math.isnan(f["naive_big"][0]) and f["safe_big"] == [1.0, 0.0, 0.0]
    assert (f["dot_top"], f["cosine_top"]) == ("tired", "was")
    assert f["jacobian_onehot"] < 1e-20 and f["jacobian_moderate"] > 0.1
    assert f["reverse_unchanged"] > 0.1 and f["reverse_permuted"] < 1e-14


def test_kv_sharing_is_mha_on_repeated_heads():
    rows = teach.kv_sharing(heads=8, kv_heads=(8, 2, 1), d_head=16, m=128, d_model=64).table()
    assert [r["kind"] for r in rows] == ["MHA", "GQA", "MQA"]
    assert [r["kv_cache_bytes_per_token"] for r in rows] == [2 * kv * 16 * 4 for kv in (8, 2, 1)]
    assert all(r["max_diff_vs_repeated"] < 1e-6 for r in rows)
    assert rows[0]["speedup_vs_mha"] == 1.0


# ---- the blockwise online softmax, bytes moved, decode as a process --------------


@pytest.mark.parametrize("block", [1, 2, 3, 4, 6])
def test_online_softmax_numbers_are_the_kernels_and_exact(block):
    from attncore.teach import live

    for q in (None, live.SENTENCE_K[1]):
        r = live.online_softmax(4, block, q=q)
        s = r["scores"]
        np.testing.assert_allclose(s, attncore.reference.scores(
            live.SENTENCE_Q[4][None] if q is None else np.asarray(q)[None], live.SENTENCE_K)[0],
            rtol=1e-14)
        m_old = -np.inf
        for i, st in enumerate(r["steps"]):
            seen = s[: st["key_index"][-1] + 1]
            # the running max and sum, recomputed here from the scores alone
            assert st["m"] == seen.max() and st["m_before"] == m_old
            assert st["l"] == pytest.approx(np.exp(seen - seen.max()).sum(), rel=1e-13)
            if i:
                assert st["rescale"] == pytest.approx(np.exp(m_old - st["m"]), rel=1e-14)
            w = np.exp(seen - seen.max())
            np.testing.assert_allclose(st["acc"], w @ live.SENTENCE_K[: len(seen)], rtol=1e-12)
            np.testing.assert_allclose(st["output"], st["acc"] / st["l"], rtol=1e-12)
            m_old = st["m"]
        assert len(r["steps"]) == -(-6 // block) == r["kernel_tiles"]
        assert r["max_diff_vs_kernel"] < 1e-14 and r["max_diff_vs_softmax"] < 1e-14
        assert r["max_diff_recomputed_weights"] < 1e-15


def test_online_softmax_table_shows_a_rescale_and_the_backward_from_lse():
    res = teach.online_softmax()
    rows = res.table()
    swapped = [r for r in rows if "key of" in r["row"]]
    assert [r["rescale exp(m_old − m_new)"] for r in swapped][0] == "—"
    assert swapped[1]["rescale exp(m_old − m_new)"] == pytest.approx(np.exp(0.52 - 1.0))
    plain = [r for r in rows if "key of" not in r["row"]]
    assert all(r["rescale exp(m_old − m_new)"] in ("—", 1.0) for r in plain)  # cat comes first
    f = res.facts
    assert f["kernel_tiles"] == 3 and f["max_diff_backward_vs_reference"] < 1e-12
    assert f["swap_rescale"] == pytest.approx(np.exp(0.52 - 1.0))
    with pytest.raises(ValueError, match="block"):
        teach.live.online_softmax(4, 0)


def test_traffic_counts_the_bytes_each_kernel_moves():
    res = teach.traffic(ns=(256, 512), quick=True)
    bq = res.facts["block_q"]
    for r in res.table():
        n = r["n"]
        assert r["table_bytes"] == 4 * n * n
        assert r["naive_bytes"] == 4 * 4 * n * 64 + 4 * 4 * n * n
        assert r["blockwise_bytes"] == 4 * 2 * n * 64 + -(-n // bq) * 4 * 2 * n * 64
        assert r["ratio_lowest"] <= r["naive_over_blockwise"] <= r["ratio_highest"]
        assert r["table_fits"] in ("L2", "L3", "DRAM")
    assert res.facts["blockwise_intensity_flop_per_byte"] == bq / 2
    assert res.facts["gpu_ridge_flop_per_byte"] == pytest.approx(989 / 3.35)


def test_decode_process_reads_the_whole_cache_every_step():
    res = teach.decode(prompt=16, steps=4, heads=4, kv_heads=2, d_head=8, batch=2)
    rows = res.table()
    per_token = 2 * 2 * 8 * 4
    total = 0
    for r in rows:
        assert r["cache_tokens"] == 16 + r["step"]
        assert r["kv_bytes_read"] == r["cache_tokens"] * per_token
        assert r["max_diff_vs_attention"] == 0
    for step in range(1, 5):
        total += (16 + step) * per_token
    assert rows[-1]["kv_bytes_read_so_far"] == total
    f = res.facts
    assert f["model_cache_per_token_bfloat16"] == 2 * 32 * 8 * 128 * 2
    g, c = f["generate"], f["context"]
    assert f["model_kv_bytes_read_generating_bfloat16"] == (
        sum(c + t for t in range(g)) * f["model_cache_per_token_bfloat16"])


def test_sentence_swap_and_the_corrections_numbers():
    f = teach.sentence().facts
    assert f["swap_weight_it_was"] > f["weight_it_was"] and f["swap_weight_it_cat"] < f[
        "weight_it_cat"]
    assert f["swap_looks_at"] == "tired"
    c = teach.corrections().facts
    assert c["weights_max"] < 0.45 < c["weights_max_batch1"]  # the figure is batch 0
    assert c["article_row_sums_min"] == pytest.approx(0.998) and c["article_row_sums_max"] > 1.0003
    p = attncore.reference.softmax(np.array([60.0, 0, 0, 0, 0, 0]))
    assert c["jacobian_chosen_exact"] == pytest.approx(5 * np.exp(-60), rel=1e-12)
    assert c["jacobian_chosen_float64"] == 0 and p[0] == 1.0
    assert c["jacobian_onehot"] == pytest.approx(np.exp(-60), rel=1e-12)


def test_modifiers_show_recency_a_ceiling_and_a_sink():
    res = teach.modifiers()
    f = res.facts
    rows = res.table()
    assert [r["modifier"] for r in rows][0] == "none"
    assert f["max_diff_vs_reference"] < 1e-14
    # ALiBi: the farthest key loses weight, the row's own key gains
    assert f["alibi_first_key"][1] < f["alibi_first_key"][0]
    assert f["alibi_own_key"][1] > f["alibi_own_key"][0]
    # the soft-cap: every score under the cap, the near one-hot row softened
    assert f["raw_largest_score"] > f["softcap"] >= f["capped_largest_score"]
    assert f["capped_max_weight"] < f["sharp_max_weight"]
    # the sink: the row sums to 1 - its weight, the keys keep their ratios
    assert abs(f["sink_row_sum"] + f["sink_weight"] - 1) < 1e-14 and 0 < f["sink_weight"] < 1
    assert f["sink_same_ratios"] < 1e-14
    for r in rows[:4]:
        assert abs(r["sum of weights"] - 1) < 1e-14
