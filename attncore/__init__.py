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
from attncore._api import (
    attention,
    attention_backward,
    get_num_threads,
    info,
    linear_attention,
    merge,
    multi_head_attention,
    scores,
    set_num_threads,
    softmax,
)
from attncore._isa import _apply_env_isa
from attncore.kvcache import KVCache

try:
    __version__ = version("attncore")
except PackageNotFoundError:  # pragma: no cover - running from an unusual install
    __version__ = "0+unknown"

_apply_env_isa()

from attncore import teach  # noqa: E402 (uses the functions above)

__all__ = [
    "attention",
    "attention_backward",
    "scores",
    "softmax",
    "merge",
    "linear_attention",
    "multi_head_attention",
    "KVCache",
    "set_num_threads",
    "get_num_threads",
    "info",
    "reference",
    "teach",
]
