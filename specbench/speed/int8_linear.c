/* A batch-invariant weight-only int8 linear layer for AVX2 CPUs (speed/native.py builds and
 * loads it; quantize.py's Int8TargetLinear and fast_int8_linear call it).
 *
 *   y[m, n] = (float)(sum_k xq[m, k] * w[n, k]) * x_scale[m] * w_scale[n]  (+ bias[n])
 *
 * x: M rows of K activations (float32, or bfloat16 for a drafter), quantized here to int16
 * per row (scale absmax / 32767); w: N rows of K int8 with one scale per row.
 *
 * Why batch-invariant: every dot product is summed EXACTLY, in integers (int32 lanes over
 * chunks of KC columns, then int64), so its value does not depend on the order of the sum,
 * on how many rows share the call, on the tiling or on the thread count; the epilogue is the
 * same three float operations for every (m, n), in a fixed order, with contraction into FMA
 * turned off (-ffp-contract=off). A row computed alone and the same row inside a k-token
 * verify pass are bit-identical, which is what a target needs for greedy speculative
 * decoding to reproduce its own plain decoding token for token.
 *
 * Why int16 activations with vpmaddwd: AVX2 has no 8-bit multiply of signed by signed, and
 * vpmaddwd multiplies 16 int16 pairs and adds neighbours into 8 int32 lanes, one instruction
 * for 16 multiply-adds; the int8 weights are widened once per load and reused for every
 * activation row of the tile, so a verify pass of a few rows costs little more than one row
 * (the weights are read once). Overflow: |xq * w| <= 32767 * 127, one vpmaddwd adds two such
 * products to a lane, and KC / 16 = 128 of them fit an int32 lane (128 * 2 * 32767 * 127 <
 * 2^31); each chunk's lanes are then added into int64.
 *
 * Only AVX2 instructions: the same code runs on AVX-512 CPUs. Without AVX2 (or without a
 * compiler) native.py reports why and callers keep PyTorch's kernels.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#include "bf16.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define KC 2048        /* columns per exact int32 chunk (see the overflow note) */
#define R 2            /* weight rows per tile */
#define MT 4           /* activation rows per tile: 8 int32 accumulators, 2 weight and 1 activation
                          registers; of 2x4, 4x2, 3x4 and 4x3 the fastest for 4 to 32 rows */
#define NB 16          /* weight rows per cache block */
#define PREFETCH 8     /* weight rows ahead to prefetch */

int specbench_int8_linear_ready(void) { return 1; }

static inline float load(const void *p, int bf16, size_t i) {
    return bf16 ? bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* one row of K activations -> int16 with scale absmax / 32767 (a zero row gets scale 1) */
static void quantize_row(const void *x, int bf16, size_t offset, int K, int16_t *xq, float *scale) {
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
        float v = fabsf(load(x, bf16, offset + k));
        if (v > amax) amax = v;
    }
    float s = amax > 0.0f ? amax / 32767.0f : 1.0f;
    float inv = 1.0f / s;
    for (int k = 0; k < K; k++) {
        long q = lrintf(load(x, bf16, offset + k) * inv); /* round half to even */
        xq[k] = (int16_t)(q > 32767 ? 32767 : (q < -32767 ? -32767 : q));
    }
    *scale = s;
}

/* the 8 int32 lanes of v, added in int64 */
static inline int64_t lanes_sum(__m256i v) {
    __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
    __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1));
    __m256i s = _mm256_add_epi64(lo, hi);
    int64_t out[4];
    _mm256_storeu_si256((__m256i *)out, s);
    return out[0] + out[1] + out[2] + out[3];
}

/* exact dot products of `mt` activation rows with `r` weight rows -> acc[m][r] (int64) */
static inline __attribute__((always_inline)) void tile(const int16_t *const *xrow, const int8_t *const *wrow, int mt, int r,
                                                         int K, int64_t acc[MT][R]) {
    for (int m = 0; m < mt; m++)
        for (int j = 0; j < r; j++) acc[m][j] = 0;
    int kv = K & ~15; /* columns the vector loop covers */
    for (int c = 0; c < kv; c += KC) {
        int end = c + KC < kv ? c + KC : kv;
        __m256i a[MT][R];
        for (int m = 0; m < mt; m++)
            for (int j = 0; j < r; j++) a[m][j] = _mm256_setzero_si256();
        for (int k = c; k < end; k += 16) {
            __m256i w[R];
            for (int j = 0; j < r; j++) {
                _mm_prefetch((const char *)(wrow[j] + k + (size_t)PREFETCH * K), _MM_HINT_T0);
                w[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wrow[j] + k)));
            }
            for (int m = 0; m < mt; m++) {
                __m256i x = _mm256_loadu_si256((const __m256i *)(xrow[m] + k));
                for (int j = 0; j < r; j++) a[m][j] = _mm256_add_epi32(a[m][j], _mm256_madd_epi16(x, w[j]));
            }
        }
        for (int m = 0; m < mt; m++)
            for (int j = 0; j < r; j++) acc[m][j] += lanes_sum(a[m][j]);
    }
    for (int k = kv; k < K; k++) /* the last K % 16 columns */
        for (int m = 0; m < mt; m++)
            for (int j = 0; j < r; j++) acc[m][j] += (int32_t)xrow[m][k] * wrow[j][k];
}

typedef struct {
    const int16_t *xq;
    const float *xscale;
    const int8_t *w;
    const void *wscale, *bias;
    int pbf16, ybf16, M, N, K;
    void *y;
} job_t;

static inline void store(const job_t *J, int m, int n, int64_t acc) {
    float v = (float)acc * J->xscale[m];
    v = v * load(J->wscale, J->pbf16, n);
    if (J->bias) v = v + load(J->bias, J->pbf16, n);
    size_t i = (size_t)m * J->N + n;
    if (J->ybf16)
        ((uint16_t *)J->y)[i] = float_to_bf16(v);
    else
        ((float *)J->y)[i] = v;
}

/* weight rows n0..n1-1 against every activation row, NB weight rows at a time: the block
 * stays in cache while every activation row passes it (a prompt of many rows), and one
 * activation row of a draft or verify step reads each weight once */
static void rows(const job_t *J, int n0, int n1) {
    int64_t acc[MT][R];
    for (int nb = n0; nb < n1; nb += NB) {
        int nb1 = nb + NB < n1 ? nb + NB : n1;
        for (int m = 0; m < J->M; m += MT) {
            int mt = J->M - m < MT ? J->M - m : MT;
            const int16_t *xrow[MT];
            for (int i = 0; i < MT; i++) xrow[i] = J->xq + (size_t)(m + (i < mt ? i : 0)) * J->K;
            for (int n = nb; n < nb1; n += R) {
                int r = nb1 - n < R ? nb1 - n : R;
                const int8_t *wrow[R];
                for (int j = 0; j < R; j++) wrow[j] = J->w + (size_t)(n + (j < r ? j : 0)) * J->K;
                /* constant tile shapes, so the compiler keeps the accumulators in registers */
                if (mt == MT && r == R)
                    tile(xrow, wrow, MT, R, J->K, acc);
                else if (mt == 1 && r == R)
                    tile(xrow, wrow, 1, R, J->K, acc);
                else
                    tile(xrow, wrow, mt, r, J->K, acc);
                for (int i = 0; i < mt; i++)
                    for (int j = 0; j < r; j++) store(J, m + i, n + j, acc[i][j]);
            }
        }
    }
}

/* y [M, N] = x [M, K] times int8 w [N, K]^T with per-row wscale [N] (+ bias [N]).
 * x_bf16: x and y are bfloat16 (else float32); p_bf16: wscale and bias are bfloat16 (else
 * float32); bias may be NULL. Returns 0, or -1 for arguments it does not take. */
int specbench_int8_linear(const void *x, int x_bf16, int M, int K, const int8_t *w, const void *wscale,
                          const void *bias, int p_bf16, int N, void *y) {
    if (M < 1 || K < 1 || N < 1) return -1;
    int16_t *xq = (int16_t *)malloc((size_t)M * K * sizeof(int16_t));
    float *xscale = (float *)malloc((size_t)M * sizeof(float));
    if (!xq || !xscale) {
        free(xq);
        free(xscale);
        return -1;
    }
#pragma omp parallel for schedule(static) if (M > 8)
    for (int m = 0; m < M; m++) quantize_row(x, x_bf16, (size_t)m * K, K, xq + (size_t)m * K, xscale + m);
    job_t J = {xq, xscale, w, wscale, bias, p_bf16, x_bf16, M, N, K, y};
#pragma omp parallel
    {
        int threads = omp_get_num_threads(), t = omp_get_thread_num();
        int tiles = (N + R - 1) / R, per = (tiles + threads - 1) / threads;
        int n0 = t * per * R, n1 = (t + 1) * per * R;
        if (n1 > N) n1 = N;
        if (n0 < n1) rows(&J, n0, n1);
    }
    free(xq);
    free(xscale);
    return 0;
}

/* w [N, K] (float32, or bfloat16 when w_bf16) -> q [N, K] int8 and scale [N] (float32, or
 * bfloat16 when s_bf16), symmetric per row: scale = max(absmax / 127, 1e-10) (rounded to
 * bfloat16 when s_bf16), q = round-half-even(w / scale) clamped to +-127; the same operations
 * as quantize.quantize_rows (tested equal), in one pass and on every thread. */
int specbench_quantize_rows(const void *w, int w_bf16, int N, int K, int8_t *q, void *scale, int s_bf16) {
    if (N < 1 || K < 1) return -1;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        size_t row = (size_t)n * K;
        float amax = 0.0f;
        for (int k = 0; k < K; k++) {
            float v = fabsf(load(w, w_bf16, row + k));
            if (v > amax) amax = v;
        }
        float s = amax / 127.0f;
        if (!(s >= 1e-10f)) s = 1e-10f;
        if (s_bf16) {
            uint16_t b = float_to_bf16(s);
            ((uint16_t *)scale)[n] = b;
            s = bf16_to_float(b);
        } else {
            ((float *)scale)[n] = s;
        }
        for (int k = 0; k < K; k++) {
            float v = nearbyintf(load(w, w_bf16, row + k) / s);
            q[row + k] = (int8_t)(v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v));
        }
    }
    return 0;
}

#else

int specbench_int8_linear_ready(void) { return 0; }

int specbench_quantize_rows(const void *w, int w_bf16, int N, int K, int8_t *q, void *scale, int s_bf16) {
    (void)w; (void)w_bf16; (void)N; (void)K; (void)q; (void)scale; (void)s_bf16;
    return -1;
}

int specbench_int8_linear(const void *x, int x_bf16, int M, int K, const int8_t *w, const void *wscale,
                          const void *bias, int p_bf16, int N, void *y) {
    (void)x; (void)x_bf16; (void)M; (void)K; (void)w; (void)wscale; (void)bias; (void)p_bf16; (void)N; (void)y;
    return -1;
}

#endif
