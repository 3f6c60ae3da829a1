/* runtime.c — choosing the micro-kernels, tile sizes and the decode path,
 * counting workspace, checking args, polling for interrupts. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h> /* ac_cpu_has_f16c */
#endif
#if defined(_OPENMP) && (defined(__unix__) || defined(__APPLE__))
#include <pthread.h> /* pthread_atfork: see "threads and fork()" below */
#endif

/* ---- ISA dispatch ------------------------------------------------------ */

/* The one list of instruction sets: every kernel table of the build, best
 * first.  Each is defined by its own file (kern_<name>.c, a stub where the
 * target lacks it) and says itself whether this CPU can run it; the first
 * that can is chosen, and the scalar set always can.  Python reads the same
 * list (ac_isa_name), so a new ISA is its file and one entry here. */
#define AC_ISA_LIST(X) X(avx512) X(avx2) X(neon) X(scalar)

#define AC_DECLARE_KERNELS(isa) extern const ac_kernels ac_kernels_##isa;
AC_ISA_LIST(AC_DECLARE_KERNELS)
#define AC_KERNELS_ENTRY(isa) &ac_kernels_##isa,
static const ac_kernels *const ac_all_kernels[] = {AC_ISA_LIST(AC_KERNELS_ENTRY)};
#define AC_N_KERNELS (sizeof ac_all_kernels / sizeof ac_all_kernels[0])

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
int ac_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static int cpu_supports(const ac_kernels *k) { return k->supported && k->supported(); }

static _Atomic(const ac_kernels *) active = NULL;

const ac_kernels *ac_kernels_active(void) {
    const ac_kernels *k = atomic_load(&active);
    if (k) return k;
    for (size_t i = 0; i < AC_N_KERNELS; i++) {
        if (cpu_supports(ac_all_kernels[i])) {
            k = ac_all_kernels[i];
            break;
        }
    }
    atomic_store(&active, k);
    return k;
}

const char *ac_isa(void) { return ac_kernels_active()->name; }

int ac_isa_count(void) { return (int)AC_N_KERNELS; }

const char *ac_isa_name(int i) {
    return i >= 0 && i < (int)AC_N_KERNELS ? ac_all_kernels[i]->name : NULL;
}

static const ac_kernels *find_kernels(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < AC_N_KERNELS; i++)
        if (strcmp(ac_all_kernels[i]->name, name) == 0 && cpu_supports(ac_all_kernels[i]))
            return ac_all_kernels[i];
    return NULL;
}

int ac_isa_supported(const char *name) { return find_kernels(name) != NULL; }

int ac_set_isa(const char *name) {
    const ac_kernels *k = find_kernels(name);
    if (!k) return AC_EISA;
    atomic_store(&active, k);
    return AC_OK;
}

/* The tuned default tiles of the active ISA for an element of real_bytes. */
static void default_tiles(int real_bytes, int64_t *block_q, int64_t *block_k) {
    const ac_kernels *k = ac_kernels_active();
    /* The tables are tuned for float32; float64 tiles hold half the values
     * in the same bytes of cache. */
    int64_t f = real_bytes > 4 ? 2 : 1;
    *block_q = k->block_q;
    *block_k = k->block_k / f > 8 ? k->block_k / f : 8;
}

void ac_default_blocks(int dtype_bytes, int64_t *block_q, int64_t *block_k) {
    int64_t bq, bk;
    default_tiles(dtype_bytes, &bq, &bk);
    if (block_q) *block_q = bq;
    if (block_k) *block_k = bk;
}

void ac_tile_sizes(const ac_attn_args *a, int real_bytes, ac_tiles_use use, int64_t *bq,
                   int64_t *bk) {
    if (use == AC_TILES_TABLE) { /* the score table's fixed tiling */
        const ac_kernels *k = ac_kernels_active();
        *bq = k->block_q;
        *bk = k->block_k;
        return;
    }
    *bq = a->block_q;
    *bk = a->block_k;
    if (*bq == 0 || *bk == 0) {
        int64_t dq, dk;
        default_tiles(real_bytes, &dq, &dk);
        /* Half-size tiles for a narrow window, which wastes fewer cells
         * outside the band (w=256, n=16384: 8% faster), and for the backward,
         * which holds three tiles a thread (P, dS, a transpose) where the
         * forward holds one, and keeps them in L2 so (AVX2, 2 threads, causal
         * n=1024 d=64: 39-41 ms at 128×128, 26-33 ms at 64×64; scalar 312 ->
         * 257 ms at 32×32; float64 78 -> 68 ms). */
        if ((use == AC_TILES_FLASH && a->window > 0 && a->window <= 2 * dk) ||
            use == AC_TILES_BACKWARD) {
            dq = dq / 2 > 8 ? dq / 2 : 8;
            dk = dk / 2 > 8 ? dk / 2 : 8;
        }
        if (*bq == 0) *bq = dq;
        if (*bk == 0) *bk = dk;
    }
    if (*bq > a->n) *bq = a->n;
    if (*bk > a->m) *bk = a->m > 0 ? a->m : 1;
}

int ac_decode_applies(const ac_attn_args *a) {
    const int64_t g = a->kv_heads ? a->heads / a->kv_heads : 1;
    if (a->split_kv == 0) return 0;
    /* a head-dependent mask would differ between the rows a task stacks */
    if (a->mask && a->mask_stride[1] != 0 && g > 1) return 0;
    if (a->split_kv > 0) return 1;
    return g * a->n <= AC_DECODE_MAX_ROWS && a->m >= 2 * AC_DECODE_MIN_CHUNK;
}

int ac_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

int ac_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ---- threads and fork() -------------------------------------------------
 * GNU OpenMP keeps the threads of a team alive between parallel regions and
 * does not register a fork handler: in a child made by fork() those threads
 * are gone, but libgomp believes they wait for work, and the first region of
 * several threads waits for them forever (the hang of a forked worker).  A
 * region of one thread does not touch the pool.  So once this process has
 * run a team of more than one thread, a forked child (and its children) runs
 * every call on one thread: correct, never hung, and what a process pool of
 * workers wants anyway.  A child started by spawn or forkserver is a fresh
 * process and keeps its threads. */
static _Atomic int team_started = 0, forked_single = 0;

#if defined(_OPENMP) && (defined(__unix__) || defined(__APPLE__))
static void after_fork_in_child(void) {
    if (atomic_load(&team_started)) atomic_store(&forked_single, 1);
}
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;
static void register_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }
#endif

int ac_team_size(int nt) {
#if defined(_OPENMP) && (defined(__unix__) || defined(__APPLE__))
    pthread_once(&fork_handler_once, register_fork_handler);
#endif
    if (atomic_load_explicit(&forked_single, memory_order_relaxed)) return 1;
    if (nt <= 0) nt = ac_max_threads();
    if (nt > 1 && !atomic_load_explicit(&team_started, memory_order_relaxed))
        atomic_store(&team_started, 1);
    return nt;
}

int ac_single_after_fork(void) { return atomic_load(&forked_single); }

/* ---- workspace accounting ---------------------------------------------- */

static _Atomic int64_t ws_current = 0, ws_peak = 0;

void *ac_ws_alloc(int64_t count, int64_t elem_size) {
    int64_t bytes;
    if (!ac_mul(count, elem_size, &bytes) || (uint64_t)bytes > (uint64_t)SIZE_MAX / 2)
        return NULL;
    /* 64-byte aligned so the SIMD kernels may use aligned tiles. */
    size_t size = ((size_t)bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, size ? size : 64);
    if (!p) return NULL;
    int64_t now = atomic_fetch_add(&ws_current, bytes) + bytes;
    int64_t peak = atomic_load(&ws_peak);
    while (now > peak && !atomic_compare_exchange_weak(&ws_peak, &peak, now)) {
    }
    return p;
}

void ac_ws_free(void *p, int64_t count, int64_t elem_size) {
    if (!p) return;
    atomic_fetch_sub(&ws_current, count * elem_size);
    free(p);
}

int64_t ac_workspace_peak(void) { return atomic_load(&ws_peak); }

void ac_workspace_reset_peak(void) { atomic_store(&ws_peak, atomic_load(&ws_current)); }

/* The parts of one allocation (internal.h says how to use them). */
void ac_ws_part(ac_workspace *ws, void *ptr_addr, int64_t count, int64_t elem_size) {
    int64_t bytes;
    if (ws->parts == AC_WS_MAX_PARTS || !ac_mul(count, elem_size, &bytes) ||
        __builtin_add_overflow(bytes, (int64_t)63, &bytes) ||
        __builtin_add_overflow(ws->bytes, bytes / 64 * 64, &bytes)) {
        ws->overflow = 1;
        return;
    }
    ws->dst[ws->parts] = ptr_addr;
    ws->offset[ws->parts++] = ws->bytes;
    ws->bytes = bytes;
}

int ac_ws_carve(ac_workspace *ws) {
    ws->base = ws->overflow ? NULL : ac_ws_alloc(ws->bytes, 1);
    for (int i = 0; i < ws->parts; i++) {
        void *p = ws->base ? (char *)ws->base + ws->offset[i] : NULL;
        memcpy(ws->dst[i], &p, sizeof p); /* into the caller's `T *`, whatever T is */
    }
    return ws->base ? AC_OK : AC_ENOMEM;
}

void ac_ws_release(ac_workspace *ws) {
    ac_ws_free(ws->base, ws->bytes, 1);
    ws->base = NULL;
}

/* ---- argument checks --------------------------------------------------- */

int ac_check_attn(const ac_attn_args *a, const void *q, const void *k, const void *v,
                  const void *out, int need_v) {
    if (!a) return AC_EINVAL;
    if (a->batch < 0 || a->heads < 0 || a->kv_heads < 0 || a->n < 0 || a->m < 0 ||
        a->dk < 0 || (need_v && a->dv < 0))
        return AC_EINVAL;
    if (a->heads > 0 && (a->kv_heads == 0 || a->heads % a->kv_heads != 0)) return AC_EINVAL;
    if (!(a->scale > 0) || !isfinite(a->scale)) return AC_EINVAL;
    if (a->block_q < 0 || a->block_k < 0 || a->window < 0) return AC_EINVAL;
    if (a->window > 0 && !a->causal) return AC_EINVAL; /* a window is a causal band */
    /* positions within ±2^60 and a window within 2^62: i + 1 + delta - window never overflows */
    if (a->window > AC_MAX_POSITION * 4) return AC_EINVAL;
    for (int64_t b = 0; b < a->batch; b++) {
        if (a->q_offset && (a->q_offset[b] < -AC_MAX_POSITION || a->q_offset[b] > AC_MAX_POSITION))
            return AC_EINVAL;
        if (a->k_offset && (a->k_offset[b] < -AC_MAX_POSITION || a->k_offset[b] > AC_MAX_POSITION))
            return AC_EINVAL;
    }
    /* The score modifiers: a finite soft-cap, finite slopes, sinks not NaN or +inf */
    if (!(a->softcap >= 0) || !isfinite(a->softcap)) return AC_EINVAL;
    if (a->bias && !a->bias_batch) return AC_EINVAL;
    for (int64_t h = 0; h < a->heads; h++) {
        if (a->alibi && !isfinite(a->alibi[h])) return AC_EINVAL;
        if (a->sinks && (a->sinks[h] != a->sinks[h] || a->sinks[h] == INFINITY)) return AC_EINVAL;
    }
    /* Sizes must be representable: B·H·n·max(m, dv, dk) elements. */
    int64_t bh, rows, t;
    if (!ac_mul(a->batch, a->heads, &bh) || !ac_mul(bh, a->n, &rows)) return AC_ENOMEM;
    if (!ac_mul(rows, a->m, &t) || !ac_mul(rows, a->dk, &t) || !ac_mul(rows, a->dv, &t))
        return AC_ENOMEM;
    if (!ac_mul(a->m, a->dk > a->dv ? a->dk : a->dv, &t)) return AC_ENOMEM;
    /* Data may be NULL only where there is none to read or write. */
    int64_t nq = rows * a->dk, nkv;
    if (!ac_mul(bh, a->m, &nkv) || !ac_mul(nkv, a->dk, &t) || !ac_mul(nkv, a->dv, &t))
        return AC_ENOMEM;
    if (nq > 0 && !q) return AC_EINVAL;
    if (nkv * a->dk > 0 && !k) return AC_EINVAL;
    if (need_v && nkv * a->dv > 0 && !v) return AC_EINVAL;
    if (rows * (need_v ? a->dv : a->m) > 0 && !out) return AC_EINVAL;
    return AC_OK;
}

/* ---- interruption ------------------------------------------------------ */

static double now_seconds(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ac_stop_init(ac_stop *s, const ac_attn_args *a) {
    s->fn = a->interrupt;
    s->ctx = a->interrupt_ctx;
    atomic_init(&s->stop, 0);
    s->next = s->fn ? now_seconds() + AC_POLL_SECONDS : 0;
}

int ac_stop_poll(ac_stop *s) {
    if (ac_stopped(s)) return 1;
    if (!s->fn) return 0;
#ifdef _OPENMP
    if (omp_get_thread_num() != 0) return 0; /* only the caller calls the hook */
#endif
    const double t = now_seconds();
    if (t < s->next) return 0;
    s->next = t + AC_POLL_SECONDS;
    if (!s->fn(s->ctx)) return 0;
    atomic_store(&s->stop, 1);
    return 1;
}

#define AC_FINISH_NAP_NS 200000 /* 0.2 ms: the cost of the wait's end, at most */
#define AC_FINISH_SPIN_S 50e-6   /* first, 50 us of polling without sleeping */

void ac_team_finish(ac_stop *s, _Atomic int *arrived) {
#ifdef _OPENMP
    const int team = omp_get_num_threads();
    atomic_fetch_add(arrived, 1);
    if (omp_get_thread_num() == 0 && s->fn) {
        /* The others are mostly a moment behind (their last task): a first nap
         * of the whole 0.2 ms was most of a small call's time (a one-token
         * decode on 2 threads: 0.34 ms against 0.05 ms on one).  So poll
         * without sleeping for AC_FINISH_SPIN_S, then nap, each nap twice
         * the last, up to AC_FINISH_NAP_NS. */
        const double spin_until = now_seconds() + AC_FINISH_SPIN_S;
        long nap_ns = 10000;
        while (atomic_load(arrived) < team) {
            ac_stop_poll(s);
            if (now_seconds() < spin_until) continue;
            const struct timespec nap = {0, nap_ns};
            nanosleep(&nap, NULL);
            nap_ns = nap_ns * 2 < AC_FINISH_NAP_NS ? nap_ns * 2 : AC_FINISH_NAP_NS;
        }
    }
    #pragma omp barrier
#else
    (void)s;
    (void)arrived;
#endif
}
