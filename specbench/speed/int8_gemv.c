/* A weight-only int8 matrix-vector kernel for a drafter's draft steps (speed/native.py builds
 * and loads it; quantize.fast_int8_linear calls it).
 *
 *   y[m, n] = x_scale[m] * w_scale[n] * sum_k xq[m, k] * w[n, k]  (+ bias[n])
 *
 * x: M <= 4 rows of K bf16 activations, quantized here to int16 per row (scale
 * absmax / 32767: 15 bits, finer than bf16's 8-bit mantissa for all but the smallest
 * values of a row); w: N rows of K int8 with one bf16 scale per row; y and bias: bf16.
 * The int8 weights are widened to int16 and multiplied with vpdpwssd (AVX512-VNNI),
 * accumulating exactly in int32: no overflow for K < 65536 (|xq w| <= 32767 * 127, and
 * each int32 lane adds 2 * K / 32 such products). Rows are split between OpenMP threads
 * (the runtime PyTorch already loaded), each weight row is read once for all M rows, and
 * the next rows are prefetched: a draft step is bound by reading weights, and this loop
 * reads them faster than PyTorch's int8 kernel does. dev/drafter_step.py times the whole
 * draft step both ways.
 *
 * Compiled with -march=native; on a CPU without AVX512BW/VNNI it builds only
 * specbench_int8_ready(), which returns 0, and callers keep PyTorch's kernel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#include "bf16.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#define ROWS 4           /* weight rows per block */
#define MAX_M 4          /* activation rows */
#define PREFETCH_ROWS 16 /* how far ahead (in weight rows) to prefetch */

int specbench_int8_ready(void) { return 1; }

/* x [M, K] bf16 -> xq [M, K] int16 and one scale per row */
static void quantize_rows(const uint16_t *x, int M, int K, int16_t *xq, float *xscale) {
    for (int m = 0; m < M; m++) {
        const uint16_t *row = x + (size_t)m * K;
        float amax = 0.0f;
        for (int k = 0; k < K; k++) {
            float v = fabsf(bf16_to_float(row[k]));
            if (v > amax) amax = v;
        }
        float scale = amax > 0.0f ? amax / 32767.0f : 1.0f;
        float inv = 1.0f / scale;
        for (int k = 0; k < K; k++) xq[(size_t)m * K + k] = (int16_t)lrintf(bf16_to_float(row[k]) * inv);
        xscale[m] = scale;
    }
}

/* R weight rows n..n+R-1 against all M activation rows (M, R compile-time after inlining) */
static inline __attribute__((always_inline)) void block(const int16_t *xq, const float *xscale, const int8_t *w,
                                                        const uint16_t *wscale, const uint16_t *bias, uint16_t *y,
                                                        int M, int R, int N, int K, int n) {
    __m512i acc[MAX_M][ROWS];
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_si512();
    const int8_t *rows[ROWS];
    for (int r = 0; r < R; r++) rows[r] = w + (size_t)(n + r) * K;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512i wv[ROWS];
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(rows[r] + k + (size_t)PREFETCH_ROWS * K), _MM_HINT_T0);
            wv[r] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(rows[r] + k)));
        }
        for (int m = 0; m < M; m++) {
            __m512i xv = _mm512_loadu_si512(xq + (size_t)m * K + k);
            for (int r = 0; r < R; r++) acc[m][r] = _mm512_dpwssd_epi32(acc[m][r], xv, wv[r]);
        }
    }
    if (k < K) { /* the last K % 32 columns, masked */
        __mmask32 mask = (__mmask32)((1ull << (K - k)) - 1);
        __m512i wv[ROWS];
        for (int r = 0; r < R; r++) wv[r] = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, rows[r] + k));
        for (int m = 0; m < M; m++) {
            __m512i xv = _mm512_maskz_loadu_epi16(mask, xq + (size_t)m * K + k);
            for (int r = 0; r < R; r++) acc[m][r] = _mm512_dpwssd_epi32(acc[m][r], xv, wv[r]);
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) {
            float v = (float)_mm512_reduce_add_epi32(acc[m][r]) * xscale[m] * bf16_to_float(wscale[n + r]);
            if (bias) v += bf16_to_float(bias[n + r]);
            y[(size_t)m * N + n + r] = float_to_bf16(v);
        }
}

#define SPAN(M)                                                                                   \
    do {                                                                                          \
        int n = n0;                                                                               \
        for (; n + ROWS <= n1; n += ROWS) block(xq, xscale, w, wscale, bias, y, M, ROWS, N, K, n); \
        for (; n < n1; n++) block(xq, xscale, w, wscale, bias, y, M, 1, N, K, n);                 \
    } while (0)

static void span(const int16_t *xq, const float *xscale, const int8_t *w, const uint16_t *wscale,
                 const uint16_t *bias, uint16_t *y, int M, int N, int K, int n0, int n1) {
    switch (M) {
    case 1: SPAN(1); break;
    case 2: SPAN(2); break;
    case 3: SPAN(3); break;
    default: SPAN(4); break;
    }
}

/* Returns 0 on success, -1 for arguments it does not take (the caller then uses PyTorch's kernel). */
int specbench_int8_gemv(const uint16_t *x, int M, int K, const int8_t *w, const uint16_t *wscale,
                        const uint16_t *bias, int N, uint16_t *y) {
    if (M < 1 || M > MAX_M || K < 1 || K >= 65536 || N < 1) return -1;
    int16_t *xq = (int16_t *)aligned_alloc(64, ((size_t)M * K * sizeof(int16_t) + 63) / 64 * 64);
    if (!xq) return -1;
    float xscale[MAX_M];
    quantize_rows(x, M, K, xq, xscale);
#pragma omp parallel
    {
        int threads = omp_get_num_threads(), t = omp_get_thread_num();
        int blocks = (N + ROWS - 1) / ROWS, per = (blocks + threads - 1) / threads;
        int n0 = t * per * ROWS, n1 = (t + 1) * per * ROWS;
        if (n1 > N) n1 = N;
        if (n0 < n1) span(xq, xscale, w, wscale, bias, y, M, N, K, n0, n1);
    }
    free(xq);
    return 0;
}

#else

int specbench_int8_ready(void) { return 0; }

int specbench_int8_gemv(const uint16_t *x, int M, int K, const int8_t *w, const uint16_t *wscale,
                        const uint16_t *bias, int N, uint16_t *y) {
    (void)x; (void)M; (void)K; (void)w; (void)wscale; (void)bias; (void)N; (void)y;
    return -1;
}

#endif
