/* One decoder layer (Qwen2 and Llama layouts) of a model whose Linears are specbench's own,
 * in two calls, for AVX2 CPUs: a q4k drafter's, and a q4k or int8 target's (speed/fused_step.py
 * builds the layer descriptions and makes the calls).
 *
 * Why: a q4k drafter's draft step spent a third of its time outside its kernels, in some 90
 * PyTorch operations a layer (norms, rotary, dtype conversions, attention, the gated MLP),
 * each a few microseconds on a 2-core CPU; a target's step spent a fifth. Here a layer is two
 * calls around the KV cache, which stays HF's DynamicCache: Python appends to it between the
 * calls, or, where kv_slab.py has given the cache's layers room ahead, specbench_layers runs
 * every layer in one call and writes the new keys and values into that room itself:
 *
 *   layer_in:  x = RMSNorm(h); q|k|v = x Wqkv^T + b; rotary on q and k
 *   layer_out: a = attention(q, K, V); h += a Wo^T; x = RMSNorm(h);
 *              h += (silu(x Wg^T) * (x Wu^T)) Wd^T
 *
 * Every activation is float32. Every Linear is q4k_linear.c's or q6k_linear.c's (included
 * below: a GGUF file's own blocks) or, for an int8 target's layers, int8_linear.c's, called
 * through the address fused_step.py passes; q|k|v and gate|up are one
 * stacked Linear each (a drafter) or 3 and 2 whose outputs are put side by side (a target,
 * whose mapped weights are not copied to be stacked). Both kernels give a row the same bits
 * whatever other rows share the call. The rest works row by row in a fixed order (sums in 8
 * lanes then a fixed horizontal sum, -ffp-contract=off), and row r of a call attends the
 * keys before it and itself, so a row comes out the same bits whether it is fed alone or
 * with others: what a target's verify pass needs for greedy parity with its one-token steps,
 * and what the sweep's profile relies on for a drafter (lean_step.py). exp is a Cephes
 * polynomial in 8 lanes (relative error about 1e-7; libm's expf only for the SiLU of the
 * last few columns of a width that is not a multiple of 8). These are not the bits of HF's
 * forward of the same model: a drafter only has to be deterministic, and a target only has
 * to give every decoding mode the same bits, which it does, since all of them run it.
 */
#include "q6k_linear.c" /* and q4k_linear.c, which it includes */

#if defined(__AVX2__)

/* int8_linear.c's specbench_int8_linear (another library; fused_step.py passes its address) */
typedef int (*int8_linear_t)(const void *x, int x_bf16, int M, int K, const int8_t *w, const void *wscale, const void *bias,
                             int p_bf16, int N, void *y);

enum { Q4K_BLOCKS = 0, INT8_ROWS = 1, Q6K_BLOCKS = 2 };

typedef struct { /* a Linear: a Q4KLinear's or Q6KLinear's block arrays, or an Int8TargetLinear's rows and scales */
    const void *w; /* Q4K_BLOCKS: qs; Q6K_BLOCKS: ql; INT8_ROWS: int8 rows [N, K] */
    const uint8_t *sm; /* Q4K_BLOCKS: scales and mins; Q6K_BLOCKS: qh; INT8_ROWS: unused */
    const int8_t *sc; /* Q6K_BLOCKS: the sub-blocks' scales; else unused */
    const float *d, *dmin, *bias; /* d: the super-blocks' d (INT8_ROWS: float32 row scales); dmin: Q4K_BLOCKS only; bias or NULL */
    int N, K, kind;
} linear_t;

typedef struct {
    int H, Hq, KV, D, I; /* hidden, query heads, key/value heads, head dim, intermediate */
    float eps1, eps2, scaling;
    const float *norm1, *norm2; /* [H] float32: the two RMSNorm weights */
    int n_in, n_mlp; /* the Linears whose outputs, side by side, make q|k|v (1 stacked, or 3) and gate|up (1 or 2) */
    linear_t in[3], o, mlp[2], down;
    int8_linear_t int8; /* for INT8_ROWS Linears (NULL when there are none) */
} layer_t;

int specbench_layer_ready(void) { return 1; }

/* y [M, N] = x [M, K] W^T + b; each row's result independent of the others (both kernels) */
static int linear(const layer_t *L, const linear_t *w, const float *x, int M, float *y) {
    if (w->kind == Q4K_BLOCKS) return specbench_q4k_linear(x, M, w->K, (const uint8_t *)w->w, w->sm, w->d, w->dmin, w->bias, w->N, y);
    if (w->kind == Q6K_BLOCKS) return specbench_q6k_linear(x, M, w->K, (const uint8_t *)w->w, w->sm, w->sc, w->d, w->bias, w->N, y);
    if (w->kind == INT8_ROWS && L->int8) return L->int8(x, 0, M, w->K, (const int8_t *)w->w, w->d, w->bias, 0, w->N, y);
    return -1;
}

/* y [M, sum of N] = the count Linears' outputs side by side (as their stacked rows would give) */
static int linears(const layer_t *L, const linear_t *w, int count, const float *x, int M, float *y) {
    if (count == 1) return linear(L, w, x, M, y);
    int total = 0, widest = 0;
    for (int j = 0; j < count; j++) {
        total += w[j].N;
        if (w[j].N > widest) widest = w[j].N;
    }
    float *part = (float *)malloc((size_t)M * widest * sizeof(float));
    int status = part ? 0 : -1;
    for (int j = 0, at = 0; status == 0 && j < count; at += w[j].N, j++) {
        status = linear(L, &w[j], x, M, part);
        for (int r = 0; status == 0 && r < M; r++) memcpy(y + (size_t)r * total + at, part + (size_t)r * w[j].N, (size_t)w[j].N * sizeof(float));
    }
    free(part);
    return status;
}

/* the widths of count Linears side by side, or -1 unless every one reads K columns */
static int width(const linear_t *w, int count, int K) {
    int total = 0;
    for (int j = 0; j < count; j++) {
        if (w[j].K != K) return -1;
        total += w[j].N;
    }
    return count >= 1 ? total : -1;
}

/* exp(x) in 8 lanes (Cephes expf: x = n ln2 + r, a degree-5 polynomial in r, times 2^n) */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 fx = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(0.5f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(0.693359375f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(x, x)), x), _mm256_set1_ps(1.0f));
    __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

/* 8 key/value numbers as float32, from float32 or bfloat16 storage */
static inline __m256 load8(const void *p, long i, int bf16) {
    if (!bf16) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* y = w * (x / sqrt(mean(x^2) + eps)), one row of n (a multiple of 8 or not) */
static void rmsnorm(const float *x, const float *w, float eps, int n, float *y) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    float ss = hsum(acc);
    for (; i < n; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

/* rotary as Qwen2 and Llama apply it: x * cos + rotate_half(x) * sin, one head of D */
static void rotate(float *x, const float *cos, const float *sin, int D) {
    const int h = D / 2;
    for (int i = 0; i < h; i++) {
        const float a = x[i], b = x[i + h];
        x[i] = a * cos[i] - b * sin[i];
        x[i + h] = b * cos[i + h] + a * sin[i + h];
    }
}

/* hidden [n, H] -> qkv [n, (Hq + 2 KV) * D], q and k rotated; cos, sin [n, D] */
int specbench_layer_in(const layer_t *L, const float *hidden, int n, const float *cos, const float *sin, float *qkv) {
    const int H = L->H, D = L->D, NQKV = (L->Hq + 2 * L->KV) * L->D;
    if (n < 1 || L->n_in < 1 || L->n_in > 3 || width(L->in, L->n_in, H) != NQKV) return -1;
    float *x = (float *)malloc((size_t)n * H * sizeof(float));
    if (!x) return -1;
    for (int r = 0; r < n; r++) rmsnorm(hidden + (size_t)r * H, L->norm1, L->eps1, H, x + (size_t)r * H);
    int status = linears(L, L->in, L->n_in, x, n, qkv);
    free(x);
    if (status != 0) return status;
    for (int r = 0; r < n; r++)
        for (int h = 0; h < L->Hq + L->KV; h++) rotate(qkv + (size_t)r * NQKV + (size_t)h * D, cos + (size_t)r * D, sin + (size_t)r * D, D);
    return 0;
}

/* one query head over keys 0..T-1 of its key/value head: softmax(q K^T * scaling) V -> out [D] */
static void attend(const float *q, const void *K, const void *V, int bf16, long ts, int T, int D, float scaling, float *scores, float *out) {
    float m = -INFINITY;
    for (int t = 0; t < T; t++) {
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < D; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(q + i), load8(K, (long)t * ts + i, bf16)));
        scores[t] = hsum(acc) * scaling;
        if (scores[t] > m) m = scores[t];
    }
    int t = 0;
    __m256 acc = _mm256_setzero_ps();
    for (; t + 8 <= T; t += 8) {
        __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + t), _mm256_set1_ps(m)));
        _mm256_storeu_ps(scores + t, p);
        acc = _mm256_add_ps(acc, p);
    }
    if (t < T) { /* the last few scores, padded with exp(-inf - m) = 0 */
        float tail[8];
        for (int i = 0; i < 8; i++) tail[i] = t + i < T ? scores[t + i] - m : -INFINITY;
        __m256 p = exp8(_mm256_loadu_ps(tail));
        p = _mm256_and_ps(p, _mm256_cmp_ps(_mm256_loadu_ps(tail), _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ));
        _mm256_storeu_ps(tail, p);
        for (int i = 0; t + i < T; i++) scores[t + i] = tail[i];
        acc = _mm256_add_ps(acc, p);
    }
    const float inv = 1.0f / hsum(acc);
    for (int i = 0; i < D; i += 8) {
        __m256 o = _mm256_setzero_ps();
        for (int s = 0; s < T; s++) o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_set1_ps(scores[s]), load8(V, (long)s * ts + i, bf16)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(o, _mm256_set1_ps(inv)));
    }
}

/* hidden [n, H] (updated in place) after the attention over the cache's T keys, the last
 * n of them this call's rows; K, V: [KV, T, D] with head stride hs and token stride ts
 * (elements), float32 or bfloat16; qkv: layer_in's output */
int specbench_layer_out(const layer_t *L, float *hidden, int n, const float *qkv, const void *K, const void *V, int bf16, long hs,
                        long ts, int T) {
    const int H = L->H, D = L->D, Hq = L->Hq, I = L->I, NQKV = (Hq + 2 * L->KV) * D, group = Hq / L->KV;
    if (n < 1 || T < n || D % 8 != 0 || Hq % L->KV != 0 || width(&L->o, 1, Hq * D) != H || L->n_mlp < 1 || L->n_mlp > 2 ||
        width(L->mlp, L->n_mlp, H) != 2 * I || width(&L->down, 1, I) != H)
        return -1;
    float *a = (float *)malloc((size_t)n * Hq * D * sizeof(float));
    float *y = (float *)malloc((size_t)n * (2 * I > H ? 2 * I : H) * sizeof(float));
    float *x = (float *)malloc((size_t)n * (I > H ? I : H) * sizeof(float));
    int status = (a && y && x) ? 0 : -1;
    for (int r = 0; status == 0 && r < n; r++) {
        const int keys = T - n + r + 1;
        int failed = 0;
#pragma omp parallel for schedule(static) if (Hq * keys > 4096)
        for (int h = 0; h < Hq; h++) {
            float *scores = (float *)malloc((size_t)keys * sizeof(float));
            if (!scores) {
                failed = 1;
                continue;
            }
            const long kv = (long)(h / group) * hs;
            const int bytes = bf16 ? 2 : 4;
            attend(qkv + (size_t)r * NQKV + (size_t)h * D, (const char *)K + kv * bytes, (const char *)V + kv * bytes, bf16, ts, keys, D,
                   L->scaling, scores, a + ((size_t)r * Hq + h) * D);
            free(scores);
        }
        if (failed) status = -1;
    }
    if (status == 0) status = linear(L, &L->o, a, n, y);
    if (status == 0) {
        for (size_t i = 0; i < (size_t)n * H; i++) hidden[i] = hidden[i] + y[i];
        for (int r = 0; r < n; r++) rmsnorm(hidden + (size_t)r * H, L->norm2, L->eps2, H, x + (size_t)r * H);
        status = linears(L, L->mlp, L->n_mlp, x, n, y);
    }
    if (status == 0) {
        for (int r = 0; r < n; r++) { /* silu(gate) * up = gate / (1 + exp(-gate)) * up */
            const float *g = y + (size_t)r * 2 * I, *u = g + I;
            float *out = x + (size_t)r * I;
            int i = 0;
            for (; i + 8 <= I; i += 8) {
                __m256 gv = _mm256_loadu_ps(g + i);
                __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
                __m256 s = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
                _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
            }
            for (; i < I; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        }
        status = linear(L, &L->down, x, n, y);
    }
    if (status == 0)
        for (size_t i = 0; i < (size_t)n * H; i++) hidden[i] = hidden[i] + y[i];
    free(a);
    free(y);
    free(x);
    return status;
}

/* one row of D float32 numbers into K/V storage (float32 or bfloat16, rounded as PyTorch rounds) */
static void store_row(char *base, size_t at, const float *x, int D, int bf16) {
    if (bf16)
        for (int d = 0; d < D; d++) ((uint16_t *)base)[at + d] = float_to_bf16(x[d]);
    else
        memcpy((float *)base + at, x, (size_t)D * sizeof(float));
}

/* A whole forward's layers in one call: for each of the count layers, layer_in, this call's n
 * key and value rows written at positions past..past+n-1 of the layer's storage (K[i], V[i]:
 * [KV, capacity, D] with head stride hs and token stride ts, float32 or bfloat16, as the
 * cache would store them), then layer_out over the past + n keys. The same operations in the
 * same order as the two calls a layer with the cache's own update between them, so the same
 * bits; what it saves is Python's work between the calls (fused_step.py's slabs). Returns 0,
 * or layer_in's or layer_out's refusal. */
int specbench_layers(const layer_t *layers, int count, float *hidden, int n, const float *cos, const float *sin, float *qkv,
                     void *const *K, void *const *V, int bf16, long hs, long ts, int past) {
    for (int i = 0; i < count; i++) {
        const layer_t *L = &layers[i];
        const int D = L->D, NQKV = (L->Hq + 2 * L->KV) * D;
        int status = specbench_layer_in(L, hidden, n, cos, sin, qkv);
        if (status != 0) return status;
        for (int r = 0; r < n; r++)
            for (int h = 0; h < L->KV; h++) {
                const float *k = qkv + (size_t)r * NQKV + (size_t)(L->Hq + h) * D, *v = k + (size_t)L->KV * D;
                const size_t at = (size_t)h * hs + (size_t)(past + r) * ts;
                store_row((char *)K[i], at, k, D, bf16);
                store_row((char *)V[i], at, v, D, bf16);
            }
        status = specbench_layer_out(L, hidden, n, qkv, K[i], V[i], bf16, hs, ts, past + n);
        if (status != 0) return status;
    }
    return 0;
}

#else

int specbench_layer_ready(void) { return 0; }

int specbench_layer_in(const void *L, const float *hidden, int n, const float *cos, const float *sin, float *qkv) {
    (void)L; (void)hidden; (void)n; (void)cos; (void)sin; (void)qkv;
    return -1;
}

int specbench_layer_out(const void *L, float *hidden, int n, const float *qkv, const void *K, const void *V, int bf16, long hs,
                        long ts, int T) {
    (void)L; (void)hidden; (void)n; (void)qkv; (void)K; (void)V; (void)bf16; (void)hs; (void)ts; (void)T;
    return -1;
}

int specbench_layers(const void *layers, int count, float *hidden, int n, const float *cos, const float *sin, float *qkv,
                     void *const *K, void *const *V, int bf16, long hs, long ts, int past) {
    (void)layers; (void)count; (void)hidden; (void)n; (void)cos; (void)sin; (void)qkv; (void)K; (void)V; (void)bf16; (void)hs;
    (void)ts; (void)past;
    return -1;
}

#endif
