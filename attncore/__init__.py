"""attncore: scaled dot-product attention as hand-written C loops, for NumPy.

    >>> import numpy as np, attncore
    >>> q = k = v = np.random.default_rng(0).standard_normal((8, 128, 64), np.float32)
    >>> out = attncore.attention(q, k, v, causal=True)      # (8, 128, 64)

The kernels live in the compiled core; :mod:`attncore.reference` holds NumPy
versions of the same functions, the oracle of the tests.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    from attncore import _core
except ImportError as e:  # a source tree without the built extension
    raise ImportError(
        "attncore's compiled core is missing: install the package (pip install .) "
        "instead of importing the source tree"
    ) from e

from attncore import reference
from attncore._api import attention, merge, plain_attention, scores, softmax
from attncore._bfloat16 import from_bfloat16, to_bfloat16
from attncore._layers import attention_backward, linear_attention, multi_head_attention
from attncore._isa import _apply_env_isa
from attncore._runtime import get_num_threads, info, set_num_threads
from attncore._runtime import register_threadpoolctl as _register_threadpoolctl
from attncore.kvcache import KVCache

try:
    __version__ = version("attncore")
except PackageNotFoundError:  # pragma: no cover - running from an unusual install
    __version__ = "0+unknown"

_apply_env_isa()
_register_threadpoolctl()


def __getattr__(name: str):
    """attncore.teach is imported on first use: the tour is not needed to
    compute attention, and importing it eagerly would cost every user."""
    if name == "teach":
        import importlib

        return importlib.import_module("attncore.teach")
    raise AttributeError(f"module 'attncore' has no attribute {name!r}")


__all__ = [
    "attention",
    "plain_attention",
    "attention_backward",
    "scores",
    "softmax",
    "merge",
    "linear_attention",
    "multi_head_attention",
    "KVCache",
    "to_bfloat16",
    "from_bfloat16",
    "set_num_threads",
    "get_num_threads",
    "info",
    "reference",
    "teach",
]
