"""`attncore tour`: every teaching experiment, its table and figure, and a
guided tutorial in Markdown, in English and in Chinese (the prose written here,
the numbers run now, once, for both)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from attncore import teach
from attncore.teach import zh

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


def _pct1(x):
    return f"{100 * x:.1f} %"


# ---- what each run found, in words --------------------------------------------------


ZH_WORD = dict(zip(("cat", "was", "tired", "so", "it", "slept"),
                   ("猫", "很", "累", "所以", "它", "睡了")))


def _found_sentence(res, lang):
    f = res.facts
    if lang == "zh":
        return (f"「它」这一行把 {f['weight_it_cat']:.2f} 的权重给了「猫」，是全行最大的一格；"
                f"每一行的和与 1 相差不超过 {f['rows_sum_to_one_max_error']:.1e}。\n\n"
                f"那一章的互动：把「它」的 Q 换成「很」的书脊，原文说「它对「很」的权重从 3.5% 跳到 "
                f"71.9%，对「猫」从 46.7% 掉到 4.5%」。在这里的向量上做同样的替换：「它」对「很」"
                f"从 {_pct1(f['weight_it_was'])} 升到 {_pct1(f['swap_weight_it_was'])}，对「猫」从 "
                f"{_pct1(f['weight_it_cat'])} 掉到 {_pct1(f['swap_weight_it_cat'])}，方向相同；"
                f"但这一行最大的一格给了「{ZH_WORD[f['swap_looks_at']]}」"
                f"（{_pct1(f['swap_weight_top'])}），不是「很」。原因是那一章没有印出它的 Q、K 数值，"
                f"这里的键是另一组手工数：「累」的键与「很」的键方向几乎相同（余弦 0.97）而更长，"
                f"点积打分会把长度算进去（见最后一节第 4 条更正）。")
    return (f"Row “it” gives {f['weight_it_cat']:.2f} of its weight to “cat”, the largest in its "
            f"row; every row sums to 1 within {f['rows_sum_to_one_max_error']:.1e}.\n\n"
            f"The chapter's own interaction replaces “it”'s query by the key of “was” (很) and "
            f"reports its weight on “was” jumping from 3.5 % to 71.9 % and on “cat” falling from "
            f"46.7 % to 4.5 %. The same swap on these vectors moves “was” from "
            f"{_pct1(f['weight_it_was'])} to {_pct1(f['swap_weight_it_was'])} and “cat” from "
            f"{_pct1(f['weight_it_cat'])} to {_pct1(f['swap_weight_it_cat'])}, the same direction; "
            f"but the row's largest weight goes to “{f['swap_looks_at']}” "
            f"({_pct1(f['swap_weight_top'])}), not to “was”. The chapter does not print its Q and K, "
            f"and these are other hand-made numbers: here “tired” has a key in nearly the direction "
            f"of “was”'s (cosine 0.97) but longer, and the dot product counts length (correction 4 "
            f"in the last section).")


def _found_causal(res, lang):
    full, causal = res.table()
    f = res.facts
    ratio, lo, hi = (f["time_ratio_full_over_causal"], f["time_ratio_lowest"],
                     f["time_ratio_highest"])
    blocks = f["block_ratio_full_over_causal"]
    nb = int(round(full["blocks_total"] ** 0.5))
    if lang == "zh":
        return (f"这次运行：因果版算了 {causal['blocks_computed']} 块（其中对角线上 "
                f"{causal['blocks_masked']} 块带掩码），跳过 {causal['blocks_skipped']} 块，"
                f"共 {causal['blocks_total']} 块。块数之比是 {nb}² ÷ ({nb}·{nb + 1}/2) = "
                f"{blocks:.2f}，不是 2：对角线上的块整块都要算，只是一半被遮住。"
                f"完整注意力的时间是因果版的 {ratio:.2f} 倍（{f['rounds']} 轮成对交错测量的中位数，"
                f"各轮从 {lo:.2f} 到 {hi:.2f}）。比块数之比还小的那部分，来自对角块上额外的掩码判断，"
                f"以及与 n² 无关的固定开销（打包 K、分派线程），它们因果版一分不少。"
                f"8×8 小例子里对角线以上的非零权重有 {f['weights_above_diagonal']} 个，"
                f"每行之和与 1 相差 {f['rows_sum_to_one_max_error']:.1e}。")
    return (f"On this run the causal kernel computed {causal['blocks_computed']} blocks "
            f"({causal['blocks_masked']} of them masked, on the diagonal) and skipped "
            f"{causal['blocks_skipped']} of {causal['blocks_total']}. The block ratio is "
            f"{nb}² ÷ ({nb}·{nb + 1}/2) = {blocks:.2f}, not 2: a diagonal block is computed whole "
            f"and half of it masked. Full attention took {ratio:.2f}× the causal time (the median "
            f"of {f['rounds']} paired, interleaved rounds; the rounds ranged from {lo:.2f} to "
            f"{hi:.2f}). What falls short of the block ratio is the diagonal blocks' mask test and "
            f"the fixed costs that do not shrink with the mask (packing K, starting the threads). "
            f"In the 8×8 example, {f['weights_above_diagonal']} weights above the diagonal are "
            f"non-zero and every row sums to 1 within {f['rows_sum_to_one_max_error']:.1e}.")


def _found_crossover(res, lang):
    rows = res.table()
    rounds = res.facts.get("rounds", 1)
    naive_wins = [r["n"] for r in rows if r["ratio_highest"] < 1]
    flash_wins = [r["n"] for r in rows if r["ratio_lowest"] > 1]
    unclear = [r["n"] for r in rows if r["n"] not in naive_wins + flash_wins]
    last = rows[-1]
    mem = last["naive_peak_bytes"] / last["flash_peak_bytes"]
    spans = ", ".join(f"{r['n']}: {r['naive_over_flash']:.2f} ({r['ratio_lowest']:.2f}–"
                      f"{r['ratio_highest']:.2f})" for r in rows)

    def ns(xs):
        return ", ".join(map(str, xs)) if xs else "—"

    if lang == "zh":
        return (f"这次运行测得的「朴素时间 ÷ 分块时间」（{rounds} 轮成对交错测量的中位数，括号里是各轮的"
                f"最低与最高）：{spans}。每一轮都是朴素版更快的 n：{ns(naive_wins)}；每一轮都是分块版"
                f"更快的 n：{ns(flash_wins)}；各轮不一致、这次测量分不出胜负的 n：{ns(unclear)}。"
                f"在 n = {last['n']}，朴素版的峰值内存是分块版的 {mem:.1f} 倍。"
                f"为什么会有交叉，下一节用搬运的字节数来解释。")
    return (f"On the run that produced this table, naive time ÷ blockwise time (the median of "
            f"{rounds} paired, interleaved rounds; in brackets the lowest and highest round): "
            f"{spans}. Naive was faster in every round at n = {ns(naive_wins)}; blockwise in "
            f"every round at n = {ns(flash_wins)}; the rounds disagreed, so this measurement "
            f"cannot call it, at n = {ns(unclear)}. At n = {last['n']} the naive call's peak "
            f"memory is {mem:.1f}× the blockwise one's. The next section explains the crossover "
            f"by the bytes each moves.")


def _found_family(res, lang):
    rows = res.table()
    ns = sorted({r["n"] for r in rows})
    t = {(r["member"], r["n"]): r["seconds"] for r in rows}
    members = list(dict.fromkeys(r["member"] for r in rows))
    big, small = ns[-1], ns[0]
    rel = {m: t[(m, big)] / t[("full", big)] for m in members}
    grow = {m: t[(m, big)] / t[(m, small)] for m in members}
    parts_zh = "；".join(f"{m}：{rel[m]:.2f} 倍完整注意力的时间，n 从 {small} 到 {big} 时间涨了 "
                        f"{grow[m]:.1f} 倍" for m in members)
    parts = "; ".join(f"{m}: {rel[m]:.2f}× full's time, {grow[m]:.1f}× slower from n = {small} to "
                      f"{big}" for m in members)
    same = [r["n"] for r in rows if r["member"].startswith("window")
            and r["pairs"] == next(x["pairs"] for x in rows
                                   if x["member"] == "causal" and x["n"] == r["n"])]
    spread = max(r["spread"] for r in rows)
    note = ""
    if same:
        note = (f" At n = {', '.join(map(str, same))} the window keeps every causal pair: the same "
                f"work, so any gap between their times there is the machine's noise (the widest "
                f"spread of any time in this table, slowest round ÷ fastest − 1, was "
                f"{_pct(spread)}).")
        if lang == "zh":
            note = (f"在 n = {', '.join(map(str, same))}，窗口保留了全部因果对：工作量完全相同，"
                    f"两者时间上的差只是机器的噪声（本表中任何一个时间各轮之间的最大差距，"
                    f"即最慢一轮 ÷ 最快一轮 − 1，为 {_pct(spread)}）。")
    if lang == "zh":
        return f"这次运行在最大的 n = {big}：{parts_zh}（n 涨了 {big // small} 倍，n² 涨了 " \
               f"{(big // small) ** 2} 倍）。{note}"
    return (f"On this run, at the largest n = {big}: {parts} (n grew {big // small}×, n² "
            f"{(big // small) ** 2}×).{note}")


def _decode_compute(rows, f, lang):
    """What the fastest-computing layout reached against the FMA roof, in words."""
    top = max(rows, key=lambda r: r["gflops"])
    share = _pct(top["gflops"] / f["fma_gflops"])
    if lang == "zh":
        return (f"；不过实测最快的 {top['kind']} {f['heads']}/{top['kv_heads']} 只到 "
                f"{top['gflops']:.0f} GFLOP/s，FMA 屋顶的 {share}：解码一步每个头只有一行查询、每个键"
                f"一次指数，FMA 单元远不如预填充的块用得满")
    return (f" — though the fastest, {top['kind']} {f['heads']}/{top['kv_heads']}, reached "
            f"{top['gflops']:.0f} GFLOP/s, {share} of the FMA roof: with one query row per head "
            f"and an exponential per key, a decode step keeps the FMA units far less busy than a "
            f"prefill tile")


def _found_kv(res, lang):
    rows = res.table()
    f = res.facts
    mha = rows[0]
    parts, parts_zh = [], []
    for r in rows[1:]:
        b = mha["kv_cache_bytes"] / r["kv_cache_bytes"]
        parts.append(f"{r['kind']} {f['heads']}/{r['kv_heads']}: {b:.0f}× fewer bytes, "
                     f"{r['speedup_vs_mha']:.2f}× faster (rounds {r['speedup_lowest']:.2f}–"
                     f"{r['speedup_highest']:.2f}), intensity {r['intensity']:g} FLOP/byte, "
                     f"{r['gbs']:.1f} GB/s and {r['gflops']:.0f} GFLOP/s")
        parts_zh.append(f"{r['kind']} {f['heads']}/{r['kv_heads']}：字节少 {b:.0f} 倍，快 "
                        f"{r['speedup_vs_mha']:.2f} 倍（各轮 {r['speedup_lowest']:.2f}–"
                        f"{r['speedup_highest']:.2f}），强度 {r['intensity']:g} FLOP/字节，"
                        f"{r['gbs']:.1f} GB/s、{r['gflops']:.0f} GFLOP/s")
    worst = max(r["max_diff_vs_repeated"] for r in rows[1:])
    left = [r for r in rows if r["intensity"] < f["ridge_flop_per_byte"]]
    right = [r for r in rows if r["intensity"] >= f["ridge_flop_per_byte"]]

    def names(rs):
        return ", ".join(f"{r['kind']} {f['heads']}/{r['kv_heads']}" for r in rs) or "—"

    reached = ", ".join(f"{r['kind']} {f['heads']}/{r['kv_heads']} "
                        f"{_pct(r['speedup_vs_mha'] * r['kv_cache_bytes'] / mha['kv_cache_bytes'])}"
                        for r in left[1:]) or "—"
    slow = left[1:] and all(r["gbs"] < mha["gbs"] for r in left[1:])
    slower = ", the smaller caches being read more slowly than MHA's" if slow else ""
    slower_zh = "，因为较小的缓存读得比 MHA 的慢" if slow else ""

    if lang == "zh":
        return (f"这次运行在 m = {f['m']} 个缓存的键上：MHA 读 {mha['kv_cache_bytes'] / 2**20:.0f} MiB，"
                f"{mha['gbs']:.1f} GB/s（读带宽屋顶 {f['read_gbs']:.1f} GB/s，FMA 屋顶 "
                f"{f['fma_gflops']:.0f} GFLOP/s，脊点 {f['ridge_flop_per_byte']:.1f} FLOP/字节，"
                f"同一次调用测得）；{'；'.join(parts_zh)}。字节随键值头减少，运算量却不变："
                f"每个查询头仍要给每个键打分（每头每键 4·d_head 次运算），所以强度随共享增大。"
                f"在脊点左边（{names(left)}），按屋顶模型一步受带宽限制，加速比最多可达字节之比；"
                f"这次运行达到了它的 {reached}{slower_zh}。到了右边"
                f"（{names(right)}）按屋顶模型是运算成了瓶颈，再少的字节也换不来时间"
                f"{_decode_compute(rows, f, 'zh')}。所以加速比不是头数之比 "
                f"{f['heads']}，也只在带宽受限时接近字节之比；在另一台机器上，字节之比以外的差别还来自"
                f"缓存变小后落进了更快的一级缓存。与把共享的头重复成 MHA 相比，输出相差不超过 {worst:.1e}。")
    return (f"On this run, over m = {f['m']} cached keys: MHA reads "
            f"{mha['kv_cache_bytes'] / 2**20:.0f} MiB at {mha['gbs']:.1f} GB/s (read roof "
            f"{f['read_gbs']:.1f} GB/s, FMA roof {f['fma_gflops']:.0f} GFLOP/s, ridge "
            f"{f['ridge_flop_per_byte']:.1f} FLOP/byte, measured in the same call); "
            f"{'; '.join(parts)}. The bytes shrink with the key/value heads, the arithmetic does "
            f"not: every query head still scores every key (4·d_head FLOPs per head and key), so "
            f"sharing raises the intensity. Left of the ridge ({names(left)}) the roofline has a "
            f"step bound by bandwidth, so the speed-up could reach the bytes ratio; this run "
            f"reached {reached} of it{slower}. "
            f"Right of the ridge ({names(right)}) the "
            f"roofline says the arithmetic binds, and fewer bytes buy no more time"
            f"{_decode_compute(rows, f, 'en')}. So the speed-up is not the head "
            f"ratio {f['heads']}, and near the bytes ratio only while bandwidth binds; on another "
            f"machine a smaller cache may also land in a faster cache level and be read faster. "
            f"The outputs equal MHA on the shared heads repeated to within {worst:.1e}.")


def _found_memory(res, lang):
    rows = [r for r in res.table() if r.get("measured_naive_bytes")]
    if not rows:
        return ""
    r = rows[-1]
    out_mib = r["n"] * 64 * 4 / 2**20
    if lang == "zh":
        return (f"这次运行在 n = {r['n']}（1 个头，d = 64，float32）：朴素调用的峰值 "
                f"{r['measured_naive_bytes'] / 2**20:.0f} MiB（表本身 "
                f"{r['n'] ** 2 * 4 / 2**20:.0f} MiB），分块调用 "
                f"{r['measured_flash_bytes'] / 2**20:.1f} MiB——输出 O 占 {out_mib:.1f} MiB，"
                f"打包的 K 副本又是 {out_mib:.1f} MiB，都是 O(n·d)。")
    return (f"On this run at n = {r['n']} (one head, d = 64, float32): the naive call peaked at "
            f"{r['measured_naive_bytes'] / 2**20:.0f} MiB (the table alone is "
            f"{r['n'] ** 2 * 4 / 2**20:.0f} MiB), the blockwise one at "
            f"{r['measured_flash_bytes'] / 2**20:.1f} MiB — the output O is {out_mib:.1f} MiB of it "
            f"and the packed copy of K another {out_mib:.1f} MiB, both O(n·d).")


def _found_online(res, lang):
    f = res.facts
    if lang == "zh":
        return (f"这次运行：各块合并后的输出与一次调用计算核（block_k = {f['block']}，它自己数到 "
                f"{f['kernel_tiles']} 个块）相差 {f['max_diff_vs_kernel']:.1e}，与完整 softmax 行乘 V "
                f"相差 {f['max_diff_vs_full_softmax']:.1e}。「它」这一行最大的分数在第一块（「猫」），"
                f"所以 m 再也没有升过，每次的重缩放因子都是 1；换成「很」的键之后，最大分数落在第二块"
                f"（「累」），前面累加的 l 和输出要乘上 {f['swap_rescale']:.4f}。反向传播只保存 "
                f"{f['saved_for_backward'].replace('one number per row', '每行一个数')}：由它重算的权重 "
                f"exp(s − lse) 与 softmax 行相差 {f['max_diff_weights_from_lse']:.1e}，反向核给出的梯度"
                f"与 NumPy 参考实现相差 {f['max_diff_backward_vs_reference']:.1e}。")
    return (f"On this run the merged output of the blocks equals one kernel call "
            f"(block_k = {f['block']}, which counted {f['kernel_tiles']} tiles itself) within "
            f"{f['max_diff_vs_kernel']:.1e}, and the full softmax row times V within "
            f"{f['max_diff_vs_full_softmax']:.1e}. Row “it” has its largest score in the first "
            f"block (“cat”), so m never rises and every rescale factor is 1; with the key of “was” "
            f"the largest score arrives in the second block (“tired”), and what was accumulated, l "
            f"and the output, is multiplied by {f['swap_rescale']:.4f}. The backward keeps only "
            f"{f['saved_for_backward']}: the weights recomputed as exp(s − lse) equal the softmax "
            f"row within {f['max_diff_weights_from_lse']:.1e}, and the backward kernel's gradients "
            f"equal the NumPy reference's within {f['max_diff_backward_vs_reference']:.1e}.")


def _found_modifiers(res, lang):
    f = res.facts
    (cat0, cat1), (own0, own1) = f["alibi_first_key"], f["alibi_own_key"]
    if lang == "zh":
        return (f"这次运行：ALiBi（斜率 {f['slope']:g}）让「猫」（往回 4 个位置）的权重从 {cat0:.3f} "
                f"降到 {cat1:.3f}，「它」自己的从 {own0:.3f} 升到 {own1:.3f}——越近越重。查询放大 "
                f"{f['sharpen']:g} 倍后最大分数是 {f['raw_largest_score']:.2f}，这一行几乎只看一个键"
                f"（最大权重 {f['sharp_max_weight']:.3f}）；软上限 {f['softcap']:g} 把每个分数压到 "
                f"{f['capped_largest_score']:.4f} 以下，最大权重回到 {f['capped_max_weight']:.3f}。"
                f"汇点 logit {f['sink']:g} 拿走了 {f['sink_weight']:.3f} 的权重，这一行的权重加起来只有 "
                f"{f['sink_row_sum']:.3f}，而各键之间的比例不变（相差 {f['sink_same_ratios']:.1e}）。"
                f"计算核的权重与 NumPy 参考实现相差 {f['max_diff_vs_reference']:.1e}。")
    return (f"On this run ALiBi (slope {f['slope']:g}) took “cat” (4 positions back) from weight "
            f"{cat0:.3f} to {cat1:.3f} and raised “it” itself from {own0:.3f} to {own1:.3f}: the "
            f"nearer, the heavier. With the query {f['sharpen']:g}× larger the largest score is "
            f"{f['raw_largest_score']:.2f} and the row looks at almost one key (largest weight "
            f"{f['sharp_max_weight']:.3f}); the soft-cap {f['softcap']:g} holds every score under "
            f"{f['capped_largest_score']:.4f} and the largest weight falls back to "
            f"{f['capped_max_weight']:.3f}. The sink logit {f['sink']:g} took "
            f"{f['sink_weight']:.3f} of the weight: the row sums to {f['sink_row_sum']:.3f}, its "
            f"keys keeping their ratios (within {f['sink_same_ratios']:.1e}). The kernel's "
            f"weights equal the NumPy "
            f"reference's within {f['max_diff_vs_reference']:.1e}.")


def _found_traffic(res, lang):
    f = res.facts
    rows = res.table()
    caches = ", ".join(f"{k[:2]} {f[k] / 2**20:g} MiB" for k in ("L2_bytes", "L3_bytes") if k in f)
    first_out = next((r for r in rows if r["table_fits"] == "DRAM"), None)
    cells = "; ".join(f"n = {r['n']}: {r['naive_bytes'] / 2**20:.0f} MiB ({r['table_fits']}) "
                      f"against {r['blockwise_bytes'] / 2**20:.1f} MiB, time ratio "
                      f"{r['naive_over_blockwise']:.2f} ({r['ratio_lowest']:.2f}–"
                      f"{r['ratio_highest']:.2f})" for r in rows)
    cells_zh = "；".join(f"n = {r['n']}：{r['naive_bytes'] / 2**20:.0f} MiB（表在 {r['table_fits']}）"
                         f"对 {r['blockwise_bytes'] / 2**20:.1f} MiB，时间比 "
                         f"{r['naive_over_blockwise']:.2f}（{r['ratio_lowest']:.2f}–"
                         f"{r['ratio_highest']:.2f}）" for r in rows)
    extra = [r for r in rows if r["naive_seconds"] > r["blockwise_seconds"]]
    share = ""
    if extra:
        r = extra[-1]
        gap = r["naive_seconds"] - r["blockwise_seconds"]
        moved = (r["naive_bytes"] - r["blockwise_bytes"]) / (f["read_gbs"] * 1e9)
        share = (f" At n = {r['n']} the naive call's extra bytes would take {moved * 1e3:.1f} ms "
                 f"at the read roof; it took {gap * 1e3:.1f} ms longer than blockwise, so the "
                 f"bytes account for {_pct(min(moved / gap, 1))} of the gap, and the rest is the "
                 f"passes themselves: every cell stored and loaded three more times (even where "
                 f"the table sits in a cache), where the blockwise kernel keeps its tile in "
                 f"registers and L1.")
        share_zh = (f"在 n = {r['n']}，朴素版多搬的字节按读带宽屋顶要 {moved * 1e3:.1f} ms；"
                    f"它实际比分块版慢了 {gap * 1e3:.1f} ms，所以字节只占这段差距的 "
                    f"{_pct(min(moved / gap, 1))}，其余是那几遍扫描本身：每一格都要多存、多读三次"
                    f"（即使表在缓存里），而分块计算核把它的块留在寄存器和 L1 里。")
    beyond = (f" The table leaves the caches from n = {first_out['n']} on."
              if first_out else " Every table here fit a cache level.")
    if lang == "zh":
        beyond = (f"从 n = {first_out['n']} 起表放不进缓存。" if first_out
                  else "这里每张表都放得进某一级缓存。")
        return (f"这台机器（{caches}；读带宽屋顶 {f['read_gbs']:.1f} GB/s，FMA 屋顶 "
                f"{f['fma_gflops']:.0f} GFLOP/s，均为本次测得）：{cells_zh}。{beyond}"
                f"{share_zh if extra else ''}\n\n"
                f"强度：分块核每个查询块把 K、V 读一遍，所以从内存看它的强度是 "
                f"4·n·m·d ÷ (8·m·d·n/{f['block_q']}) = {f['block_q']}/2 = "
                f"{f['blockwise_intensity_flop_per_byte']:.0f} FLOP/字节（float32），由块的大小决定，"
                f"与 n 无关；朴素版的表每格 16 字节、每格 4·d FLOP，强度 d/4 = "
                f"{f['naive_intensity_flop_per_byte']:.0f}。只算必须的流量（Q、K、V、O 各一次）"
                f"时强度是 n/4，那只在 K、V 一直留在缓存里时成立。这台 CPU 的脊点是 "
                f"{f['ridge_flop_per_byte']:.1f} FLOP/字节（两个核），两种核都在它右边；"
                f"{f['gpu']} 公布的数字给出约 {f['gpu_ridge_flop_per_byte']:.0f} FLOP/字节——"
                f"在那里 {f['block_q']} 行的块会受带宽限制，所以 GPU 核要把块放在片上 SRAM 里、"
                f"块再大一些。")
    return (f"This machine ({caches}; read roof {f['read_gbs']:.1f} GB/s and FMA roof "
            f"{f['fma_gflops']:.0f} GFLOP/s, measured now): {cells}.{beyond}{share}\n\n"
            f"Intensity: the blockwise kernel reads K and V once per query tile, so from memory "
            f"its intensity is 4·n·m·d ÷ (8·m·d·n/{f['block_q']}) = {f['block_q']}/2 = "
            f"{f['blockwise_intensity_flop_per_byte']:.0f} FLOP per byte in float32 — set by the "
            f"tile, not by n; the naive table costs 16 bytes and 4·d FLOPs per cell, d/4 = "
            f"{f['naive_intensity_flop_per_byte']:.0f}. Counting only the compulsory traffic (Q, K, "
            f"V and O once) gives n/4, which holds only while K and V stay in cache. The ridge of "
            f"this CPU is {f['ridge_flop_per_byte']:.1f} FLOP/byte (two cores), left of both "
            f"kernels; {f['gpu']}'s published figures put it near "
            f"{f['gpu_ridge_flop_per_byte']:.0f} FLOP/byte — where a {f['block_q']}-row tile would "
            f"be bandwidth-bound, which is why GPU kernels keep larger tiles in on-chip SRAM.")


def _found_decode(res, lang):
    f = res.facts
    gib = 2**30
    per = {k: f[f"model_cache_per_token_{k}"] for k in ("float32", "bfloat16")}
    at = {k: f[f"model_cache_at_{f['context']}_{k}"] for k in ("float32", "bfloat16")}
    total = f["model_kv_bytes_read_generating_bfloat16"]
    if lang == "zh":
        return (f"整个模型（{f['model'].replace('layers', '层').replace('query', '查询头')}）："
                f"每个词的缓存 float32 {per['float32'] / 2**10:.0f} KiB、bfloat16 "
                f"{per['bfloat16'] / 2**10:.0f} KiB；{f['context']} 个词的上下文就是 "
                f"{at['float32'] / gib:.0f} GiB（float32）或 {at['bfloat16'] / gib:.0f} GiB（bfloat16）。"
                f"在这个上下文之后生成 {f['generate']} 个词，每一步都要把整个缓存读一遍，"
                f"一共读 {total / gib:.0f} GiB（bfloat16）——是缓存本身的 "
                f"{total / at['bfloat16']:.0f} 倍。批处理不省这笔账：权重是大家共用的，缓存却是每个序列"
                f"自己的。这次运行量了 {f['batch']} 个序列一起解码一步（每个序列 "
                f"{f['batch_kv_bytes_per_sequence'] / 2**20:.0f} MiB 的 K/V）：时间是 1 个序列的 "
                f"{f['batch_step_time_ratio']:.2f} 倍（{f['rounds']} 轮的中位数，各轮 "
                f"{f['batch_ratio_lowest']:.2f}–{f['batch_ratio_highest']:.2f}）。")
    return (f"A whole model ({f['model']}): the cache holds {per['float32'] / 2**10:.0f} KiB per "
            f"token in float32, {per['bfloat16'] / 2**10:.0f} KiB in bfloat16; a "
            f"{f['context']}-token context is {at['float32'] / gib:.0f} GiB (float32) or "
            f"{at['bfloat16'] / gib:.0f} GiB (bfloat16). Generating {f['generate']} tokens after "
            f"it reads the whole cache at every step: {total / gib:.0f} GiB in all (bfloat16), "
            f"{total / at['bfloat16']:.0f}× the cache itself. Batching does not shrink that: the "
            f"weights are shared by the batch, the caches are not. This run timed one decode "
            f"step for {f['batch']} sequences ({f['batch_kv_bytes_per_sequence'] / 2**20:.0f} MiB "
            f"of K/V each) at {f['batch_step_time_ratio']:.2f}× the time of one (median of "
            f"{f['rounds']} rounds, {f['batch_ratio_lowest']:.2f}–{f['batch_ratio_highest']:.2f}).")


def _found_regimes(res, lang):
    f = res.facts
    rows = {(r["regime"], r["precision"]): r for r in res.table()}
    pre, dec = rows["prefill", "float32"], rows["decode", "float32"]
    caches = [(c, rows["decode", c]["gflops"] / dec["gflops"])
              for c in ("float16", "bfloat16", "int8") if ("decode", c) in rows]
    bf = rows.get(("prefill", "bfloat16"))
    if lang == "zh":
        text = (f"这次运行量出的屋顶：FMA {f['fma_gflops']:.0f} GFLOP/s，读带宽 "
                f"{f['read_gbs']:.1f} GB/s，脊点 {f['ridge_flop_per_byte']:.1f} FLOP/字节。"
                f"float32 预填充达到 {pre['gflops']:.0f} GFLOP/s（屋顶的 "
                f"{_pct(pre['gflops'] / pre['roof_gflops'])}），float32 缓存的解码读到 "
                f"{dec['gbs']:.1f} GB/s（读带宽的 {_pct(dec['gbs'] / f['read_gbs'])}）。")
        if caches:
            text += ("字节减半，解码就快（float32 缓存的时间 ÷ 各缓存的）：" +
                     "，".join(f"{c} {x:.2f} 倍" for c, x in caches) + "。")
        if bf is not None:
            text += (f"bfloat16 预填充 {bf['gflops']:.0f} GFLOP/s，是 float32 的 "
                     f"{bf['gflops'] / pre['gflops']:.2f} 倍：它的算术仍是 float32，"
                     f"除非 CPU 的 bfloat16 点积更快。")
        return text
    text = (f"Roofs measured on this run: FMA {f['fma_gflops']:.0f} GFLOP/s, read "
            f"{f['read_gbs']:.1f} GB/s, ridge at {f['ridge_flop_per_byte']:.1f} FLOP/byte. The "
            f"float32 prefill reached {pre['gflops']:.0f} GFLOP/s "
            f"({_pct(pre['gflops'] / pre['roof_gflops'])} of its roof), the decode step on a "
            f"float32 cache read {dec['gbs']:.1f} GB/s ({_pct(dec['gbs'] / f['read_gbs'])} of "
            f"the read roof).")
    if caches:
        text += (" Halve the bytes and decode speeds up (the float32 cache's time ÷ each "
                 "cache's): " + ", ".join(f"{c} {x:.2f}×" for c, x in caches) + ".")
    if bf is not None:
        text += (f" A bfloat16 prefill ran at {bf['gflops']:.0f} GFLOP/s, "
                 f"{bf['gflops'] / pre['gflops']:.2f}× float32: its arithmetic is still float32 "
                 f"unless the CPU's bfloat16 dot products are faster.")
    return text


def _found_corrections(res, lang):
    f = res.facts
    nb, sb = f["naive_big"], f["safe_big"]
    if lang == "zh":
        items = [
            f"**几何那篇文章的例子是它自己的代码算不出来的。** 文中 Q、K 都是 512 维的随机数，"
            f"除以 √512，打印出的 batch=0 的 10×10 权重全在 0.098–0.102 之间，几乎均匀。同样的计算在 "
            f"attncore 上：缩放后分数的方差是 {f['variance_512']:.2f}（理论上就是 1），batch 0 的权重从 "
            f"{f['weights_min']:.4f} 到 {f['weights_max']:.2f}（batch 1 最大到 "
            f"{f['weights_max_batch1']:.2f}），每行平均熵 {f['entropy_512']:.2f}，"
            f"而均匀分布是 ln 10 = {f['ln10']:.2f}。方差为 1 的分数经过 softmax，不可能得到那样平的行"
            f"（图即这次算出的 batch 0）。更直接的证据在文章自己打印的数里：它说「每行数值相加严格等于 1」，"
            f"可它印出的十行加起来是 {f['article_row_sums_min']:.4f} 到 "
            f"{f['article_row_sums_max']:.4f}——差到第三位，远超八位小数的舍入，这些行不是一次 softmax "
            f"的输出。",
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
            f"diag(p) − p·pᵀ；p = softmax([60, 0, 0, 0, 0, 0]) 时，被选中那一格自己的元素 "
            f"p₁(1 − p₁) 精确值是 {f['jacobian_chosen_exact']:.2e}（按 float64 直接算 p₁·(1 − p₁) "
            f"得 {f['jacobian_chosen_float64']:g}，因为 1 − p₁ 舍入成了 0），其余各格最大 "
            f"{f['jacobian_onehot']:.1e}；而在普通的分数上是 {f['jacobian_moderate']:.2f}。",
            f"**把输入倒过来，权重是被重排了，而不是不变。** 自注意力对输入顺序是等变的："
            f"倒序后的权重矩阵与原来的相差 {f['reverse_unchanged']:.2f}，与原矩阵行列都倒过来相比只差 "
            f"{f['reverse_permuted']:.1e}。每个词的输出跟着词走；要区分顺序，必须另外注入位置信息。",
        ]
    else:
        items = [
            f"**The geometry article's example cannot come from its own code.** It draws random Q "
            f"and K of width 512, divides by √512 and prints batch 0's 10×10 weight matrix with "
            f"every entry between 0.098 and 0.102, nearly uniform. The same computation on "
            f"attncore: the scaled scores have variance {f['variance_512']:.2f} (1 in theory), "
            f"batch 0's weights run from {f['weights_min']:.4f} to {f['weights_max']:.2f} (batch "
            f"1's up to {f['weights_max_batch1']:.2f}), and the mean row entropy is "
            f"{f['entropy_512']:.2f} against ln 10 = {f['ln10']:.2f} for a uniform row. Scores of "
            f"variance 1 cannot give rows that flat (the figure is this run's batch 0). The "
            f"stronger evidence is in the article's own numbers: it says each row sums exactly "
            f"to 1 (「每行数值相加严格等于 1」), yet its ten printed rows sum to "
            f"{f['article_row_sums_min']:.4f} … {f['article_row_sums_max']:.4f} — off in the third "
            f"digit, far beyond the rounding of eight printed decimals, so they are not the output "
            f"of one softmax.",
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
            f"softmax's Jacobian is diag(p) − p·pᵀ; at p = softmax([60, 0, 0, 0, 0, 0]) the chosen "
            f"cell's own entry p₁(1 − p₁) is exactly {f['jacobian_chosen_exact']:.2e} (computed in "
            f"float64 as p₁·(1 − p₁) it is {f['jacobian_chosen_float64']:g}: 1 − p₁ rounds to 0), "
            f"and the other entries are at most {f['jacobian_onehot']:.1e}, against "
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
               "起来。下表的形状是计算核实际返回的：n = 6 个查询对 m = 8 个键（n ≠ m，像交叉注意力"
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
               "d²；它不对称，所以 a 看 b 的程度不等于 b 看 a 的程度（S ≠ Sᵀ）。表中每一条都在计算核上"
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
               "is negative; clipping the negatives first fixes that, but zeroes some keys (no "
               "weight, so no gradient) and, like dividing by the sum, changes when every score "
               "moves by the same amount. Softmax is not the only rule with all three properties: "
               "subtracting the minimum, (s − min + ε)/Σ(s − min + ε), is positive, sums to 1 and "
               "ignores a shift as well. What softmax adds: it is smooth everywhere (the min and "
               "the clip have kinks), every key keeps a weight and a gradient, the odds of two keys "
               "exp(s₁ − s₂) depend on those two scores alone (a seventh key joining the row "
               "changes min-subtraction's odds, not softmax's: last column but one), and "
               "exp(a + b) = exp(a)·exp(b) turns a new reference point into one factor — which is "
               "why the kernels may subtract the row maximum, and why the blockwise kernel can "
               "rescale and merge blocks exactly (section “Blockwise softmax, number by number”). "
               "Where a method is undefined (a sum of 0, or nothing left after clipping) the table "
               "says so instead of printing NaN weights as if they were a result.",
         "zh": "为什么是 softmax？把分数变成权重的规则，应当给出非负且和为 1 的权重。直接除以总和，"
               "只要有一个分数为负就会出现负权重；先把负数截成 0 能修好这一点，但会让一些键的权重变成 0"
               "（也就没有梯度），而且和除以总和一样，所有分数同加一个数时结果会变。具备这三条性质的并不"
               "只有 softmax：减去最小值再归一，(s − min + ε)/Σ(s − min + ε)，同样为正、和为 1、不受"
               "平移影响。softmax 多出来的是：处处光滑（取最小值和截断都有折角）；每个键都保有权重和梯度；"
               "两个键的比值 exp(s₁ − s₂) 只取决于这两个分数（行里加入第七个键，减最小值法的比值会变，"
               "softmax 的不变：见倒数第二列）；以及 exp(a + b) = exp(a)·exp(b) 把换一个参照点变成乘一个"
               "因子——所以计算核可以先减去行最大值，分块核也能精确地重缩放、合并各块（见「分块 softmax，"
               "逐个数字」一节）。某个方法无定义时（总和为 0，或截断后什么都不剩），表里写明原因，而不是"
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
        {"en": "Why mask at all? A language model is trained to predict each next word from the "
               "words before it. If position 5 could see word 6 it would copy the answer: the loss "
               "falls to 0 and nothing is learned — and at inference word 6 does not exist yet, so "
               "a model that learned to look at it fails. The causal mask makes training match "
               "generation: row i depends only on keys j ≤ i, so when a new token arrives the keys "
               "and values of the earlier ones never change, and can be kept instead of recomputed: "
               "that is what makes a KV cache possible (section “Decode as a process”). "
               "Under the causal mask row i may only look at keys j ≤ i. For the row “it” of the "
               "sentence: the exponentials exp(s − max) of the keys it keeps are unchanged, the "
               "later key's numerator is dropped, and the denominator becomes the sum of the kept "
               "ones alone — so every kept weight grows by full denominator ÷ causal denominator, "
               "and the row sums to 1 again. The last column is the kernel's own causal row.",
         "zh": "为什么要遮？语言模型训练时要根据前面的词预测下一个词。如果第 5 个位置能看到第 6 个词，"
               "它抄答案就行——损失飞快降到 0，却什么都没学会；而推理时第 6 个词还不存在，学会了偷看的"
               "模型就会崩。因果掩码让训练和生成一致：第 i 行只依赖 j ≤ i 的键，新词到来时，前面各词的键和"
               "值永远不变，可以存下来而不必重算——KV 缓存正是因此才成立（见「解码是一个过程」一节）。"
               "因果掩码下第 i 行只能看 j ≤ i 的键。以句子中「它」这一行为例：保留下来的键的指数 "
               "exp(s − max) 不变，后面那个键的分子被丢掉，分母只剩保留项之和——所以每个保留的权重都乘上"
               "「完整分母 ÷ 因果分母」，这一行重新加起来等于 1。最后一列是计算核自己算出的因果行。"}),
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
        "online_softmax", {}, {}, True,
        {"en": "Blockwise softmax, number by number", "zh": "分块 softmax，逐个数字"},
        {"en": "The blockwise kernel never holds a whole row of scores, yet its result is exact. "
               "Here is how, on row “it” of the sentence with its six keys in blocks of two (the "
               "notebook `10-blockwise` has a slider for the block size). For each block the "
               "kernel computes the block's scores and keeps, per row, three things: the running "
               "maximum m of the scores seen so far, the running sum l = Σ exp(s − m) over them, "
               "and the accumulated output acc = Σ exp(s − m)·v. When a block brings a larger "
               "score, m rises to m_new, and everything accumulated so far was computed against "
               "the old maximum: since exp(s − m_new) = exp(s − m_old)·exp(m_old − m_new), "
               "multiplying l and acc by the one factor exp(m_old − m_new) puts them on the new "
               "reference. After the last block, acc / l is the output — the same number the "
               "full softmax row gives, because every term was rescaled to the same final m. "
               "Every number in the table comes from the C core: each block's partial result "
               "(`attention(..., return_lse=True)` on its keys alone) and the running state "
               "(`attncore.merge` of the blocks so far, whose lse = m + log l), checked against "
               "one kernel call with `block_k=2` and the kernel's own tile count. So the blockwise "
               "kernel keeps n² time — every pair is still scored once — but drops n² memory: it "
               "holds one tile of scores at a time and a few numbers per row. The backward pass "
               "keeps even less: only lse = m + log l per row; it recomputes each weight as "
               "exp(s − lse) block by block, instead of storing the n×n weights.",
         "zh": "分块计算核从不保存一整行分数，结果却是精确的。下面用句子中「它」这一行来看为什么："
               "它的 6 个键每 2 个一块（笔记本 `10-blockwise` 可以用滑块改块的大小）。对每一块，计算核"
               "算出这一块的分数，并为每一行只记三样东西：到目前为止见过的最大分数 m（运行最大值）、"
               "运行和 l = Σ exp(s − m)，以及累加的输出 acc = Σ exp(s − m)·v。当某一块带来更大的分数，"
               "m 升到 m_new，而之前累加的一切都是以旧的最大值为参照算的：因为 "
               "exp(s − m_new) = exp(s − m_old)·exp(m_old − m_new)，把 l 和 acc 乘上同一个因子 "
               "exp(m_old − m_new)，就换到了新的参照上。最后一块之后，acc / l 就是输出——与完整 softmax "
               "行给出的数相同，因为每一项都被重缩放到了同一个最终的 m。表中每个数都来自 C 核心："
               "每一块的部分结果（只对这一块的键调用 `attention(..., return_lse=True)`）和运行状态"
               "（对已处理各块调用 `attncore.merge`，其 lse = m + log l），并与一次 `block_k=2` 的计算核"
               "调用和计算核自己数的块数核对。所以分块计算核保留了 n² 的时间——每一对仍要打一次分——"
               "却去掉了 n² 的内存：它一次只存一块分数，每行再加几个数。反向传播存得更少：每行只存 "
               "lse = m + log l；它逐块把每个权重重算为 exp(s − lse)，而不是存下 n×n 的权重。"},
        _found_online),
    Section(
        "modifiers", {}, {}, True,
        {"en": "What models add to the scores: ALiBi, a soft-cap, a sink",
         "zh": "模型往分数里加的东西：ALiBi、软上限、汇点"},
        {"en": "Real models change the scores before the softmax, and each change is a line of "
               "the kernel: `bias=` adds an array (a relative-position bias, or a float mask), "
               "`alibi_slopes=` subtracts slope·distance (BLOOM, MPT), `softcap=` replaces each "
               "score s by cap·tanh(s/cap) (Gemma 2), and `sinks=` adds one more term exp(sink) to "
               "the softmax's denominator, a key with no value (gpt-oss). The table is row “it” "
               "of the sentence, causal, under each. ALiBi penalises the far keys, so weight moves "
               "to the recent ones — position information without a position embedding. A large "
               "query makes the row nearly one-hot; the soft-cap is a ceiling on every score, so "
               "no key can take everything and the row stays soft. A sink takes weight and gives "
               "nothing back: the row may now put its attention nowhere, which is what a head "
               "with nothing to say needs, and the keys keep their ratios among themselves. The "
               "scores column is `attncore.scores` with the modifier, the weights the naive "
               "kernel's own (`return_weights=True`).",
         "zh": "真实的模型会在 softmax 之前改动分数，每一种改动都是计算核里的一行：`bias=` 加上一个"
               "数组（相对位置偏置，或浮点掩码），`alibi_slopes=` 减去 斜率·距离（BLOOM、MPT），"
               "`softcap=` 把每个分数 s 换成 cap·tanh(s/cap)（Gemma 2），`sinks=` 在 softmax 的分母里"
               "多加一项 exp(sink)——一个没有值的键（gpt-oss）。表中是句子里「它」这一行在因果掩码下、"
               "各种修饰之后的样子。ALiBi 惩罚远处的键，权重于是移向最近的键——不用位置编码也有了位置"
               "信息。查询很大时这一行几乎只看一个键；软上限给每个分数设了天花板，没有哪个键能拿走全部，"
               "这一行保持柔和。汇点拿走权重却什么都不给回：这一行现在可以把注意力放在「哪里都不」，"
               "没什么可说的头正需要这样，而各键之间的比例不变。分数一列是带修饰的 `attncore.scores`，"
               "权重是朴素计算核自己给出的（`return_weights=True`）。"},
        _found_modifiers),
    Section(
        "memory", {"measured": True}, {}, False,
        {"en": "Why n²: the score table outgrows the KV cache", "zh": "为什么是 n²：分数表比 KV 缓存长得快"},
        {"en": "Why is attention said to cost n² memory? The table holds two setups, and says "
               "which is which. The first four columns are arithmetic for a model layer of 32 heads "
               "of d_head = 128 in FP16 (2 bytes a value): its score table holds n² values per head, "
               "the KV cache that produced it 2·n·d_head per head. Their ratio grows linearly in n: "
               "the two are equal at n = 256 (n² = 2·n·d_head), the table is larger beyond it and "
               "512 times larger at n = 131 072. The "
               "two measured columns are a different, small setup — one head, d = 64, float32 — the "
               "peak memory of real calls on this machine: the naive kernel holds the n×n table; "
               "the blockwise one holds its tiles, its output and a packed copy of K, all O(n·d).",
         "zh": "为什么说注意力要 n² 的内存？表里有两套设置，并标明了哪套是哪套。前四列是一个模型层的"
               "算术：32 个头、d_head = 128、FP16（每个值 2 字节）；分数表每个头 n² 个值，产生它的 "
               "KV 缓存每个头 2·n·d_head 个值。两者之比随 n 线性增长：n = 256 时两者相等（n² = 2·n·d_head），"
               "之后分数表更大，n = 131 072 时大 512 倍。两列实测值是另一套小设置——1 个头、d = 64、"
               "float32——是这台机器上真实调用的峰值内存：朴素计算核存着整张 n×n 表；分块计算核存它的块、"
               "输出和一份打包的 K，都是 O(n·d)。"},
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
        "traffic", {}, {"ns": (512, 2048), "quick": True}, False,
        {"en": "Bytes moved, counted", "zh": "搬运的字节，逐一数清"},
        {"en": "Why does the naive kernel win at some n and lose at others? Count the bytes. Both "
               "kernels read Q, K and V and write O. The naive one also writes the n×n table and "
               "reads it back in each pass over it — scores written, the softmax reading and "
               "rewriting them, P·V reading them: four times n² values. The blockwise one never "
               "writes the table, but reads K and V again for every tile of query rows. The table "
               "below counts both for one head of float32 at d = 64, says where the n×n table fits "
               "among this machine's caches (as the OS reports them), and puts the measured times "
               "beside them.",
         "zh": "朴素计算核为什么在有些 n 上赢、在另一些 n 上输？数一数字节。两种计算核都要读 Q、K、V，"
               "写 O。朴素版还要写出 n×n 的表，并在每一遍里把它读回来——写分数、softmax 读一遍再写一遍、"
               "P·V 再读一遍：一共 4 倍 n² 个值。分块版从不写出整张表，但每个查询块都要把 K 和 V 再读一遍。"
               "下表对一个头、float32、d = 64 数出两者的字节，标出 n×n 的表放得进这台机器的哪一级缓存"
               "（按操作系统报告的大小），并把实测时间放在旁边。"},
        _found_traffic),
    Section(
        "regimes", {}, {}, False,
        {"en": "Prefill is compute-bound, decode bandwidth-bound", "zh": "预填充受算力限制，解码受带宽限制"},
        {"en": "Prefill and decode are different problems. Counting the compulsory traffic (Q, K, "
               "V read and O written once; float32), a prefill of n queries against n keys does "
               "4·d FLOPs per pair on n² pairs and moves 16·n·d bytes: n/4 FLOPs per byte, far "
               "right of the ridge, bound by the FMA units. A decode step does 4·d FLOPs per cached "
               "key and reads 8·d bytes of K and V for it: ½ FLOP per byte (1 with a 16-bit cache), "
               "left of the ridge, bound by memory bandwidth. (A real tiled kernel re-reads K and V "
               "per query tile, so its prefill intensity is set by the tile: section “Bytes "
               "moved”.) The roofs are measured by the probes in the same call. Each regime runs in every "
               "precision the kernels take: prefill with float32 and bfloat16 q, k, v, decode "
               "against float32, float16, bfloat16 and int8 caches. Halving the bytes moves a "
               "decode step right along the bandwidth roof, twice the FLOPs per byte; widening the "
               "arithmetic (bfloat16 dot products, where a CPU has them and they are faster: their "
               "roof is the dashed line) raises the compute roof a prefill sits under.",
         "zh": "预填充和解码是两类问题。只算必须的流量（Q、K、V 各读一次，O 写一次；float32）："
               "n 个查询对 n 个键的预填充，每对 4·d 次运算、共 n² 对，搬 16·n·d 字节：每字节 n/4 次运算，"
               "远在脊点右边，受 FMA 单元限制。解码一步对每个缓存的键做 4·d 次运算，为它读 8·d 字节的 "
               "K 和 V：每字节 ½ 次（16 位缓存时为 1），在脊点左边，受内存带宽限制。（真实的分块计算核"
               "每个查询块都要重读一遍 K、V，所以它预填充的强度由块的大小决定：见「搬运的字节」一节。）"
               "屋顶由同一次调用中的探针测得。每个区间都用计算核接受的每种精度测一遍：预填充用 float32 和 "
               "bfloat16 的 q、k、v，解码对 float32、float16、bfloat16 和 int8 缓存。字节减半，解码点就沿带宽"
               "屋顶右移，每字节的运算翻倍；算术变宽（bfloat16 点积，在 CPU 有而且更快的地方：它的屋顶是虚线）"
               "则抬高预填充所在的算力屋顶。"},
        _found_regimes),
    Section(
        "decode", {}, {"steps": 8, "batch": 2}, False,
        {"en": "Decode as a process", "zh": "解码是一个过程"},
        {"en": "Generation is a loop. The prompt's keys and values go into an `attncore.KVCache` "
               "at once (prefill); then each step appends one token's key and value and attends "
               "its one query to everything cached. Nothing cached is ever recomputed — the causal "
               "mask guarantees that earlier keys never change — but every step reads the whole "
               "cache, so the bytes read per step grow with the length, and over a generation "
               "they add up to the sum of the lengths. The table follows a small cache step by "
               "step (8 query heads on 2 key/value heads, d_head = 64, float32) and checks each "
               "step against a fresh `attncore.attention` over the cache; the facts scale the same "
               "arithmetic to a whole model, and measure what batching does to a step.",
         "zh": "生成是一个循环。提示词的键和值一次性放进 `attncore.KVCache`（预填充）；之后每一步追加一个"
               "词的键和值，再用它的一个查询对缓存里的全部内容做注意力。缓存过的东西从不重算——因果掩码"
               "保证了前面的键永远不变——但每一步都要把整个缓存读一遍，所以每步读的字节随长度增长，整个"
               "生成过程读的总量就是各步长度之和。表中一步一步跟着一个小缓存（8 个查询头共享 2 个键值头，"
               "d_head = 64，float32），每一步都与对缓存重新调用 `attncore.attention` 的结果核对；"
               "表下的数据把同样的算术放大到整个模型，并实测批处理对一步解码的影响。"},
        _found_decode),
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
         "zh": "本教程依据的那一章和那篇文章都是好向导，但其中有几处说法是错的，在计算核上验证的学习者会"
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


def _cell(v, lang="en", header=False) -> str:
    """A table cell: the value formatted (its words in Chinese for ``lang="zh"``),
    a literal | escaped (|x| is common here)."""
    if lang == "zh" and isinstance(v, str):
        v = zh.translate(v, header=header)
    elif lang == "zh" and (v is None or isinstance(v, bool)):
        v = {None: "—", True: "是", False: "否"}[v]
    return _fmt(v).replace("|", "\\|")


def markdown_table(result, lang="en") -> str:
    """The result's table as Markdown, values to 4 significant digits; for
    ``lang="zh"`` the column names and the cells' words in Chinese."""
    rows = result.table()
    cols = list(rows[0])
    lines = ["| " + " | ".join(_cell(c, lang, header=True) for c in cols) + " |",
             "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r[c], lang) for c in cols) + " |" for r in rows]
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
    parts += [f"```python\nattncore.teach.{sec.name}({call})\n```", markdown_table(res, lang),
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
    "zh": """# 注意力导览：在 attncore 自己的计算核上

下面每张表都由
`attncore tour --markdown docs/tutorial.md --markdown-zh docs/tutorial.zh.md --out docs/tour`
生成，跑的就是 `attncore.attention` 所用的 C 计算核——分数、softmax 和注意力从不来自另一个玩具实现。
每个实验都是 `attncore.teach` 中的一个函数，用种子可以复现；确定性实验的表由测试套件与代码核对。
各节顺序跟随那一章：一句话、形状、公式为什么长这样、它的代价、注意力家族，以及原始材料错在哪里。
每张表下列出正文引用的数据。交互笔记本（`attncore notebook`）可以用滑块拨动这里的每个数。
表格与图和英文版共用（同一次运行、同样的数字）。[English](tutorial.md)

""",
}
