"""`attncore tour`: every teaching experiment, its table and figure, and a
guided tutorial in Markdown, in English and in Chinese (the prose written here,
the numbers run now, once, for both)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from attncore import teach

LANGUAGES = ("en", "zh")


@dataclass
class Section:
    """One experiment of the tour: how to call it, its heading and prose in
    each language, and, where its numbers are measured or worth quoting, a
    function writing the sentences that state what this run found."""

    name: str
    full: dict
    quick: dict
    deterministic: bool
    title: dict
    prose: dict
    found: Callable | None = None  # (Result, language) -> text


def _pct(x):
    return f"{100 * x:.0f} %"


# ---- what each run found, in words --------------------------------------------------


def _found_sentence(res, lang):
    f = res.facts
    if lang == "zh":
        return (f"「它」这一行把 {f['weight_it_cat']:.2f} 的权重给了「猫」，是全行最大的一格；"
                f"每一行的和与 1 相差不超过 {f['rows_sum_to_one_max_error']:.1e}。")
    return (f"Row “it” gives {f['weight_it_cat']:.2f} of its weight to “cat”, the largest in its "
            f"row; every row sums to 1 within {f['rows_sum_to_one_max_error']:.1e}.")


def _found_causal(res, lang):
    full, causal = res.table()
    ratio = res.facts["time_ratio_full_over_causal"]
    if lang == "zh":
        return (f"这次运行：因果版算了 {causal['blocks_computed']} 块（其中对角线上 "
                f"{causal['blocks_masked']} 块带掩码），跳过 {causal['blocks_skipped']} 块，"
                f"共 {causal['blocks_total']} 块；完整注意力的时间是因果版的 {ratio:.2f} 倍。"
                f"8×8 小例子里对角线以上的非零权重有 {res.facts['weights_above_diagonal']} 个，"
                f"每行之和与 1 相差 {res.facts['rows_sum_to_one_max_error']:.1e}。")
    return (f"On this run the causal kernel computed {causal['blocks_computed']} blocks "
            f"({causal['blocks_masked']} of them masked, on the diagonal) and skipped "
            f"{causal['blocks_skipped']} of {causal['blocks_total']}; full attention took "
            f"{ratio:.2f}× the causal time. In the 8×8 example, "
            f"{res.facts['weights_above_diagonal']} weights above the diagonal are non-zero and "
            f"every row sums to 1 within {res.facts['rows_sum_to_one_max_error']:.1e}.")


def _found_crossover(res, lang):
    rows = res.table()
    ratios = [(r["n"], r["naive_over_flash"]) for r in rows]
    lo, hi = min(ratios, key=lambda t: t[1]), max(ratios, key=lambda t: t[1])
    faster = [n for n, x in ratios if x < 0.95]
    even = [n for n, x in ratios if 0.95 <= x <= 1.05]
    last = rows[-1]
    mem = last["naive_peak_bytes"] / last["flash_peak_bytes"]
    if lang == "zh":
        verdict = (f"朴素版明显更快（比值低于 0.95）的 n：{', '.join(map(str, faster))}"
                   if faster else "没有哪个 n 上朴素版明显更快（比值低于 0.95）")
        tie = f"；打平（0.95–1.05）的 n：{', '.join(map(str, even))}" if even else ""
        return (f"这次运行测得的「朴素时间 ÷ 分块时间」在 {lo[1]:.2f}（n = {lo[0]}）到 "
                f"{hi[1]:.2f}（n = {hi[0]}）之间。{verdict}{tie}。在 n = {last['n']}，"
                f"朴素版的峰值内存是分块版的 {mem:.1f} 倍。" +
                ("表能放进缓存时朴素版的几遍扫描很便宜，在上面这些 n 上足以胜出。" if faster else
                 "表能放进缓存时朴素版的几遍扫描很便宜，但在这台机器上并没有因此赢过分块核。"))
    verdict = (f"naive was clearly faster (ratio below 0.95) at n = {', '.join(map(str, faster))}"
               if faster else "naive was clearly faster (ratio below 0.95) at no n")
    tie = f"; about even (0.95–1.05) at n = {', '.join(map(str, even))}" if even else ""
    return (f"On the run that produced this table, naive time ÷ blockwise time ranged from "
            f"{lo[1]:.2f} (n = {lo[0]}) to {hi[1]:.2f} (n = {hi[0]}): {verdict}{tie}. At n = "
            f"{last['n']} the naive call's peak memory is {mem:.1f}× the blockwise one's. " +
            ("While the table fits in cache its passes are cheap enough to win at those n."
             if faster else "While the table fits in cache its passes are cheap, but on this "
             "machine that did not make the materialised kernel win."))


def _found_family(res, lang):
    rows = res.table()
    ns = sorted({r["n"] for r in rows})
    t = {(r["member"], r["n"]): r["seconds"] for r in rows}
    members = list(dict.fromkeys(r["member"] for r in rows))
    big, small = ns[-1], ns[0]
    rel = {m: t[(m, big)] / t[("full", big)] for m in members}
    grow = {m: t[(m, big)] / t[(m, small)] for m in members}
    if lang == "zh":
        parts = "；".join(f"{m}：{rel[m]:.2f} 倍完整注意力的时间，n 从 {small} 到 {big} 时间涨了 "
                         f"{grow[m]:.1f} 倍" for m in members)
        return (f"这次运行在最大的 n = {big}：{parts}（n 涨了 {big // small} 倍，n² 涨了 "
                f"{(big // small) ** 2} 倍）。")
    parts = "; ".join(f"{m}: {rel[m]:.2f}× full's time, {grow[m]:.1f}× slower from n = {small} to "
                      f"{big}" for m in members)
    return (f"On this run, at the largest n = {big}: {parts} (n grew {big // small}×, n² "
            f"{(big // small) ** 2}×).")


def _found_kv(res, lang):
    rows = res.table()
    parts = [(r["kind"], r["kv_heads"], r["speedup_vs_mha"], r["max_diff_vs_repeated"])
             for r in rows[1:]]
    if lang == "zh":
        txt = "；".join(f"{k}（{kv} 个键值头）解码一步比 MHA 快 {s:.2f} 倍" for k, kv, s, _ in parts)
        return (f"这次运行在 m = {res.facts['m']} 个缓存的键上：{txt}。与把共享的头重复成 MHA "
                f"相比，输出相差不超过 {max(d for *_, d in parts):.1e}。")
    txt = "; ".join(f"{k} ({kv} key/value head{'s' if kv > 1 else ''}) decodes {s:.2f}× faster "
                    "than MHA"
                    for k, kv, s, _ in parts)
    return (f"On this run, over m = {res.facts['m']} cached keys: {txt}. The outputs equal MHA on "
            f"the shared heads repeated to within {max(d for *_, d in parts):.1e}.")


def _found_memory(res, lang):
    rows = [r for r in res.table() if r.get("measured_naive_bytes")]
    if not rows:
        return ""
    r = rows[-1]
    if lang == "zh":
        return (f"这次运行在 n = {r['n']}（1 个头，d = 64，float32）：朴素调用的峰值 "
                f"{r['measured_naive_bytes'] / 2**20:.0f} MiB，分块调用 "
                f"{r['measured_flash_bytes'] / 2**20:.1f} MiB。")
    return (f"On this run at n = {r['n']} (one head, d = 64, float32): the naive call peaked at "
            f"{r['measured_naive_bytes'] / 2**20:.0f} MiB, the blockwise one at "
            f"{r['measured_flash_bytes'] / 2**20:.1f} MiB.")


def _found_regimes(res, lang):
    f = res.facts
    rows = {r["regime"]: r for r in res.table()}
    pre, dec = rows["prefill"], rows["decode"]
    if lang == "zh":
        return (f"这次运行量出的屋顶：FMA {f['fma_gflops']:.0f} GFLOP/s，读带宽 "
                f"{f['read_gbs']:.1f} GB/s，脊点 {f['ridge_flop_per_byte']:.1f} FLOP/字节。"
                f"预填充达到 {pre['gflops']:.0f} GFLOP/s（屋顶的 "
                f"{_pct(pre['gflops'] / pre['roof_gflops'])}），解码读到 {dec['gbs']:.1f} GB/s"
                f"（读带宽的 {_pct(dec['gbs'] / f['read_gbs'])}）。")
    return (f"Roofs measured on this run: FMA {f['fma_gflops']:.0f} GFLOP/s, read "
            f"{f['read_gbs']:.1f} GB/s, ridge at {f['ridge_flop_per_byte']:.1f} FLOP/byte. Prefill "
            f"reached {pre['gflops']:.0f} GFLOP/s ({_pct(pre['gflops'] / pre['roof_gflops'])} of "
            f"its roof), decode read {dec['gbs']:.1f} GB/s ({_pct(dec['gbs'] / f['read_gbs'])} of "
            f"the read roof).")


def _found_corrections(res, lang):
    f = res.facts
    nb, sb = f["naive_big"], f["safe_big"]
    if lang == "zh":
        items = [
            f"**几何那篇文章的例子是它自己的代码算不出来的。** 文中 Q、K 都是 512 维的随机数，"
            f"除以 √512，打印出的 10×10 权重全在 0.098–0.102 之间，几乎均匀。同样的计算在 "
            f"attncore 上：缩放后分数的方差是 {f['variance_512']:.2f}（理论上就是 1），权重从 "
            f"{f['weights_min']:.4f} 到 {f['weights_max']:.2f}，每行平均熵 {f['entropy_512']:.2f}，"
            f"而均匀分布是 ln 10 = {f['ln10']:.2f}。方差为 1 的分数经过 softmax，不可能得到那样平的行"
            f"（图即这次算出的第一个批次）。",
            f"**方差相加靠的是独立，不是中心极限定理。** 独立变量的和，方差等于方差之和，"
            f"对任何 d_k 都精确成立，与分布的形状无关：d_k = 2、分量取方差为 1 的均匀分布时，"
            f"q·k 的方差测得 {f['variance_dk2_uniform']:.3f}（理论 2）。中心极限定理讲的是分布趋于正态，"
            f"不是方差。",
            f"**大分数不会让减去最大值的 softmax 溢出。** 直接算 exp(s)/Σexp(s)，s = [1000, 0, −1000] "
            f"得到 [{', '.join(f'{t:g}' for t in nb)}]；attncore.softmax 先减去行最大值，得到 "
            f"[{', '.join(f'{t:g}' for t in sb)}]。梯度变小是因为饱和（下一条），不是因为溢出。",
            f"**点积不是余弦。** 让「它」借用「很」的键作为自己的查询：余弦最大的是「很」自己"
            f"（{f['cos_was']:.2f}，方向相同），点积最大的却是「累」（{f['dot_tired']:.2f}，"
            f"而「很」只有 {f['dot_was']:.2f}），因为「累」的键更长。注意力用的是点积，长度会算进去。",
            f"**one-hot 时整个雅可比矩阵都是 0，不是「只有一格拿到梯度」。** softmax 的雅可比是 "
            f"diag(p) − p·pᵀ；p = softmax([60, 0, 0, 0, 0, 0]) 时它的最大元素是 "
            f"{f['jacobian_onehot']:.1e}，连被选中的那一格也一样；而在普通的分数上是 "
            f"{f['jacobian_moderate']:.2f}。",
            f"**把输入倒过来，权重是被重排了，而不是不变。** 自注意力对输入顺序是等变的："
            f"倒序后的权重矩阵与原来的相差 {f['reverse_unchanged']:.2f}，与原矩阵行列都倒过来相比只差 "
            f"{f['reverse_permuted']:.1e}。每个词的输出跟着词走；要区分顺序，必须另外注入位置信息。",
        ]
    else:
        items = [
            f"**The geometry article's example cannot come from its own code.** It draws random Q "
            f"and K of width 512, divides by √512 and prints a 10×10 weight matrix with every "
            f"entry between 0.098 and 0.102, nearly uniform. The same computation on attncore: the "
            f"scaled scores have variance {f['variance_512']:.2f} (1 in theory), the weights run "
            f"from {f['weights_min']:.4f} to {f['weights_max']:.2f}, and the mean row entropy is "
            f"{f['entropy_512']:.2f} against ln 10 = {f['ln10']:.2f} for a uniform row. Scores of "
            f"variance 1 cannot give rows that flat (the figure is this run's first batch).",
            f"**Variances add because the terms are independent, not by the central limit "
            f"theorem.** The variance of a sum of independent terms is the sum of their "
            f"variances, exactly, for any d_k and any distribution: at d_k = 2, with uniform "
            f"components of variance 1, Var(q·k) measures {f['variance_dk2_uniform']:.3f} "
            f"(2 in theory). The central limit theorem is about the shape tending to a normal, not "
            f"about the variance.",
            f"**A large score does not overflow a max-subtracted softmax.** exp(s)/Σexp(s) at "
            f"s = [1000, 0, −1000] computed as written gives [{', '.join(f'{t:g}' for t in nb)}]; "
            f"attncore.softmax subtracts the row maximum first and gives "
            f"[{', '.join(f'{t:g}' for t in sb)}]. Gradients shrink because the softmax "
            f"saturates (next item), not because anything overflows.",
            f"**The dot product is not the cosine.** Give “it” the key of “was” as its query: "
            f"the largest cosine is “was” itself ({f['cos_was']:.2f}, the same direction), but the "
            f"largest dot product is “tired” ({f['dot_tired']:.2f}, against {f['dot_was']:.2f} "
            f"for “was”), whose key is longer. Attention scores with the dot product, so length "
            f"counts.",
            f"**At a one-hot softmax the whole Jacobian vanishes, not all cells but one.** The "
            f"softmax's Jacobian is diag(p) − p·pᵀ; at p = softmax([60, 0, 0, 0, 0, 0]) its "
            f"largest entry is {f['jacobian_onehot']:.1e}, the chosen cell's included, against "
            f"{f['jacobian_moderate']:.2f} at ordinary scores.",
            f"**Reversing the input permutes the weights; it does not leave them unchanged.** "
            f"Self-attention is permutation-equivariant: the reversed input's weight matrix "
            f"differs from the original by {f['reverse_unchanged']:.2f}, and from the original with "
            f"rows and columns reversed by {f['reverse_permuted']:.1e}. Each word's output moves "
            f"with the word; order has to be injected as positions.",
        ]
    return "\n".join(f"{k}. {t}" for k, t in enumerate(items, 1))


# ---- the family table (prose, one per language) ----------------------------------

_FAMILY_EN = """\
| member | what it changes | what it costs | in attncore |
|---|---|---|---|
| additive (Bahdanau) | score = vᵀ·tanh(W_q·q + W_k·k): a small network per pair | a tanh layer per (query, key) pair; no single matrix product | `teach.scorers` |
| dot-product | score = q·k | 2·n·m·d_k for the scores: one matrix product | `attncore.scores(q, k, scale=1)` |
| scaled dot-product | score = q·k / √d_k: variance 1 whatever d_k | the same, plus one multiply | `attncore.attention` |
| multi-head | h heads of d/h dimensions each, then W_O | the FLOPs of one head of width d; 4·d² parameters whatever h; h maps | `attncore.multi_head_attention` |
| MQA / GQA | h query heads share h_kv key/value heads | KV cache and decode reads ÷ h/h_kv; the same prefill FLOPs | k, v with fewer heads; `kv_heads=` |
| local / sliding window | each query sees its last w keys | about n·w pairs instead of n²/2 | `window=w` |
| linear | the softmax replaced by a feature map φ(q)·φ(k)ᵀ, reassociated | n·d² time, a d×d state, no n² table; the weights are no longer softmax weights | `attncore.linear_attention` |
| FlashAttention | the order of the computation: tiles and an online softmax | the same FLOPs, memory in n instead of n²; exact | `method="flash"` (the default) |
"""

_FAMILY_ZH = """\
| 成员 | 改了什么 | 代价 | 在 attncore 里 |
|---|---|---|---|
| 加性（Bahdanau） | 分数 = vᵀ·tanh(W_q·q + W_k·k)：每一对过一个小网络 | 每个（查询，键）对一层 tanh；不是一次矩阵乘法 | `teach.scorers` |
| 点积 | 分数 = q·k | 分数 2·n·m·d_k：一次矩阵乘法 | `attncore.scores(q, k, scale=1)` |
| 缩放点积 | 分数 = q·k / √d_k：无论 d_k 多大方差都是 1 | 同上，多一次乘法 | `attncore.attention` |
| 多头 | h 个头，每个 d/h 维，最后乘 W_O | 与一个 d 维的头 FLOPs 相同；参数总是 4·d²；h 张图 | `attncore.multi_head_attention` |
| MQA / GQA | h 个查询头共享 h_kv 个键值头 | KV 缓存与解码读取量 ÷ h/h_kv；预填充 FLOPs 不变 | k、v 的头数更少；`kv_heads=` |
| 局部 / 滑动窗口 | 每个查询只看最近的 w 个键 | 约 n·w 对，而不是 n²/2 | `window=w` |
| 线性 | 用特征映射 φ(q)·φ(k)ᵀ 代替 softmax，再改变结合顺序 | n·d² 时间，d×d 状态，没有 n² 的表；权重不再是 softmax 权重 | `attncore.linear_attention` |
| FlashAttention | 计算的顺序：分块加在线 softmax | FLOPs 不变，内存随 n 而不是 n² 增长；结果精确 | `method="flash"`（默认） |
"""


SECTIONS = [
    Section(
        "sentence", {}, {}, True,
        {"en": "The sentence: who looks at whom", "zh": "一句话：谁在看谁"},
        {"en": "The chapter starts from one sentence: “The cat was tired, so it slept” "
               "(「猫很累，所以它睡了」). Each word gets a query, what it asks for, and a key, what it "
               "offers, here four hand-made numbers each (animate noun, state, connective, pronoun "
               "reference; V = K, as in the chapter's small example). Row i of the table is word i "
               "asking: the softmax of its scores against every key. “it” asks for an animate noun "
               "and “cat” offers one, so “it” looks back at “cat”, as a reader's eye does. The "
               "notebook `01-sentence` lets you drag the query and watch the row re-weight.",
         "zh": "这一章从一句话开始：「猫很累，所以它睡了」。每个词有一个查询（它在找什么）和一个键"
               "（它能提供什么），这里各是手工设定的 4 个数（有生命的名词、状态、连接、代词指代；"
               "与该章的小例子一样 V = K）。表的第 i 行是第 i 个词在提问：它对所有键的分数过一遍 "
               "softmax。「它」在找一个有生命的名词，「猫」正好提供，所以「它」回头看「猫」，就像"
               "读者的眼睛一样。笔记本 `01-sentence` 可以拖动查询，看这一行怎样重新分配权重。"},
        _found_sentence),
    Section(
        "shapes", {}, {}, True,
        {"en": "The shapes: two matrix products and one softmax",
         "zh": "形状：两次矩阵乘法和一次 softmax"},
        {"en": "The whole of attention is two matrix products and one softmax. Q·Kᵀ (n×d_k by "
               "d_k×m) scores every query against every key; the softmax turns each row of the "
               "n×m table into proportions without changing its shape; P·V (n×m by m×d_v) mixes the "
               "values. The shapes below are the ones the kernels returned, for n = 6 queries "
               "against m = 8 keys (n ≠ m, as in cross-attention). The sequence length never changes "
               "along the way, and nothing depends on the previous position: all n rows can be "
               "computed at once.",
         "zh": "整个注意力就是两次矩阵乘法和一次 softmax。Q·Kᵀ（n×d_k 乘 d_k×m）给每个查询和每个"
               "键打分；softmax 把 n×m 表的每一行变成配比，形状不变；P·V（n×m 乘 m×d_v）把值混合"
               "起来。下表的形状是核函数实际返回的：n = 6 个查询对 m = 8 个键（n ≠ m，像交叉注意力"
               "那样）。序列长度这一维从头到尾没有变过，也没有任何一步依赖上一个位置：n 行可以同时算。"}),
    Section(
        "weighted_mean", {}, {}, True,
        {"en": "Attention is a weighted mean", "zh": "注意力是加权平均"},
        {"en": "Output row i is Σ_j p_ij·v_j with p_ij ≥ 0 and Σ_j p_ij = 1: a convex combination "
               "of the value rows. It lies inside their convex hull — attention averages, it cannot "
               "extrapolate (the figure: eight outputs, all inside the hull of the eight values). "
               "Why score with the inner product? It is the cheapest similarity that is linear in "
               "both arguments, so a whole table of scores is one matrix product. With projections "
               "W_Q and W_K (d×d_k) of the same tokens x, the scores are "
               "Q·Kᵀ = x·W_Q·W_Kᵀ·xᵀ: a bilinear form with the d×d matrix M = W_Q·W_Kᵀ. M has rank "
               "at most d_k and costs 2·d·d_k parameters instead of d²; it is not symmetric, so how "
               "much a looks at b is not how much b looks at a (S ≠ Sᵀ). The table checks each "
               "claim on the kernels.",
         "zh": "输出的第 i 行是 Σ_j p_ij·v_j，其中 p_ij ≥ 0 且 Σ_j p_ij = 1：这是值向量的凸组合，"
               "落在它们的凸包之内——注意力只会平均，不会外推（图中 8 个输出全在 8 个值的凸包里）。"
               "为什么用内积打分？它是对两个参数都线性的最便宜的相似度，所以一整张分数表就是一次矩阵"
               "乘法。对同一组词 x 用投影 W_Q、W_K（d×d_k），分数就是 Q·Kᵀ = x·W_Q·W_Kᵀ·xᵀ：一个由 "
               "d×d 矩阵 M = W_Q·W_Kᵀ 定义的双线性型。M 的秩不超过 d_k，只花 2·d·d_k 个参数而不是 "
               "d²；它不对称，所以 a 看 b 的程度不等于 b 看 a 的程度（S ≠ Sᵀ）。表中每一条都在核函数上"
               "验证过。"}),
    Section(
        "trace", {}, {}, True,
        {"en": "One cell's journey", "zh": "一个格子的完整旅程"},
        {"en": "One cell's journey through the formula, on a four-token example with d_k = 3: the "
               "products of the query and key components, their sum, the scale, the row's "
               "exponentials (after subtracting the row maximum) and their sum, the weight, and the "
               "cell's contribution to output row i — which, summed over the keys, is exactly the "
               "row attncore.attention returns. The cell (3, 1) is chosen so that its row has four "
               "different scores (no ties).",
         "zh": "一个格子走完整个公式的路径，用一个 4 个词、d_k = 3 的例子：查询与键逐分量的乘积、"
               "它们的和、缩放、这一行的指数（先减去行最大值）和它们的和、权重，以及这个格子对输出"
               "第 i 行的贡献——把所有键的贡献加起来，正好就是 attncore.attention 返回的那一行。"
               "选 (3, 1) 这个格子，是因为它所在的行四个分数各不相同（没有并列）。"}),
    Section(
        "scaling", {}, {"samples": 100}, True,
        {"en": "Why √d_k", "zh": "为什么除以 √d_k"},
        {"en": "Why is the score q·k divided by √d_k? With independent N(0, 1) components, q·k is a "
               "sum of d_k products of variance 1, so its variance is d_k: the table measures it. "
               "Unscaled, the six scores of a row spread further apart as d_k grows, and the softmax "
               "puts almost all its weight on one key — the entropy collapses towards 0 and the "
               "largest weight towards 1. Divided by √d_k the scores keep variance 1, and the "
               "entropy stays where it was (below the maximum ln 6 ≈ 1.79 of a uniform row) "
               "whatever d_k.",
         "zh": "为什么分数 q·k 要除以 √d_k？分量是独立的 N(0, 1) 时，q·k 是 d_k 个方差为 1 的乘积之和，"
               "方差就是 d_k：表中量的就是它。不缩放时，d_k 越大，一行的 6 个分数拉得越开，softmax "
               "几乎把全部权重压到一个键上——熵塌向 0，最大权重趋向 1。除以 √d_k 后分数方差保持为 1，"
               "熵也停在原处（低于均匀行的最大值 ln 6 ≈ 1.79），与 d_k 无关。"}),
    Section(
        "saturation", {}, {"samples": 100}, True,
        {"en": "The gradient through the softmax vanishes without the scale",
         "zh": "不缩放时，穿过 softmax 的梯度会消失"},
        {"en": "The scale matters for training too. In the backward pass, dP = dO·Vᵀ is the "
               "gradient that reaches the weights P from the output's gradient dO, and "
               "D_i = Σ_j P_ij·dP_ij (equal to Σ_t dO_it·O_it) is its weighted mean over row i; the "
               "gradient that reaches the scores is dS = P ∘ (dP − D), row by row "
               "(diag(p) − p·pᵀ)·dp. When p becomes one-hot, diag(p) − p·pᵀ is zero as a whole: when "
               "the unscaled scores spread with d_k, learning through attention stalls. The table "
               "measures ‖dS‖ with the real backward kernel (attncore.attention_backward); with "
               "÷√d_k its size does not depend on d_k.",
         "zh": "缩放对训练也重要。反向传播中，dP = dO·Vᵀ 是从输出的梯度 dO 传到权重 P 的梯度，"
               "D_i = Σ_j P_ij·dP_ij（等于 Σ_t dO_it·O_it）是它在第 i 行的加权平均；传到分数上的梯度是 "
               "dS = P ∘ (dP − D)，逐行就是 (diag(p) − p·pᵀ)·dp。p 变成 one-hot 时，diag(p) − p·pᵀ "
               "整个变成 0：不缩放的分数随 d_k 拉开时，通过注意力的学习就停了。表中用真正的反向核"
               "（attncore.attention_backward）量 ‖dS‖；除以 √d_k 后它的大小与 d_k 无关。"}),
    Section(
        "normalizers", {}, {}, True,
        {"en": "Why softmax", "zh": "为什么是 softmax"},
        {"en": "Why softmax? Any rule that turns scores into weights should give non-negative "
               "weights that sum to 1. Dividing by the sum gives negative weights as soon as a score "
               "is negative; clipping the negatives first fixes that but, like dividing by the sum, "
               "changes when every score moves by the same amount. Softmax depends only on the "
               "differences between scores: adding 10 to all of them changes nothing "
               "(exp(s + c) / Σ exp(s + c) = exp(s) / Σ exp(s)), which is also why the kernels can "
               "subtract the row maximum without changing the result. Where a method is undefined "
               "(a sum of 0, or nothing left after clipping) the table says so instead of printing "
               "NaN weights as if they were a result.",
         "zh": "为什么是 softmax？把分数变成权重的规则，应当给出非负且和为 1 的权重。直接除以总和，"
               "只要有一个分数为负就会出现负权重；先把负数截成 0 能修好这一点，但和除以总和一样，"
               "所有分数同加一个数时结果会变。softmax 只取决于分数之间的差：全部加 10 什么都不变"
               "（exp(s + c) / Σ exp(s + c) = exp(s) / Σ exp(s)），这也是核函数可以先减去行最大值而不"
               "改变结果的原因。某个方法无定义时（总和为 0，或截断后什么都不剩），表里写明原因，而不是"
               "把 NaN 权重当成结果打印出来。"}),
    Section(
        "scorers", {}, {}, True,
        {"en": "What length does to each scoring function", "zh": "向量长度对各种打分函数的影响"},
        {"en": "Three ways to score a query against a key, on the same vectors stretched to several "
               "lengths. The dot product grows as the square of the length, so longer vectors make a "
               "sharper softmax (the largest weight goes to 1); cosine similarity removes the length "
               "entirely; additive (Bahdanau) scoring passes the vectors through tanh and "
               "saturates.",
         "zh": "用三种方式给查询和键打分，作用在同一组向量上，只是把它们拉伸到不同的长度。点积随长度"
               "的平方增长，所以向量越长 softmax 越尖（最大权重趋向 1）；余弦相似度完全去掉了长度；"
               "加性（Bahdanau）打分让向量过 tanh，会饱和。"}),
    Section(
        "permutation", {}, {}, False,
        {"en": "Reversing the input reverses the output", "zh": "把输入倒过来，输出也倒过来"},
        {"en": "Attention has no notion of order: without positional encodings, reversing the input "
               "tokens of self-attention reverses its output rows — the outputs move with their "
               "tokens (equivariance); they do not stay where they were. The differences left are "
               "rounding, about 1e-16: the sums run in another order.",
         "zh": "注意力本身没有顺序的概念：没有位置编码时，把自注意力的输入倒过来，输出的行也跟着倒过来"
               "——输出随词移动（等变），而不是留在原处不变。剩下的差别是舍入误差，约 1e-16："
               "求和的顺序变了。"}),
    Section(
        "multihead", {}, {}, True,
        {"en": "Many heads, one layer", "zh": "多个头，一层"},
        {"en": "A layer has several heads. With seeded random projections, four heads of the same "
               "six tokens give four different weight maps: each head projects the tokens into its "
               "own d_model/heads dimensions and compares them there. The ledger below the table "
               "(params_h_heads) shows what heads cost: W_Q, W_K, W_V and W_O are d_model × d_model "
               "whatever the number of heads, 4·d_model² parameters in all; more heads split the "
               "same dimensions more finely.",
         "zh": "一层有多个头。用固定种子的随机投影，同样 6 个词的 4 个头给出 4 张不同的权重图：每个头"
               "把词投影到自己的 d_model/heads 维里再比较。表下的账目（params_h_heads）说明头的代价："
               "无论几个头，W_Q、W_K、W_V、W_O 都是 d_model × d_model，总共 4·d_model² 个参数；"
               "头越多，只是把同样的维度分得越细。"}),
    Section(
        "kv_sharing", {}, {"m": 2048}, False,
        {"en": "MHA → GQA → MQA: sharing keys and values", "zh": "MHA → GQA → MQA：共享键和值"},
        {"en": "Grouped-query attention keeps every query head but lets a group of them share one "
               "key/value head; multi-query attention shares a single one. The queries still ask "
               "different questions, but fewer keys and values are stored and read: the KV cache "
               "per token shrinks by heads/kv_heads, and so does the memory a decode step must "
               "stream. attncore takes k and v with fewer heads than q; the table checks the output "
               "against MHA with the shared heads repeated, and times one decode step over the m "
               "cached keys of the facts for each.",
         "zh": "分组查询注意力（GQA）保留所有查询头，但让一组查询头共享一个键值头；多查询注意力（MQA）"
               "全部共享一个。查询仍然问不同的问题，但存下和读出的键值更少：每个词的 KV 缓存缩小为 "
               "heads/kv_heads 分之一，解码一步要读的内存也一样。attncore 接受头数比 q 少的 k、v；"
               "表中把输出与「把共享的头重复成 MHA」对比，并对每种情况量一次在 m 个缓存键（见表下数据）上的解码。"},
        _found_kv),
    Section(
        "causal_row", {}, {}, True,
        {"en": "One causal row, number by number", "zh": "一个因果行，逐个数字"},
        {"en": "Under the causal mask row i may only look at keys j ≤ i. For the row “it” of the "
               "sentence: the exponentials exp(s − max) of the keys it keeps are unchanged, the "
               "later key's numerator is dropped, and the denominator becomes the sum of the kept "
               "ones alone — so every kept weight grows by full denominator ÷ causal denominator, "
               "and the row sums to 1 again. The last column is the kernel's own causal row.",
         "zh": "因果掩码下第 i 行只能看 j ≤ i 的键。以句子中「它」这一行为例：保留下来的键的指数 "
               "exp(s − max) 不变，后面那个键的分子被丢掉，分母只剩保留项之和——所以每个保留的权重都乘上"
               "「完整分母 ÷ 因果分母」，这一行重新加起来等于 1。最后一列是核函数自己算出的因果行。"}),
    Section(
        "causal", {}, {"n": 512}, False,
        {"en": "The causal mask in the blockwise kernel", "zh": "分块核中的因果掩码"},
        {"en": "The causal mask keeps row i to the keys j ≤ i: only n(n+1)/2 of the n² cells do any "
               "work. The blockwise kernel counts the tiles it computes: the lower triangle of the "
               "block grid, with only the diagonal blocks masked; the blocks above are never "
               "touched, so a causal call does a little over half the block work of a full one. "
               "Whether that halves the time is measured below. The figure is the "
               "grid at n = 2048 with 128-row blocks; the facts under the table show that every row "
               "of a small causal example still sums to 1.",
         "zh": "因果掩码让第 i 行只看 j ≤ i 的键：n² 个格子里只有 n(n+1)/2 个在干活。分块核自己数它"
               "算了哪些块：块网格的下三角，只有对角线上的块需要掩码；上面的块根本不碰，所以因果调用的"
               "块工作量只比完整调用的一半多一点；时间是否也减半，见下面的实测。图是 n = 2048、每块 128 行时的网格；表下的数据说明一个因果小例子的"
               "每一行仍然加起来等于 1。"},
        _found_causal),
    Section(
        "memory", {"measured": True}, {}, False,
        {"en": "Why n²: the score table outgrows the KV cache", "zh": "为什么是 n²：分数表比 KV 缓存长得快"},
        {"en": "Why is attention said to cost n² memory? The table holds two setups, and says "
               "which is which. The first four columns are arithmetic for a model layer of 32 heads "
               "of d_head = 128 in FP16 (2 bytes a value): its score table holds n² values per head, "
               "the KV cache that produced it 2·n·d_head per head. Their ratio grows linearly in n: "
               "the table overtakes the cache at n = 256 and is 512 times larger at n = 131 072. The "
               "two measured columns are a different, small setup — one head, d = 64, float32 — the "
               "peak memory of real calls on this machine: the naive kernel holds the n×n table, "
               "the blockwise one only its tiles and output.",
         "zh": "为什么说注意力要 n² 的内存？表里有两套设置，并标明了哪套是哪套。前四列是一个模型层的"
               "算术：32 个头、d_head = 128、FP16（每个值 2 字节）；分数表每个头 n² 个值，产生它的 "
               "KV 缓存每个头 2·n·d_head 个值。两者之比随 n 线性增长：n = 256 时分数表超过缓存，"
               "n = 131 072 时大 512 倍。两列实测值是另一套小设置——1 个头、d = 64、float32——是这台"
               "机器上真实调用的峰值内存：朴素核存着整张 n×n 表，分块核只存它的块和输出。"},
        _found_memory),
    Section(
        "crossover", {}, {"ns": (64, 256, 1024)}, False,
        {"en": "Naive against blockwise on this machine", "zh": "这台机器上的朴素与分块"},
        {"en": "Does materialising the table ever pay? The naive kernel writes the n×m table, "
               "softmaxes it and multiplies it by V, on the same micro-kernels as the blockwise one; "
               "the blockwise kernel never writes the table. The figure plots the time ratio (above "
               "1: blockwise faster) and both peak memories; what the measured table shows on the "
               "run that produced it:",
         "zh": "把整张表算出来存下，什么时候划算？朴素核写出 n×m 的表、做 softmax、再乘 V，用的是和"
               "分块核相同的微核；分块核从不写出整张表。图中画的是时间比（大于 1：分块更快）和两者的峰值"
               "内存；产生这张表的那次运行实际量到的是："},
        _found_crossover),
    Section(
        "regimes", {}, {}, False,
        {"en": "Prefill is compute-bound, decode bandwidth-bound", "zh": "预填充受算力限制，解码受带宽限制"},
        {"en": "Prefill and decode are different problems. A prefill step does about n/4 FLOPs per "
               "byte it moves (float32: 4·d FLOPs per pair, n² pairs, 16·n·d bytes) and is bound by "
               "the FMA units; a decode step reads the whole KV cache to produce one row, half a "
               "FLOP per byte, and is bound by memory bandwidth. The roofs are measured by the "
               "probes in the same call.",
         "zh": "预填充和解码是两类问题。预填充每搬一个字节大约做 n/4 次浮点运算（float32：每对 4·d "
               "次运算，n² 对，16·n·d 字节），受 FMA 单元限制；解码为了产生一行要读完整个 KV 缓存，"
               "每字节半次运算，受内存带宽限制。屋顶由同一次调用中的探针测得。"},
        _found_regimes),
    Section(
        "family", {}, {"ns": (256, 1024)}, False,
        {"en": "The attention family", "zh": "注意力家族"},
        {"en": "What each member of the family changes, and what it costs:\n\n" + _FAMILY_EN +
               "\nThe table below runs four of them on the same data: full attention works on n² "
               "pairs and causal on n(n+1)/2; a sliding window keeps about n·w, so its time grows "
               "linearly once n exceeds w; linear attention needs no pairs at all, n·d² work — "
               "exact softmax weights are what it trades. What this run measured:",
         "zh": "家族中每个成员改了什么、付出什么代价：\n\n" + _FAMILY_ZH +
               "\n下表在同一组数据上跑其中四个：完整注意力处理 n² 对，因果 n(n+1)/2 对；滑动窗口约 "
               "n·w 对，所以 n 超过 w 后时间线性增长；线性注意力完全不需要成对计算，工作量 n·d²——"
               "代价是不再有精确的 softmax 权重。这次运行量到的是："},
        _found_family),
    Section(
        "corrections", {}, {}, True,
        {"en": "Where the sources go wrong", "zh": "原始材料错在哪里"},
        {"en": "The chapter and the article this tutorial follows are good guides, but a few of "
               "their statements are wrong, and a learner who checks them on a kernel will notice. "
               "Each correction below comes with the number attncore computes (the table, and "
               "`attncore.teach.corrections()` to rerun it):",
         "zh": "本教程依据的那一章和那篇文章都是好向导，但其中有几处说法是错的，在核函数上验证的学习者会"
               "发现。下面每一条更正都附上 attncore 算出的数（见表；`attncore.teach.corrections()` "
               "可以重跑）："},
        _found_corrections),
]


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _cell(v) -> str:
    """A table cell: the value formatted, a literal | escaped (|x| is common here)."""
    return _fmt(v).replace("|", "\\|")


def markdown_table(result) -> str:
    """The result's table as Markdown, values to 4 significant digits."""
    rows = result.table()
    cols = list(rows[0])
    lines = ["| " + " | ".join(_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def markdown_facts(result) -> str:
    """The result's facts (the numbers its prose cites) as a Markdown list."""
    from attncore.teach.result import _plain

    return "\n".join(f"- `{k}`: {_fmt(_plain(v))}" for k, v in result.facts.items())


def _section(sec: Section, res, call: str, fig: str, lang: str) -> str:
    measured = {"en": "*Measured on the machine that ran the tour: the numbers vary.*",
                "zh": "*在运行本教程的机器上实测：数字会有出入。*"}[lang]
    found = sec.found(res, lang) if sec.found else ""
    parts = [f"## {sec.title[lang]}", sec.prose[lang]]
    if found:
        parts.append(found)
    parts += [f"```python\nattncore.teach.{sec.name}({call})\n```", markdown_table(res),
              markdown_facts(res)]
    if not sec.deterministic:
        parts.append(measured)
    parts.append(f"![{sec.name}]({fig})")
    return "\n\n".join(parts) + "\n"


DPI = 200  # figures of about 9.6 × 5.4 in: at least 1200 px wide for a slide


def run(out_dir="attncore-tour", markdown=None, quick=False, echo=print,
        markdown_zh=None) -> dict:
    """Run every experiment once: print its table, save its figure (PNG at
    ``DPI``); optionally write the tutorial (``markdown``) and its Chinese
    version (``markdown_zh``) from the same results.  Returns {name: Result}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    targets = {lang: path for lang, path in (("en", markdown), ("zh", markdown_zh)) if path}
    results, sections = {}, {lang: [] for lang in targets}
    for sec in SECTIONS:
        kwargs = sec.quick if quick else sec.full
        res = getattr(teach, sec.name)(**kwargs)
        call = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        results[sec.name] = res
        echo(repr(res))
        echo("")
        ax = res.plot()
        fig_path = os.path.join(out_dir, f"{sec.name}.png")
        ax.figure.savefig(fig_path, dpi=DPI, bbox_inches="tight")
        plt.close(ax.figure)
        for lang, path in targets.items():
            rel = os.path.relpath(fig_path, os.path.dirname(os.path.abspath(path)))
            sections[lang].append(_section(sec, res, call, rel, lang))
    for lang, path in targets.items():
        with open(path, "w") as f:
            f.write(TUTORIAL_HEAD[lang] + "\n".join(sections[lang]))
    return results


TUTORIAL_HEAD = {
    "en": """# A guided tour of attention, on attncore's own kernels

Every table below was produced by
`attncore tour --markdown docs/tutorial.md --markdown-zh docs/tutorial.zh.md --out docs/tour`,
running the same C kernels that `attncore.attention` runs — scores, softmax and attention never come
from a second, toy implementation. Each experiment is a function of `attncore.teach`, reproducible by
its seed; the tables of the deterministic ones are checked against the code by the test suite. The
sections follow the chapter: the sentence, the shapes, why the formula is what it is, what it costs,
the family, and where the sources go wrong. Under each table, the facts its prose cites. The live
notebooks (`attncore notebook`) let you move every number here with a slider.
[中文版](tutorial.zh.md)

""",
    "zh": """# 注意力导览：在 attncore 自己的核函数上

下面每张表都由
`attncore tour --markdown docs/tutorial.md --markdown-zh docs/tutorial.zh.md --out docs/tour`
生成，跑的就是 `attncore.attention` 所用的 C 核函数——分数、softmax 和注意力从不来自另一个玩具实现。
每个实验都是 `attncore.teach` 中的一个函数，用种子可以复现；确定性实验的表由测试套件与代码核对。
各节顺序跟随那一章：一句话、形状、公式为什么长这样、它的代价、注意力家族，以及原始材料错在哪里。
每张表下列出正文引用的数据。交互笔记本（`attncore notebook`）可以用滑块拨动这里的每个数。
表格与图和英文版共用（同一次运行、同样的数字）。[English](tutorial.md)

""",
}
