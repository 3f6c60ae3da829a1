"""A fast smoke pass over the benchmark machinery: it runs, and what it
reports is consistent.  (Speed is measured by `attncore bench` and
`pytest bench/`, never asserted here.)"""

import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import attncore
from attncore import bench, cli
from helpers import assert_figure

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def test_flop_and_byte_counts_are_exact():
    c = bench.Case(n=4, d=8, causal=True, B=2, H=3)
    assert c.pairs() == 4 + 3 + 2 + 1
    assert c.flops == 4 * 8 * 2 * 3 * 10
    assert bench.Case(n=4, d=8).flops == 4 * 8 * 1 * 8 * 16
    flash, naive = c.bytes("attncore-flash"), c.bytes("attncore-naive")
    assert flash == 4 * 2 * 3 * (2 * 4 * 8 + 2 * 4 * 8) and naive == flash + 2 * 4 * 2 * 3 * 16


@pytest.mark.parametrize("causal", [False, True])
def test_numpy_peer_is_correct(rng, causal):
    q, k, v = (rng.standard_normal((2, 3, 33, 16)) for _ in range(3))
    want = __import__("attncore").reference.attention(q, k, v, causal=causal)
    np.testing.assert_allclose(bench.numpy_attention(q, k, v, causal), want, atol=1e-12)


def test_every_peer_computes_the_same_attention(rng):
    case = bench.Case(n=64, d=16, causal=True, H=2)
    inputs = bench.make_inputs(case)
    want = __import__("attncore").reference.attention(*inputs, causal=True)
    for method in bench.METHODS:
        fn = bench.runner(method, case, inputs)
        if fn is None:
            continue
        got = np.asarray(fn())
        np.testing.assert_allclose(got, want, atol=2e-5, err_msg=method)


def test_cli_bench_quick_writes_table_json_and_figures(tmp_path, capsys):
    out = tmp_path / "b"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rc = cli.main(["bench", "--quick", "--sizes", "256", "--methods", "attncore-flash",
                       "attncore-naive", "numpy", "--no-progress", "--out", str(out),
                       "--markdown", str(tmp_path / "t.md")])
    assert rc == 0
    text = capsys.readouterr().out
    # the compact table: one line a case, every line within 100 columns
    assert "attncore ms" in text and "peer ms" in text and "roofs: FMA" in text
    assert "numpy" in text and "prefill 256 causal" in text and "% roof" in text
    table = [line for line in text.splitlines() if str(tmp_path) not in line]  # not the paths
    assert max(map(len, table)) <= 100, max(table, key=len)
    md = (tmp_path / "t.md").read_text()
    assert "| regime | n | m | d |" in md and "Roofs measured in the same run" in md
    result = json.loads((out / "bench.json").read_text())
    assert result["roofs"]["fma_gflops"] > 0 and result["roofs"]["read_gbs"] > 0
    # the run says when and on what it ran, and each time its rounds and spread
    assert result["machine"]["date"] and result["machine"]["version"] == attncore.__version__
    assert all(r["rounds"] >= 2 and r["spread"] >= 0 for r in result["rows"])
    assert {r["method"] for r in result["rows"]} == {"attncore-flash", "attncore-naive", "numpy"}
    assert {r["causal"] for r in result["rows"]} == {False, True}
    for name in ("time_vs_n", "gflops_vs_n", "memory_vs_n", "roofline"):
        assert_figure(out / f"{name}.png")
    # the same figures again from the saved JSON, with every method and column
    assert cli.main(["plot", str(out / "bench.json"), "--out", str(tmp_path / "p"), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "GFLOP/s" in wide and "attncore-naive" in wide
    assert_figure(tmp_path / "p" / "roofline.png")
    # a folder that holds a run is never written over
    assert cli.main(["bench", "--quick", "--sizes", "256", "--methods", "attncore-flash",
                     "--no-progress", "--no-plots", "--out", str(out)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    # plot writes beside the JSON it reads
    copy = tmp_path / "elsewhere" / "run.json"
    copy.parent.mkdir()
    copy.write_text((out / "bench.json").read_text())
    assert cli.main(["plot", str(copy)]) == 0
    assert_figure(copy.parent / "roofline.png")


def test_the_speed_ratio_is_against_the_peer_held_to_the_isa():
    """torch is held to attncore's ISA and NumPy's BLAS is not: the ratio is
    against torch even where NumPy is faster, and against NumPy only without
    torch."""
    def row(method, seconds):
        return {"method": method, "regime": "prefill", "n": 512, "m": 512, "d": 64, "H": 8,
                "causal": False, "dtype": "float32", "seconds": seconds, "gflops": 1.0,
                "gbs": 1.0, "spread": 0.0}
    result = {"roofs": {"fma_gflops": 10.0},
              "rows": [row("attncore-flash", 2.0), row("torch", 3.0), row("numpy", 1.0)]}
    [line] = bench.report.compact_rows(result)
    assert line[0] == "prefill 512 full" and line[2].startswith("torch") and line[3] == "1.50×"
    result["rows"] = result["rows"][::2]  # no torch
    [line] = bench.report.compact_rows(result)
    assert line[2].startswith("numpy") and line[3] == "0.50×"


def test_each_run_gets_a_folder_of_its_own(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.time, "strftime", lambda fmt, *a: "20261205-101010")
    first = cli._run_folder(None)
    os.makedirs(first)
    second = cli._run_folder(None)  # the same second: a suffix, never the same folder
    assert first == os.path.join("attncore-bench", "20261205-101010")
    assert second == first + "-2"
    assert cli._run_folder(str(tmp_path / "mine")) == str(tmp_path / "mine")
    (tmp_path / "mine" / "avx2").mkdir(parents=True)
    (tmp_path / "mine" / "avx2" / "bench.json").write_text("{}")
    assert cli._run_folder(str(tmp_path / "mine")) is None  # it holds a run (of --isa all)
    assert "already holds a run" in capsys.readouterr().err


def test_decode_and_window_cases(tmp_path):
    decode = bench.Case(1, 32, H=8, regime="decode", keys=600, kv_heads=2, kv_dtype="float16")
    assert decode.kv_bytes() == 2 * 1 * 2 * 2 * 600 * 32 == decode.bytes("attncore-flash") - 4 * 8 * 2 * 32
    window = bench.Case(300, 16, True, regime="window", window=50)
    assert window.pairs() == sum(min(i + 1, 50) for i in range(300))
    rows = []
    for case in (decode, window, bench.Case(300, 16, True, regime="window")):
        rows += bench.run_case(case, min_time=0.0, min_rounds=1, max_rounds=1)
    methods = {(r.regime, r.window, r.method) for r in rows}
    assert ("decode", None, "attncore-flash") in methods
    assert ("decode", None, "attncore-naive") not in methods  # nothing to teach there
    assert ("window", 50, "numpy") not in methods  # the peers have no banded kernel
    assert ("window", None, "numpy") in methods
    from dataclasses import asdict

    result = {"rows": [asdict(r) for r in rows], "machine": {},
              "roofs": {"fma_gflops": 100.0, "read_gbs": 20.0, "sgemm_gflops": 50.0}}
    paths = bench.figures(result, tmp_path)
    names = {os.path.basename(p) for p in paths}
    assert {"decode_gbs_vs_m.png", "window_time_vs_n.png", "roofline.png"} <= names
    for p in paths:
        assert_figure(p)
    text = bench.markdown_report(result)
    assert "float32/float16" in text and "w=50" in text


@pytest.mark.skipif(not os.path.isdir(BENCH_DIR), reason="needs the source tree's bench/")
def test_pytest_benchmark_suite_smoke_pass_and_plot(tmp_path):
    js = tmp_path / "pb.json"
    # pytest-benchmark times nothing where xdist is active: not in this child, though this
    # test may run in an xdist worker (whose PYTEST_XDIST_WORKER the child would inherit)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    r = subprocess.run([sys.executable, "-m", "pytest", BENCH_DIR, "--smoke", "-q",
                        "-p", "no:cacheprovider", "-p", "no:xdist", f"--benchmark-json={js}",
                        "--benchmark-min-rounds=1"],
                       cwd=tmp_path, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    loaded = bench.load(js)
    assert loaded["rows"] and {"fma_gflops", "read_gbs", "sgemm_gflops"} <= set(loaded["roofs"])
    by_regime = {}
    for r in loaded["rows"]:
        by_regime.setdefault(r["regime"], set()).add((r["n"], r["m"]))
    # the smoke pass keeps the smallest case of each suite
    assert by_regime == {"prefill": {(128, 128)}, "decode": {(1, 1024)}, "window": {(1024, 1024)},
                         "backward": {(512, 512)}}
    paths = bench.figures(loaded, tmp_path / "figs")
    assert len(paths) >= 4 and all(os.path.getsize(p) > 10_000 for p in paths)
    # the JSON says what ran, and `attncore plot` prints it
    import attncore

    ours = json.loads(js.read_text())["machine_info"]["attncore"]
    assert ours["version"] == attncore.__version__ and ours["isa"] == attncore.info()["isa"]
    assert ours["threads"] == attncore.get_num_threads() and ours["roofs"]["fma_gflops"] > 0
    assert ours["blas"]["library"] and "kernel" in ours["blas"]
    plot = subprocess.run([sys.executable, "-m", "attncore.cli", "plot", str(js), "--out",
                           str(tmp_path / "plot")], cwd=tmp_path, capture_output=True, text=True)
    assert plot.returncode == 0, plot.stderr[-3000:]
    line = next(x for x in plot.stdout.splitlines() if x.startswith("machine:"))
    assert f"{ours['threads']} threads, isa {ours['isa']}; BLAS: {ours['blas']['library']}" in line
    assert "None" not in line


def test_isa_choices_resolve_to_what_the_cpu_has():
    from attncore import _isa
    from attncore.bench import isa as held

    have = _isa.available()
    assert have == [name for name in _isa.ISAS if name in have]  # best first, as the C list
    assert held.resolve("native") == [have[0]]
    assert held.resolve("all") == have
    assert held.resolve("scalar") == ["scalar"]
    with pytest.raises(ValueError, match="must be one of"):
        held.resolve("sse9")
    missing = [name for name in _isa.ISAS if name not in have]
    for name in missing:
        with pytest.raises(ValueError, match="cannot run it"):
            held.resolve(name)
    env = held.child_env("avx2", base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "ATTNCORE_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    # every ISA has its peer settings; on aarch64 torch is held to its NEON kernels
    assert set(held.PEERS) == set(_isa.ISAS)
    assert held.child_env("neon", base={}) == {"ATTNCORE_ISA": "neon", "ATEN_CPU_CAPABILITY": "default"}
    assert held.held("neon", "DEFAULT") and not held.held("neon", "SVE256")


def test_an_isa_without_peer_settings_is_measured_with_its_peer_unheld(monkeypatch):
    """A new ISA needs its kernel file and one entry in the C list; the bench
    takes it as it is, reporting the torch beside it as not held."""
    from attncore.bench import isa as held

    monkeypatch.delitem(held.PEERS, "avx2")
    assert held.child_env("avx2", base={}) == {"ATTNCORE_ISA": "avx2"}
    assert held.peer_capability("avx2") is None
    assert not held.held("avx2", "AVX2") and held.held("avx2", None)


def test_an_isa_the_cpu_lacks_is_refused_before_anything_runs(tmp_path, capsys):
    from attncore import _isa

    missing = [name for name in _isa.ISAS if name not in _isa.available()]
    if not missing:
        pytest.skip("this CPU runs every ISA attncore has")
    assert cli.main(["bench", "--quick", "--isa", missing[0], "--out", str(tmp_path)]) == 2
    assert "cannot run it" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def _isa_bench(tmp_path, isa, methods):
    out = tmp_path / isa
    rc = cli.main(["bench", "--quick", "--isa", isa, "--sizes", "256", "--methods", *methods,
                   "--no-progress", "--no-plots", "--out", str(out)])
    assert rc == 0
    return out


@pytest.mark.slow  # a child bench per ISA: `pytest -m slow`, and CI
def test_bench_isa_runs_each_isa_in_a_child_held_to_it(tmp_path, capsys):
    """--isa all: one child per ISA the CPU has, attncore forced to it (the
    child refuses to measure otherwise), one table each and a summary row per
    case and ISA; the child reports what torch ran when torch is there."""
    from attncore import _isa
    from attncore.bench import isa as held

    methods = ["attncore-flash"] + (["torch"] if bench.torch_available() else [])
    out = _isa_bench(tmp_path, "all", methods)
    text = capsys.readouterr().out
    have = _isa.available()
    for isa in have:
        result = json.loads((out / isa / "bench.json").read_text())
        assert result["isa"]["attncore"] == isa and result["roofs"]["isa"] == isa
        assert f"ISA {isa}: attncore {isa}" in text
        assert {(r["n"], r["causal"]) for r in result["rows"]} == {(256, False), (256, True)}
        if bench.torch_available():
            assert result["isa"]["torch_capability"] == held.peer_capability(isa)
            assert result["isa"]["peer_env"] == held.peer_env(isa)
            assert f"torch capability {held.peer_capability(isa)}" in text
    assert "attncore bench --isa all" in text
    summary = [line for line in text.splitlines()
               if re.search(r"prefill 256 (full|causal)\s+│\s+(" + "|".join(have) + r")\s+│", line)]
    assert len(summary) == 2 * len(have)


def test_a_child_reports_the_torch_capability_it_was_held_to(tmp_path):
    """The child sets nothing itself: the capability comes from the settings
    it was started with, read by torch at import."""
    pytest.importorskip("torch")
    from attncore.bench import isa as held

    code = ("import attncore.bench.isa as h, attncore; "
            "print(h.torch_capability(), attncore.info()['isa'])")
    for isa in ("scalar", "avx2"):
        if isa not in __import__("attncore")._isa.available():
            continue
        got = subprocess.run([sys.executable, "-c", code], env=held.child_env(isa),
                             capture_output=True, text=True, check=True, cwd=tmp_path)
        assert got.stdout.split() == [held.peer_capability(isa), isa]


@pytest.mark.parametrize("kv", ["float16", "bfloat16"])
def test_every_peer_reads_a_16_bit_cache(kv):
    """The decode cases with a 16-bit cache: each peer computes the attention
    of the widened values (torch in its own 16-bit arithmetic, so loosely)."""
    case = bench.Case(1, 32, H=8, regime="decode", keys=600, kv_heads=2, kv_dtype=kv)
    assert case.kv_bytes() == 2 * 2 * 2 * 600 * 32
    inputs = bench.make_inputs(case)
    want = __import__("attncore").reference.attention(*inputs)
    for method in bench.METHODS:
        fn = bench.runner(method, case, inputs)
        if fn is None:
            continue
        got = fn()
        got = got.float().numpy() if hasattr(got, "numpy") else got
        np.testing.assert_allclose(got, want, atol=2e-5 if method != "torch" else 2e-2,
                                   err_msg=method)


def test_bench_distributed_on_a_local_cluster(tmp_path):
    """`attncore bench --distributed --quick` on its own two-worker LocalCluster:
    every table filled, the measured bytes equal to the plan's, the figure drawn.
    Here rather than in test_distributed.py because it draws with matplotlib,
    which the sanitized run leaves out; CI's distributed stage runs it."""
    pytest.importorskip("distributed")
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    md = tmp_path / "distributed.md"
    rc = cli.main(["bench", "--distributed", "--quick", "--no-progress", "--workers", "2",
                   "--out", str(out), "--markdown", str(md)])
    assert rc == 0
    result = json.loads((out / "distributed.json").read_text())
    assert [r["P"] for r in result["strong"]] == [1, 2]
    assert all(r["seconds"] > 0 and r["local_seconds"] > 0 for r in result["strong"])
    assert [r["P"] for r in result["weak"]] == [1, 2]
    assert {r["layout"] for r in result["layouts"]} == {"zigzag", "contiguous"}
    assert len(result["bytes"]) == 6
    assert all(r["measured"] == r["predicted"] > 0 and r["complete"] for r in result["bytes"])
    assert all(r["step_s"] > 0 and r["floor_s"] > 0 for r in result["decode"])
    sims = {(r["nodes"], r["node"], r["link"]) for r in result["simulate"]}
    assert {(16, "3 TFLOP/s node", "10 Gb/s"), (64, "this node", "100 Gb/s")} <= sims
    costs = result["costs"]
    assert costs["worker_flops"] > 0 and costs["client_bytes_per_s"] > 0
    assert costs["round_trip_s"] > 0 and costs["task_s"] >= 0
    assert [r["n"] for r in result["predict"]] == [2048, 4096]
    for r in result["predict"]:
        assert r["measured_s"] > 0 and r["rounds"] == 3 and r["worker_flops"] > 0
        assert r["ratio_min"] <= r["ratio"] == pytest.approx(r["predicted_s"] / r["measured_s"])
        assert r["ratio"] <= r["ratio_max"]
        assert r["predicted_s"] == pytest.approx(r["place_s"] + r["copies_s"] + r["pairs_s"]
                                                 + r["gather_s"])
    assert [r["nodes"] for r in result["decode_paper"]] == [1, 16]
    assert result["decode_paper"][1]["step_s"] < result["decode_paper"][0]["step_s"]
    assert_figure(out / "distributed-simulate.png")
    text = md.read_text()
    assert "Strong scaling" in text and "Plan.simulate against the measurement" in text
    assert "decode_step_time" in text
