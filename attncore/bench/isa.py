"""Holding attncore and its peers to one instruction set, so that a speed
figure is a ratio between programs using the same vector instructions.

attncore takes ``ATTNCORE_ISA``; torch reads ``ATEN_CPU_CAPABILITY`` (its own
kernels), ``MKL_ENABLE_INSTRUCTIONS`` and ``ONEDNN_MAX_CPU_ISA`` (the
libraries under it) once, when it is imported — so each instruction set is
measured in a child process started with those set, and the child reports
what torch really ran (``torch.backends.cpu.get_cpu_capability()``).  NumPy's
BLAS is not held: the table names the kernel OpenBLAS chose.
"""

from __future__ import annotations

import os
import platform

from attncore import _isa

# The peer's settings for each attncore ISA: the environment that holds torch to
# the same instruction set (ATEN_CPU_CAPABILITY, and MKL_ENABLE_INSTRUCTIONS /
# ONEDNN_MAX_CPU_ISA for the libraries under it), and the capability torch reports
# when it honoured them.  On aarch64 torch's own kernels are held to "default" (NEON,
# not SVE); the GEMM library under them is not held (NEON is the baseline there, and
# these CPUs' libraries are not steered by the x86 variables), and the scalar ISA's
# peer is the same NEON torch.  An ISA missing here is still measured, its peer
# unheld and reported so (held() is False).
PEERS: dict[str, tuple[dict[str, str], str]] = {
    "avx512": ({"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "AVX512"),
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
              "ONEDNN_MAX_CPU_ISA": "AVX2"}, "AVX2"),
    "neon": ({"ATEN_CPU_CAPABILITY": "default"}, "DEFAULT"),
    "scalar": ({"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                "ONEDNN_MAX_CPU_ISA": "SSE41"}, "DEFAULT"),
}
if platform.machine().lower() in ("aarch64", "arm64"):
    PEERS["scalar"] = ({"ATEN_CPU_CAPABILITY": "default"}, "DEFAULT")
CHOICES = ("native", "all") + _isa.ISAS


def peer_env(isa: str) -> dict[str, str]:
    """The settings that hold torch to `isa` (empty where none are known)."""
    return dict(PEERS[isa][0]) if isa in PEERS else {}


def peer_capability(isa: str) -> str | None:
    """The capability torch reports when held to `isa` (None where unknown)."""
    return PEERS[isa][1] if isa in PEERS else None


def resolve(choice: str) -> list[str]:
    """The instruction sets a ``--isa`` choice runs, best first: "native" is
    the best this CPU has, "all" every one it has."""
    have = _isa.available()  # best first
    if choice == "native":
        return have[:1]
    if choice == "all":
        return have
    if choice not in _isa.ISAS:
        raise ValueError(f"--isa must be one of {CHOICES}, got {choice!r}")
    if choice not in have:
        raise ValueError(f"--isa {choice}: this CPU cannot run it; it has {', '.join(have)}")
    return [choice]


def child_env(isa: str, base: dict | None = None) -> dict:
    """The environment of a child that measures one instruction set."""
    env = dict(os.environ if base is None else base)
    env["ATTNCORE_ISA"] = isa
    env.update(peer_env(isa))
    return env


def child_path(env: dict) -> dict:
    """env, with the folder this attncore was imported from first on
    PYTHONPATH: the child measures the same build as its parent, wherever it
    starts."""
    import attncore

    here = os.path.dirname(os.path.dirname(os.path.abspath(attncore.__file__)))
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def torch_capability() -> str | None:
    """What torch's own kernels run here (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    return str(torch.backends.cpu.get_cpu_capability())


def held(isa: str, capability: str | None) -> bool:
    """Whether torch ran the capability that matches attncore's ISA (True
    without torch: there is no peer to hold)."""
    return capability is None or capability == peer_capability(isa)
