/* linear_body.h — kernelised ("linear") attention: softmax(q·k) replaced by
 * a feature map φ with φ(q)·φ(k) >= 0, here φ(x) = elu(x) + 1.
 * Instantiated by float32.c (ac_linear_f32) and float64.c (ac_linear_f64).
 *
 *   out_i = φ(q_i)ᵀ S / (φ(q_i) · z),   S = Σ_j φ(k_j) v_jᵀ  (d, dv),   z = Σ_j φ(k_j)  (d)
 *
 * The sums over keys are done once, so the cost is O(n·d·dv) time and the
 * state O(d·dv) — no n×m table at all.  Causal: S and z become running
 * prefix sums, row i seeing keys j <= i + (m - n) (bottom-right, as in
 * attention; the same visibility helpers).  A row that sees no key gives 0.
 *
 * Needs tiles_body.h included before it.
 */

static inline real phi(real x) { return x > 0 ? x + 1 : exp(x); } /* elu(x) + 1 */

int FN(ac_linear)(const ac_attn_args *a, const real *q, const real *k, const real *v,
                  real *out) {
    int rc = ac_check_attn(a, q, k, v, out, 1);
    if (rc != AC_OK) return rc;
    const int64_t n = a->n, d = a->dk, dv = a->dv, H = a->heads;
    if (n == 0 || a->batch * H == 0) return AC_OK;
    const int64_t group = H / a->kv_heads;
    int64_t state;
    if (!ac_muladd(d, dv, 2 * d, &state)) return AC_ENOMEM;
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);
    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
        real *S = ac_ws_alloc(state, sizeof(real)); /* (d, dv), then z (d), then φ(q_i) (d) */
        if (!S) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < a->batch * H; t++) {
            if (!S || ac_stop_poll(&stop)) continue;
            const int64_t b = t / H, h = t % H, hk = h / group;
            const real *qh = q_head(q, a->q_stride, b, h);
            const kvreal *kh = kv_head(k, a->k_stride, b, hk);
            const kvreal *vh = kv_head(v, a->v_stride, b, hk);
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            real *z = S + d * dv, *fq = z + d, *oh = out + t * n * dv;
            memset(S, 0, (size_t)(d * dv + d) * sizeof(real));
            int64_t seen = 0; /* keys folded into S and z so far */
            for (int64_t i = 0; i < n; i++) {
                if ((i & 255) == 255 && ac_stop_poll(&stop)) break; /* long heads */
                const int64_t hi = ac_vis_hi(&vis, i); /* the keys row i sees: [0, hi) */
                for (; seen < hi; seen++) { /* S += φ(k_j) v_jᵀ, z += φ(k_j) */
                    /* without causal, row 0 folds in every key: ask here too */
                    if ((seen & 255) == 255 && ac_stop_poll(&stop)) break;
                    const real *kj = kh + seen * a->k_stride[2], *vj = vh + seen * a->v_stride[2];
                    for (int64_t x = 0; x < d; x++) {
                        const real f = phi(kj[x]);
                        z[x] += f;
                        for (int64_t c = 0; c < dv; c++) S[x * dv + c] += f * vj[c];
                    }
                }
                if (ac_stopped(&stop)) break;
                const real *qi = qh + i * a->q_stride[2];
                real den = 0;
                for (int64_t x = 0; x < d; x++) {
                    fq[x] = phi(qi[x]);
                    den += fq[x] * z[x];
                }
                real *oi = oh + i * dv;
                for (int64_t c = 0; c < dv; c++) oi[c] = 0;
                if (seen == 0 || den == 0) continue; /* nothing visible or weighed: 0 */
                for (int64_t x = 0; x < d; x++)
                    for (int64_t c = 0; c < dv; c++) oi[c] += fq[x] * S[x * dv + c];
                const real inv = 1 / den;
                for (int64_t c = 0; c < dv; c++) oi[c] *= inv;
            }
        }
        ac_ws_free(S, state, sizeof(real));
    }
    return ac_status_of(failed, &stop);
}
