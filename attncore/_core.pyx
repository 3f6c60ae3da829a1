# cython: language_level=3
"""The thin binding: typed memoryviews in, one C call with the GIL released.

Nothing here validates user input: attncore._validate has done that (for
attncore._api), and _api hands
over 4-D arrays whose last axis is contiguous, in native byte order, of one
float dtype, with outputs already allocated.  This layer only turns views into
pointers and element strides, and C status codes into exceptions.
"""
cimport cython
from cpython.exc cimport PyErr_Occurred
from libc.stdint cimport int8_t, int64_t, uint8_t, uint16_t
import _thread
import threading

import numpy as np

from attncore._capi cimport *

ctypedef fused real:
    float
    double

# K/V: the queries' type, or a 16-bit cache stored as uint16 with float32 queries
# (IEEE half, or bfloat16 bits where the entry point's bf16 flag says so), or an
# int8 cache's values (flash_i8 only; the other entry points refuse it)
ctypedef fused kvt:
    float
    double
    uint16_t
    int8_t

CFLAGS = ATTNCORE_CFLAGS.decode()


# Interrupts.  While the core runs, the GIL is released and Python's own
# signal handlers (Ctrl-C's KeyboardInterrupt) wait for it.  A call made from
# the main thread therefore hands the core a hook that its calling thread
# polls between tasks and tiles (every AC_POLL_SECONDS at most): the hook
# takes the GIL and runs any pending handler; if one raises, the core stops,
# every thread finishes the tile in hand, and the exception is raised from the
# call.  Other threads never receive signals, so their calls get no hook.
_MAIN_THREAD = threading.main_thread().ident

cdef extern from "Python.h":
    # declared without `except`: the exception it may set is left for _raise
    int _check_signals "PyErr_CheckSignals"() noexcept


cdef int _poll_signals(void *ctx) noexcept nogil:
    with gil:
        # -1: a handler raised; its exception stays set for _raise
        return 1 if _check_signals() < 0 else 0


cdef int _raise(int rc) except -1:
    if rc == AC_EINTR:
        if PyErr_Occurred() != NULL:
            return -1  # the signal handler's exception (KeyboardInterrupt, ...)
        raise KeyboardInterrupt("attncore: the call was interrupted")
    if rc == AC_ENOMEM:
        raise MemoryError("attncore: the C core could not allocate its workspace")
    if rc == AC_EISA:
        raise ValueError("attncore: instruction set not available")
    raise ValueError(f"attncore: the C core rejected its arguments (status {rc})")


cdef int _strides3(int64_t *dst, Py_ssize_t *shape, Py_ssize_t *strides,
                   Py_ssize_t itemsize) except -1:
    # Inputs arrive as general strided views (a `::1` spec would make Cython
    # demand the whole array be C-contiguous); the core needs only the last
    # axis contiguous and whole-element strides, which _validate guarantees.
    if shape[3] > 1 and strides[3] != itemsize:
        raise ValueError("attncore: the last axis of an input must be contiguous")
    for i in range(3):
        if strides[i] % itemsize:
            raise ValueError("attncore: input strides must be whole elements")
        dst[i] = strides[i] // itemsize
    return 0


cdef ac_attn_args _args(const real[:, :, :, :] q, const kvt[:, :, :, :] k,
                        Py_ssize_t dv, double scale, object vis, int64_t block_q,
                        int64_t block_k, int nthreads) except *:
    """vis: attncore._validate.Visibility (its arrays stay alive with it)."""
    cdef ac_attn_args a
    cdef const int64_t[::1] kl
    cdef const int64_t[::1] qo
    cdef const int64_t[::1] ko
    cdef const uint8_t[:, :, :, :] mk
    cdef const int64_t[::1] mo
    cdef const real[:, :, :, :] bs
    cdef const int64_t[::1] bo
    cdef const double[::1] al
    cdef const double[::1] sk
    a.causal = vis.causal
    a.window = vis.window
    a.key_lengths = NULL
    a.q_offset = NULL
    a.k_offset = NULL
    a.mask = NULL
    a.mask_batch = NULL
    a.mask_stride[0] = a.mask_stride[1] = a.mask_stride[2] = a.mask_stride[3] = 0
    a.bias = NULL
    a.bias_batch = NULL
    a.bias_stride[0] = a.bias_stride[1] = a.bias_stride[2] = 0
    a.alibi = NULL
    a.sinks = NULL
    a.k_scale = a.v_scale = NULL
    a.kscale_stride[0] = a.kscale_stride[1] = a.vscale_stride[0] = a.vscale_stride[1] = 0
    a.softcap = vis.softcap
    if vis.bias is not None and vis.bias.size > 0:
        # as the mask: a (B, H, n, m) view, each batch's plane at its offset
        # (in elements: _problem made every stride a whole number of them)
        bs = vis.bias4
        bo = vis.bias_offsets
        a.bias = &bs[0, 0, 0, 0]
        a.bias_batch = &bo[0]
        for i in range(3):
            a.bias_stride[i] = bs.strides[i + 1] // <Py_ssize_t>sizeof(real)
    if vis.alibi is not None and vis.alibi.shape[0] > 0:
        al = vis.alibi
        a.alibi = &al[0]
    if vis.sinks is not None and vis.sinks.shape[0] > 0:
        sk = vis.sinks
        a.sinks = &sk[0]
    if vis.key_lengths is not None and vis.key_lengths.shape[0] > 0:
        kl = vis.key_lengths
        a.key_lengths = &kl[0]
    if vis.q_offset is not None and vis.q_offset.shape[0] > 0:
        qo = vis.q_offset
        a.q_offset = &qo[0]
    if vis.k_offset is not None and vis.k_offset.shape[0] > 0:
        ko = vis.k_offset
        a.k_offset = &ko[0]
    if vis.mask is not None and vis.mask.size > 0:
        # (B, H, n, m) view with its batch stride unused; each batch's plane
        # at its own offset (vis keeps both alive)
        mk = vis.mask4
        mo = vis.mask_offsets
        a.mask = &mk[0, 0, 0, 0]
        a.mask_batch = &mo[0]
        for i in range(4):
            a.mask_stride[i] = mk.strides[i]
    a.batch = q.shape[0]
    a.heads = q.shape[1]
    a.kv_heads = k.shape[1]
    a.n = q.shape[2]
    a.m = k.shape[2]
    a.dk = q.shape[3]
    a.dv = dv
    _strides3(a.q_stride, q.shape, q.strides, sizeof(real))
    _strides3(a.k_stride, k.shape, k.strides, sizeof(kvt))
    a.v_stride[0] = a.v_stride[1] = a.v_stride[2] = 0
    a.scale = scale
    a.split_kv = -1
    a.block_counts = NULL
    a.block_q = block_q
    a.block_k = block_k
    a.num_threads = nthreads
    a.interrupt = NULL
    a.interrupt_ctx = NULL
    if _thread.get_ident() == _MAIN_THREAD:
        a.interrupt = _poll_signals
    return a


@cython.boundscheck(False)
def flash(const real[:, :, :, :] q, const kvt[:, :, :, :] k, const kvt[:, :, :, :] v,
          real[:, :, :, ::1] out, real[:, :, ::1] lse, double scale, object vis,
          int64_t block_q, int64_t block_k, int nthreads, int split_kv, counts=None,
          bint bf16=False):
    """split_kv: few query rows — split the keys (decode)? -1 when it pays,
    0 never, 1 always.  bf16: uint16 K and V are bfloat16 bits (else float16).
    counts: None, or int64 (2,) the kernel adds its tile counts to (computed,
    masked), for teaching."""
    cdef ac_attn_args a = _args(q, k, v.shape[3], scale, vis, block_q, block_k, nthreads)
    a.split_kv = split_kv
    _strides3(a.v_stride, v.shape, v.strides, sizeof(kvt))
    cdef int64_t[::1] bc
    if counts is not None:
        bc = counts
        a.block_counts = &bc[0]
    cdef int rc
    with nogil:
        if real is float and kvt is float:
            rc = ac_flash_f32(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0])
        elif real is double and kvt is double:
            rc = ac_flash_f64(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0])
        elif real is float and kvt is uint16_t and bf16:
            rc = ac_flash_bf16(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                               &out[0, 0, 0, 0], &lse[0, 0, 0])
        elif real is float and kvt is uint16_t:
            rc = ac_flash_f16(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0])
        else:
            rc = AC_EINVAL
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def flash_bf16in(const uint16_t[:, :, :, :] q, const uint16_t[:, :, :, :] k,
                 const uint16_t[:, :, :, :] v, float[:, :, :, ::1] out, float[:, :, ::1] lse,
                 double scale, object vis, int64_t block_q, int64_t block_k, int nthreads,
                 int split_kv, uint16_t[:, :, :, ::1] out16=None):
    """flash over bfloat16 q, k and v (bits): float32 lse, and out float32 or,
    with out None, out16 rounded to bfloat16 bits; bfloat16 dot products where
    the CPU has them (csrc/bf16dot.c)."""
    if (out is None) == (out16 is None):
        raise ValueError("attncore: flash_bf16in writes one of out and out16")
    # the arguments as for a float32 q of the output's rows, then q's own width and strides
    cdef const float[:, :, :, :] rows
    if out is not None:
        rows = out
    else:
        rows = np.broadcast_to(np.zeros(out16.shape[3], np.float32),  # a row's shape alone
                               (out16.shape[0], out16.shape[1], out16.shape[2], out16.shape[3]))
    cdef ac_attn_args a = _args(rows, k, v.shape[3], scale, vis, block_q, block_k, nthreads)
    a.dk = q.shape[3]
    _strides3(a.q_stride, q.shape, q.strides, sizeof(uint16_t))
    a.split_kv = split_kv
    _strides3(a.v_stride, v.shape, v.strides, sizeof(uint16_t))
    cdef float *po = NULL
    cdef uint16_t *po16 = NULL
    if out is not None and out.size > 0:
        po = &out[0, 0, 0, 0]
    if out16 is not None and out16.size > 0:
        po16 = &out16[0, 0, 0, 0]
    cdef int rc
    with nogil:
        rc = ac_flash_bf16in(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                             po, po16, &lse[0, 0, 0])
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def to_bf16(const float[::1] x, uint16_t[::1] y, int nthreads=0):
    """y = x rounded to bfloat16 bits (attncore.to_bfloat16's rule), in C."""
    if x.shape[0] != y.shape[0]:
        raise ValueError("attncore: to_bf16 needs arrays of one length")
    if x.shape[0] == 0:
        return
    with nogil:
        ac_to_bf16(&x[0], &y[0], x.shape[0], nthreads)


def from_bf16(const uint16_t[::1] x, float[::1] y, int nthreads=0):
    """y = bfloat16 bits x widened to float32, exactly, in C."""
    if x.shape[0] != y.shape[0]:
        raise ValueError("attncore: from_bf16 needs arrays of one length")
    if x.shape[0] == 0:
        return
    with nogil:
        ac_from_bf16(&x[0], &y[0], x.shape[0], nthreads)


def from_f16(const uint16_t[::1] x, float[::1] y, int nthreads=0):
    """y = IEEE half bits x widened to float32, exactly, in C."""
    if x.shape[0] != y.shape[0]:
        raise ValueError("attncore: from_f16 needs arrays of one length")
    if x.shape[0] == 0:
        return
    with nogil:
        ac_from_f16(&x[0], &y[0], x.shape[0], nthreads)


def to_f16(const float[::1] x, uint16_t[::1] y, int nthreads=0):
    """y = x rounded to IEEE half bits (nearest even), in C; False (y
    untouched) where the CPU has no F16C."""
    cdef int done = 1
    if x.shape[0] != y.shape[0]:
        raise ValueError("attncore: to_f16 needs arrays of one length")
    if x.shape[0] == 0:
        return True
    with nogil:
        done = ac_to_f16(&x[0], &y[0], x.shape[0], nthreads)
    return bool(done)


def bf16dot_supported():
    """Do bfloat16 q, k, v go through the bfloat16 dot products here (the
    kernels in use have them, the CPU runs them, and they are the faster way
    on it or ATTNCORE_BF16DOT=1)?"""
    return bool(ac_bf16dot_supported())


def bf16dot_choose(int choice):
    """1: take the bfloat16 dot products where supported; 0: never; -1:
    measure again which way is faster (the default)."""
    ac_bf16dot_choose(choice)


def i8dot_supported():
    """Does a decode step over an int8 cache take its Q·Kᵀ and P·V as 16-bit
    integer dot products here (the kernels in use have them: avx2, or avx512
    where the CPU has AVX512_VNNI; and neither ATTNCORE_I8DOT=0 nor i8dot_choose(0) turned them
    off)?"""
    return bool(ac_i8dot_supported())


def i8dot_choose(int choice):
    """1: take the integer dot products where supported; 0: never; -1: as
    ATTNCORE_I8DOT says (on unless it is 0; the default)."""
    ac_i8dot_choose(choice)


cdef int _scale_strides(int64_t *dst, const float[:, :, :] s) except -1:
    # (B, Hkv, m) per-token scales: element strides over (batch, head), the
    # token axis contiguous (a view of a cache's first tokens is not C-contiguous)
    if s.shape[2] > 1 and s.strides[2] != sizeof(float):
        raise ValueError("attncore: the token axis of the scales must be contiguous")
    for i in range(2):
        dst[i] = s.strides[i] // <Py_ssize_t>sizeof(float)
    return 0


@cython.boundscheck(False)
def flash_i8(const float[:, :, :, :] q, const int8_t[:, :, :, :] k, const int8_t[:, :, :, :] v,
             const float[:, :, :] k_scale, const float[:, :, :] v_scale,
             float[:, :, :, ::1] out, float[:, :, ::1] lse, double scale, object vis,
             int64_t block_q, int64_t block_k, int nthreads, int split_kv):
    """flash over an int8 cache: k_scale and v_scale (B, Hkv, m), one float a
    token and kv head (attncore.KVCache(dtype="int8"))."""
    cdef ac_attn_args a = _args(q, k, v.shape[3], scale, vis, block_q, block_k, nthreads)
    a.split_kv = split_kv
    _strides3(a.v_stride, v.shape, v.strides, sizeof(int8_t))
    _scale_strides(a.kscale_stride, k_scale)
    _scale_strides(a.vscale_stride, v_scale)
    a.k_scale = &k_scale[0, 0, 0]
    a.v_scale = &v_scale[0, 0, 0]
    cdef int rc
    with nogil:
        rc = ac_flash_i8(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0], &out[0, 0, 0, 0],
                         &lse[0, 0, 0])
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def naive(const real[:, :, :, :] q, const kvt[:, :, :, :] k, const kvt[:, :, :, :] v,
          real[:, :, :, ::1] out, real[:, :, ::1] lse, real[:, :, :, ::1] weights,
          double scale, object vis, int nthreads, bint bf16=False):
    """weights=None: the n×m table lives in the core's own workspace."""
    cdef ac_attn_args a = _args(q, k, v.shape[3], scale, vis, 0, 0, nthreads)
    _strides3(a.v_stride, v.shape, v.strides, sizeof(kvt))
    cdef real *w = NULL
    if weights is not None:
        w = &weights[0, 0, 0, 0]
    cdef int rc
    with nogil:
        if real is float and kvt is float:
            rc = ac_naive_f32(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0], w)
        elif real is double and kvt is double:
            rc = ac_naive_f64(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0], w)
        elif real is float and kvt is uint16_t and bf16:
            rc = ac_naive_bf16(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                               &out[0, 0, 0, 0], &lse[0, 0, 0], w)
        elif real is float and kvt is uint16_t:
            rc = ac_naive_f16(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0], w)
        else:
            rc = AC_EINVAL
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def plain(const real[:, :, :, :] q, const real[:, :, :, :] k, const real[:, :, :, :] v,
          real[:, :, :, ::1] out, real[:, :, ::1] lse, double scale, object vis):
    """csrc/plain.c: the readable materialised attention, one thread."""
    cdef ac_attn_args a = _args(q, k, v.shape[3], scale, vis, 0, 0, 1)
    _strides3(a.v_stride, v.shape, v.strides, sizeof(real))
    cdef int rc
    with nogil:
        if real is float:
            rc = ac_plain_f32(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0])
        else:
            rc = ac_plain_f64(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                              &out[0, 0, 0, 0], &lse[0, 0, 0])
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def scores(const real[:, :, :, :] q, const kvt[:, :, :, :] k, real[:, :, :, ::1] s,
           double scale, object vis, int nthreads, bint bf16=False):
    cdef ac_attn_args a = _args(q, k, 0, scale, vis, 0, 0, nthreads)
    cdef int rc
    with nogil:
        if real is float and kvt is float:
            rc = ac_scores_f32(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &s[0, 0, 0, 0])
        elif real is double and kvt is double:
            rc = ac_scores_f64(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &s[0, 0, 0, 0])
        elif real is float and kvt is uint16_t and bf16:
            rc = ac_scores_bf16(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &s[0, 0, 0, 0])
        elif real is float and kvt is uint16_t:
            rc = ac_scores_f16(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &s[0, 0, 0, 0])
        else:
            rc = AC_EINVAL
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def softmax(const real[:, ::1] x, real[:, ::1] y, real[::1] lse, int nthreads):
    cdef int rc
    with nogil:
        if real is float:
            rc = ac_softmax_f32(x.shape[0], x.shape[1], &x[0, 0], &y[0, 0], &lse[0], nthreads)
        else:
            rc = ac_softmax_f64(x.shape[0], x.shape[1], &x[0, 0], &y[0, 0], &lse[0], nthreads)
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def backward(const real[:, :, :, :] q, const real[:, :, :, :] k, const real[:, :, :, :] v,
             const real[:, :, :, ::1] o, const real[:, :, ::1] lse, const real[:, :, :, ::1] do,
             real[:, :, :, ::1] dq, real[:, :, :, ::1] dk, real[:, :, :, ::1] dv, double scale,
             object vis, int64_t block_q, int64_t block_k, int nthreads,
             real[:, :, :, ::1] dbias=None):
    """dbias: None, or a zeroed dense (B, H, n, m) array that gets dS."""
    cdef ac_attn_args a = _args(q, k, v.shape[3], scale, vis, block_q, block_k, nthreads)
    _strides3(a.v_stride, v.shape, v.strides, sizeof(real))
    cdef int rc
    cdef real *db = NULL
    if dbias is not None and dbias.size > 0:
        db = &dbias[0, 0, 0, 0]
    with nogil:
        if real is float:
            rc = ac_backward_f32(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                                 &o[0, 0, 0, 0], &lse[0, 0, 0], &do[0, 0, 0, 0], &dq[0, 0, 0, 0],
                                 &dk[0, 0, 0, 0], &dv[0, 0, 0, 0], db)
        else:
            rc = ac_backward_f64(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0],
                                 &o[0, 0, 0, 0], &lse[0, 0, 0], &do[0, 0, 0, 0], &dq[0, 0, 0, 0],
                                 &dk[0, 0, 0, 0], &dv[0, 0, 0, 0], db)
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def linear(const real[:, :, :, :] q, const real[:, :, :, :] k, const real[:, :, :, :] v,
           real[:, :, :, ::1] out, object vis, int nthreads):
    cdef ac_attn_args a = _args(q, k, v.shape[3], 1.0, vis, 0, 0, nthreads)
    _strides3(a.v_stride, v.shape, v.strides, sizeof(real))
    cdef int rc
    with nogil:
        if real is float:
            rc = ac_linear_f32(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0], &out[0, 0, 0, 0])
        else:
            rc = ac_linear_f64(&a, &q[0, 0, 0, 0], &k[0, 0, 0, 0], &v[0, 0, 0, 0], &out[0, 0, 0, 0])
    if rc != AC_OK:
        _raise(rc)


MERGE_MAX_PARTS = AC_MERGE_MAX_PARTS


def merge(list outs, list lses, real[:, ::1] out, real[::1] lse, int nthreads):
    """outs: (rows, dv) C-contiguous arrays, lses: (rows,) arrays, one dtype."""
    cdef Py_ssize_t parts = len(outs), c
    if parts < 1 or parts > AC_MERGE_MAX_PARTS or len(lses) != parts:
        raise ValueError("attncore: merge takes 1 to MERGE_MAX_PARTS parts")
    cdef const real *op[AC_MERGE_MAX_PARTS]
    cdef const real *lp[AC_MERGE_MAX_PARTS]
    cdef const real[:, ::1] ov
    cdef const real[::1] lv
    views = []  # keep every buffer alive while the core reads it
    for c in range(parts):
        ov = outs[c]
        lv = lses[c]
        if ov.shape[0] != out.shape[0] or ov.shape[1] != out.shape[1] or lv.shape[0] != lse.shape[0]:
            raise ValueError("attncore: merge parts differ in shape")
        views.append((ov, lv))
        op[c] = &ov[0, 0] if ov.shape[0] * ov.shape[1] > 0 else NULL
        lp[c] = &lv[0] if lv.shape[0] > 0 else NULL
    cdef int rc
    cdef int64_t rows = out.shape[0], dv = out.shape[1]
    cdef real *po = &out[0, 0] if rows * dv > 0 else NULL
    cdef real *pl = &lse[0] if rows > 0 else NULL
    with nogil:
        if real is float:
            rc = ac_merge_f32(parts, rows, dv, <const float *const *>op, <const float *const *>lp,
                              po, pl, nthreads)
        else:
            rc = ac_merge_f64(parts, rows, dv, <const double *const *>op, <const double *const *>lp,
                              po, pl, nthreads)
    if rc != AC_OK:
        _raise(rc)


@cython.boundscheck(False)
def exp(const real[::1] x, real[::1] y):
    """y = exp(x) by the active kernels' vector exp (for testing it)."""
    cdef int rc
    with nogil:
        if real is float:
            rc = ac_exp_f32(x.shape[0], &x[0], &y[0])
        else:
            rc = ac_exp_f64(x.shape[0], &x[0], &y[0])
    if rc != AC_OK:
        _raise(rc)


def probe_fma(int64_t iters, int nthreads):
    """Run the FMA-throughput probe; returns the FLOPs done (time the call)."""
    cdef int64_t flops
    with nogil:
        flops = ac_probe_fma(iters, nthreads)
    return flops


def probe_bf16dot(int64_t iters, int nthreads):
    """The bfloat16 dot-product probe (vdpbf16ps); FLOPs done, 0 where the
    kernels in use have none (time the call)."""
    cdef int64_t flops
    with nogil:
        flops = ac_probe_bf16dot(iters, nthreads)
    return flops


def probe_read(const float[::1] x, int nthreads):
    """Stream-read x once over all threads; returns the bytes read."""
    cdef int64_t nbytes
    with nogil:
        nbytes = ac_probe_read(&x[0], x.shape[0], nthreads)
    return nbytes


def isa():
    return ac_isa().decode()


def set_isa(str name):
    if ac_set_isa(name.encode()) != AC_OK:
        raise ValueError(f"instruction set {name!r} is not available")


def isa_supported(str name):
    return bool(ac_isa_supported(name.encode()))


def isa_names():
    """Every instruction set this build knows, best first: runtime.c's one list."""
    return tuple(ac_isa_name(i).decode() for i in range(ac_isa_count()))


def default_blocks(int itemsize):
    cdef int64_t bq, bk
    ac_default_blocks(itemsize, &bq, &bk)
    return int(bq), int(bk)


def openmp():
    return bool(ac_openmp())


def max_threads():
    return ac_max_threads()


def single_after_fork():
    """True in a forked child whose parent ran several threads (one thread here)."""
    return bool(ac_single_after_fork())


def workspace_peak():
    return ac_workspace_peak()


def workspace_reset_peak():
    ac_workspace_reset_peak()
