"""Choosing the micro-kernels: CPU detection in the core, ATTNCORE_ISA to force one."""

import os

from attncore import _core

# Every instruction set this build knows, best first: the C core's one list
# (AC_ISA_LIST in csrc/runtime.c), which also decides the default.
ISAS: tuple[str, ...] = _core.isa_names()


def available() -> list[str]:
    """The instruction sets this build can run on this CPU, best first."""
    return [name for name in ISAS if _core.isa_supported(name)]


def use(name: str) -> None:
    """Force the micro-kernel set for every later call (tests use this)."""
    if name not in ISAS:
        raise ValueError(f"ISA must be one of {ISAS}, got {name!r}")
    if not _core.isa_supported(name):
        raise ValueError(f"ISA {name!r} is not available here; available: {available()}")
    _core.set_isa(name)


def _apply_env_isa() -> None:
    name = os.environ.get("ATTNCORE_ISA")
    if name:
        try:
            use(name)
        except ValueError as e:
            raise ImportError(f"ATTNCORE_ISA={name!r}: {e}") from None
