/* A batch-invariant linear layer over a GGUF file's own Q4_K blocks, for AVX2 CPUs
 * (speed/native.py builds and loads it; speed/gguf_blocks.py's Q4KLinear calls it).
 *
 * Q4_K (llama.cpp's k-quant): a weight row is cut into super-blocks of 256 columns, each
 * into 8 sub-blocks of 32; weight = d * sc[j] * q - dmin * m[j], with q in 0..15 (4 bits),
 * sc[j] and m[j] in 0..63 and d, dmin one float per super-block. gguf_blocks.py repacks
 * the file's 144-byte blocks into four arrays (nibbles in the order this build reads, sc and
 * m bytes, d, dmin) without changing a value, so this layer multiplies by exactly the weights the file holds (and
 * exactly what transformers' dequantized float32 copy of them holds, tested).
 *
 * Activations are quantized here per row and super-block to int8 (scale absmax / 127,
 * llama.cpp's Q8_K rule), so a super-block's dot product is an exact integer sum:
 *
 *   y[m, n] = sum_s  xs[m,s] * ( d[n,s] * sum_j sc[j] * (sum_i q_i * x_i)
 *                               - dmin[n,s] * sum_j m[j] * (sum_i x_i) )   (+ bias[n])
 *
 * Why batch-invariant: the integer parts are exact, and the float parts are the same
 * operations in the same order for every (m, n), whatever the tile, the number of rows in
 * the call or the thread count (built with -ffp-contract=off, no fast-math), so a verify
 * pass of k rows gives each row the bits a one-row decoding step gives. That is what a
 * target needs for greedy speculative decoding to equal its own plain decoding.
 *
 * Why this shape: a CPU decoding step is bound by reading weights, and Q4_K is 4.5 bits a
 * weight against int8's 8. Each weight row's nibbles are unpacked once per tile and used by
 * up to MT activation rows, so on the 2-8 rows of a verify pass the per-row arithmetic, not
 * the weight bytes, sets the time. MT is 4 where AVX2's 16 vector registers hold 4 rows'
 * sums and 8 where AVX-512 gives 32. A row's arithmetic is the same in a tile of any height,
 * so MT changes no bit.
 *
 * The nibbles are read in lane order in every build: gguf_blocks.py stores each super-block's
 * nibbles so that bytes 4p..4p+3 of every 32 hold sub-block p, and the activations are
 * stored in the same order, so lane p of a tile's int32 sums holds sub-block p alone and is
 * scaled once a super-block by sc[p]:
 *
 *   - a build for a CPU with AVX-VNNI or AVX512-VNNI (VNNI): vpdpbusd multiplies 32 unsigned
 *     nibbles by 32 signed int8 activations and adds each 4 products into an int32 lane, one
 *     instruction per 32 columns and row, then one vpmulld by the 8 scales a super-block;
 *   - a build for AVX2 alone: vpmaddubsw into 16 int16 pairs (at most 2 * 15 * 127 = 3810,
 *     no saturation); the 8 products of a super-block add as int16 (at most 8 * 3810 = 30480
 *     < 2^15), then one vpmaddwd by the scales: 9 multiplies a super-block and row.
 *
 * Both put the exact integer sc[p] * (sum over sub-block p of q * x) in lane p, below 2^24,
 * and run the same float operations after it: the two builds give every row the same bits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#include "bf16.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define QK 256   /* columns per super-block */
#define NSUB 8   /* sub-blocks of 32 per super-block */
#if defined(__AVX512F__)
#define MT 8     /* activation rows per tile: 32 vector registers hold 8 rows' sums */
#else
#define MT 4     /* activation rows per tile: AVX2's 16 vector registers hold 4 rows' sums */
#endif
#define NB 16    /* weight rows per cache block */
/* How far ahead of the super-block being read its weight stream is prefetched, in bytes (also
 * q6k_linear.c's). In bytes, not rows: a row's nibbles are 128 bytes a super-block, so two
 * rows ahead would be 1 KB on a drafter's 896-column rows, too short for memory to answer in
 * time, and 9 KB on an 8960-column down projection. 4 KB suits both; a prefetch changes no
 * bit. */
#define PREFETCH_BYTES 4096

int specbench_q4k_ready(void) { return 1; }

/* one row of K float32 activations -> int8 per super-block of the padded width KP (scale
 * absmax / 127; an all-zero super-block gets scale 1), with the sum of each sub-block of 32
 * (bsum) and, where bsum16 is not NULL, of each 16 columns (q6k_linear.c's sub-blocks).
 * Columns K..KP-1 (a width that is not a multiple of 256) are zeros: they add nothing.
 * order: where xq puts each column of a super-block: COLUMNS in place (a file-order Q6_K
 * tile), Q4K_LANES as the Q4_K tile reads its nibbles (column 8j + 4h + t of sub-block p of
 * 32 at 64j + 32h + 4p + t), Q6K_LANES as a lane-order Q6_K tile reads its values (column
 * 2v + t of sub-block p of 16 at 32v + 2p + t). */
enum { COLUMNS = 0, Q4K_LANES = 1, Q6K_LANES = 2 };
static inline int position(int order, int column) {
    if (order == Q4K_LANES) {
        const int p = column >> 5, i = column & 31;
        return 64 * (i >> 3) + 32 * ((i >> 2) & 1) + 4 * p + (i & 3);
    }
    if (order == Q6K_LANES) {
        const int p = column >> 4, i = column & 15;
        return 32 * (i >> 1) + 2 * p + (i & 1);
    }
    return column;
}

static void quantize_row(const float *x, int K, int KP, int order, int8_t *xq, float *xs, int16_t *bsum, int16_t *bsum16) {
    float v[QK];
    for (int s = 0; s < KP / QK; s++) {
        const int k0 = s * QK, n = K - k0 < QK ? K - k0 : QK;
        memcpy(v, x + k0, (size_t)n * sizeof(float));
        memset(v + n, 0, (size_t)(QK - n) * sizeof(float));
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) {
            float a = fabsf(v[i]);
            if (a > amax) amax = a;
        }
        float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
        float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < NSUB; j++) {
            int32_t sum = 0, half = 0;
            for (int i = 0; i < 32; i++) {
                long q = lrintf(v[j * 32 + i] * inv); /* round half to even */
                q = q > 127 ? 127 : (q < -127 ? -127 : q);
                xq[(size_t)k0 + position(order, j * 32 + i)] = (int8_t)q;
                sum += (int32_t)q;
                if (i == 15) half = sum;
            }
            bsum[s * NSUB + j] = (int16_t)sum; /* |sum| <= 32 * 127 */
            if (bsum16) {
                bsum16[s * 2 * NSUB + 2 * j] = (int16_t)half;
                bsum16[s * 2 * NSUB + 2 * j + 1] = (int16_t)(sum - half);
            }
        }
        xs[s] = scale;
    }
}

/* M rows of activations quantized for a super-block kernel (quantize_row's arrays) */
typedef struct {
    int8_t *xq;      /* [M, KP] */
    float *xs;       /* [M, KP / QK] */
    int16_t *bsum;   /* [M, KP / 32] */
    int16_t *bsum16; /* [M, KP / 16], or NULL where not asked for */
} quantized_t;

static void free_quantized(quantized_t *Q) {
    free(Q->xq);
    free(Q->xs);
    free(Q->bsum);
    free(Q->bsum16);
}

/* x [M, K] -> Q (order: quantize_row's); 0, or -1 when memory is short */
static int quantize_rows(const float *x, int M, int K, int KP, int order, int sums16, quantized_t *Q) {
    Q->xq = (int8_t *)malloc((size_t)M * KP);
    Q->xs = (float *)malloc((size_t)M * (KP / QK) * sizeof(float));
    Q->bsum = (int16_t *)malloc((size_t)M * (KP / 32) * sizeof(int16_t));
    Q->bsum16 = sums16 ? (int16_t *)malloc((size_t)M * (KP / 16) * sizeof(int16_t)) : NULL;
    if (!Q->xq || !Q->xs || !Q->bsum || (sums16 && !Q->bsum16)) {
        free_quantized(Q);
        return -1;
    }
#pragma omp parallel for schedule(static) if (M > 8)
    for (int m = 0; m < M; m++)
        quantize_row(x + (size_t)m * K, K, KP, order, Q->xq + (size_t)m * KP, Q->xs + (size_t)m * (KP / QK), Q->bsum + (size_t)m * (KP / 32),
                     sums16 ? Q->bsum16 + (size_t)m * (KP / 16) : NULL);
    return 0;
}

/* FN(job, n0, n1) over the weight rows 0..N-1, split evenly between the threads */
#define SPLIT_ROWS(FN, job, N)                                                                                                      \
    _Pragma("omp parallel") {                                                                                                       \
        int threads_ = omp_get_num_threads(), t_ = omp_get_thread_num();                                                           \
        int per_ = ((N) + threads_ - 1) / threads_, n0_ = t_ * per_, n1_ = (t_ + 1) * per_;                                        \
        if (n1_ > (N)) n1_ = (N);                                                                                                   \
        if (n0_ < n1_) FN(job, n0_, n1_);                                                                                           \
    }

#if MT == 8
#define TALL_TILES(TILE, J, n, m) case 4: TILE(J, n, m, 4); break; case 5: TILE(J, n, m, 5); break; \
                                  case 6: TILE(J, n, m, 6); break; case 7: TILE(J, n, m, 7); break;
#else
#define TALL_TILES(TILE, J, n, m)
#endif

/* NAME(J, n0, n1): weight rows n0..n1-1 against every activation row, NB weight rows at a
 * time, so the block stays in cache while the activation rows of a prompt pass it; TILE(J,
 * n, m0, mt) gets constant tile heights, so the compiler keeps the accumulators in registers */
#define ROWS_OF(NAME, JOB, TILE)                                                                                                    \
    static void NAME(const JOB *J, int n0, int n1) {                                                                                \
        for (int nb = n0; nb < n1; nb += NB) {                                                                                      \
            int nb1 = nb + NB < n1 ? nb + NB : n1;                                                                                  \
            for (int m = 0; m < J->M; m += MT) {                                                                                    \
                int mt = J->M - m < MT ? J->M - m : MT;                                                                             \
                for (int n = nb; n < nb1; n++) {                                                                                    \
                    switch (mt) {                                                                                                   \
                    case 1: TILE(J, n, m, 1); break;                                                                                \
                    case 2: TILE(J, n, m, 2); break;                                                                                \
                    case 3: TILE(J, n, m, 3); break;                                                                                \
                    TALL_TILES(TILE, J, n, m)                                                                                       \
                    default: TILE(J, n, m, MT);                                                                                     \
                    }                                                                                                               \
                }                                                                                                                   \
            }                                                                                                                       \
        }                                                                                                                           \
    }

typedef struct {
    const int8_t *xq;     /* [M, K] */
    const float *xs;      /* [M, K / QK] */
    const int16_t *bsum;  /* [M, K / 32] */
    const uint8_t *qs;    /* [N, K / QK, 128] nibbles, in lane order */
    const uint8_t *sm;    /* [N, K / QK, 16]: sc[8] then m[8] */
    const float *d, *dmin;/* [N, K / QK] */
    const float *bias;    /* [N] or NULL */
    int M, N, K;          /* K: the padded width, a multiple of QK */
    float *y;             /* [M, N] */
} job_t;

static inline float hsum(__m256 v) { /* (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7)), fixed */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Keeps an int32 accumulator in its register as written. Without it GCC reassociates a
 * tile's integer sums (exact, so allowed) into one tree per activation row, summed after
 * every product of the super-block is computed: 24 to 32 products live at once in a 4-row
 * tile, spilled to the stack on a CPU with AVX2's 16 vector registers: 78 stack loads and
 * stores a super-block with GCC 12 for Zen 3, 45 for an AVX-512 CPU's 32 registers, 22 with
 * this. The sum, and so every output bit, is the same either way. */
#define KEEP_IN_REGISTER(v) __asm__ volatile("" : "+x"(v))

/* sum + a * b, int16 pairs multiplied and added into int32 lanes (q6k_linear.c): one
 * vpdpwssd where the build targets a CPU with AVX-VNNI or AVX512-VNNI (Intel since Cascade
 * Lake, AMD since Zen 4), else AVX2's vpmaddwd then vpaddd. Exact integers either way (a
 * lane's sum stays far below 2^31), so both give the same bits; the VNNI form spends one
 * instruction where AVX2 spends two. */
#if defined(__AVXVNNI__)
#define MADD_ACC(sum, a, b) _mm256_dpwssd_avx_epi32(sum, a, b)
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define MADD_ACC(sum, a, b) _mm256_dpwssd_epi32(sum, a, b)
#else
#define MADD_ACC(sum, a, b) _mm256_add_epi32(sum, _mm256_madd_epi16(a, b))
#endif

/* acc + the products of 32 unsigned bytes u by 32 signed bytes x, each 4 added into one of 8
 * int32 lanes: one vpdpbusd on a CPU with AVX-VNNI or AVX512-VNNI (VNNI) */
#if defined(__AVXVNNI__)
#define VNNI 1
#define DPBUSD(acc, u, x) _mm256_dpbusd_avx_epi32(acc, u, x)
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define VNNI 1
#define DPBUSD(acc, u, x) _mm256_dpbusd_epi32(acc, u, x)
#else
#define VNNI 0
#endif

/* which order this build reads Q6_K values in (q6k_linear.c): 1 lane order (a build for AVX2
 * alone), 0 the file's (VNNI); Q4_K nibbles are in lane order in every build */
#define LANE_ORDER (!VNNI)

int specbench_lane_order(void) { return LANE_ORDER; }

static inline float hsum4(__m128 s) { /* (l0 + l2) + (l1 + l3), fixed */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* weight row n against activation rows m0..m0+mt-1 -> y */
static inline __attribute__((always_inline)) void tile(const job_t *J, int n, int m0, int mt) {
    const int nsb = J->K / QK;
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[MT];
    __m128 accm[MT];
    for (int i = 0; i < mt; i++) {
        acc[i] = _mm256_setzero_ps();
        accm[i] = _mm_setzero_ps();
    }
    const uint8_t *qs = J->qs + (size_t)n * nsb * 128;
    const uint8_t *sm = J->sm + (size_t)n * nsb * 16;
    const float *dn = J->d + (size_t)n * nsb, *mn = J->dmin + (size_t)n * nsb;
    for (int s = 0; s < nsb; s++) {
        const uint8_t *q = qs + (size_t)s * 128, *sc = sm + (size_t)s * 16;
        _mm_prefetch((const char *)(q + PREFETCH_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(q + PREFETCH_BYTES + 64), _MM_HINT_T0);
        __m256i sumi[MT];
        for (int i = 0; i < mt; i++) sumi[i] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
            __m256i lo = _mm256_and_si256(bits, low);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low);
            for (int i = 0; i < mt; i++) {
                const int8_t *x = J->xq + (size_t)(m0 + i) * J->K + (size_t)s * QK + 64 * j;
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)x), x1 = _mm256_loadu_si256((const __m256i *)(x + 32));
#if VNNI
                sumi[i] = DPBUSD(DPBUSD(sumi[i], lo, x0), hi, x1); /* int32 lane p: sub-block p */
#else
                __m256i pl = _mm256_maddubs_epi16(lo, x0), ph = _mm256_maddubs_epi16(hi, x1);
                sumi[i] = _mm256_add_epi16(sumi[i], _mm256_add_epi16(pl, ph)); /* int16 lanes 2p, 2p + 1: sub-block p */
#endif
                KEEP_IN_REGISTER(sumi[i]);
            }
        }
#if VNNI
        const __m256i scales = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc));
        for (int i = 0; i < mt; i++) sumi[i] = _mm256_mullo_epi32(sumi[i], scales);
#else
        /* the 8 products' int16 sums times sc[p] in lanes 2p and 2p + 1: one vpmaddwd */
        const __m128i sc8 = _mm_loadl_epi64((const __m128i *)sc);
        const __m256i scales = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc8, sc8)); /* sc[0], sc[0], sc[1], sc[1], ... */
        for (int i = 0; i < mt; i++) sumi[i] = _mm256_madd_epi16(sumi[i], scales);
#endif
        /* the mins: m[j] (int16) times each activation row's sub-block sums, 4 int32 lanes */
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sc + NSUB)));
        for (int i = 0; i < mt; i++) {
            const int m = m0 + i;
            const __m128i bs = _mm_loadu_si128((const __m128i *)(J->bsum + (size_t)m * (J->K / 32) + s * NSUB));
            const float xs = J->xs[(size_t)m * nsb + s];
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_cvtepi32_ps(sumi[i]), _mm256_set1_ps(dn[s] * xs)));
            accm[i] = _mm_add_ps(accm[i], _mm_mul_ps(_mm_cvtepi32_ps(_mm_madd_epi16(mins, bs)), _mm_set1_ps(mn[s] * xs)));
        }
    }
    for (int i = 0; i < mt; i++) {
        float v = hsum(acc[i]) - hsum4(accm[i]);
        if (J->bias) v = v + J->bias[n];
        J->y[(size_t)(m0 + i) * J->N + n] = v;
    }
}

ROWS_OF(rows, job_t, tile)

/* y [M, N] (float32) = x [M, K] (float32) times the Q4_K weight [N, K]^T (+ bias [N]).
 * The blocks cover KP = K rounded up to a multiple of 256 columns (a weight whose width is
 * not one is stored zero-padded; quantize_q4k in gguf_blocks.py). Returns 0, or -1 for
 * arguments it does not take. */
int specbench_q4k_linear(const float *x, int M, int K, const uint8_t *qs, const uint8_t *sm, const float *d,
                         const float *dmin, const float *bias, int N, float *y) {
    if (M < 1 || K < 1 || N < 1) return -1;
    const int KP = (K + QK - 1) / QK * QK;
    quantized_t Q;
    if (quantize_rows(x, M, K, KP, Q4K_LANES, 0, &Q) != 0) return -1;
    job_t J = {Q.xq, Q.xs, Q.bsum, qs, sm, d, dmin, bias, M, N, KP, y};
    SPLIT_ROWS(rows, &J, N)
    free_quantized(&Q);
    return 0;
}

/* The weight [N, KP] that Q4_K blocks stand for, in bfloat16: each value computed as
 * gguf_blocks.dequantize computes it in float32, (d * sc) * q - dmin * m, then rounded to
 * nearest even as PyTorch rounds it (bf16.h): the bits of dequantize(...).to(bfloat16), in one
 * pass with no float32 copy. qs in the file's order (gguf_blocks.to_file_order): byte 32j + b
 * holds column b of sub-block 2j in its low nibble and of sub-block 2j + 1 in its high. A
 * drafter's twin (twins.py) is made this way at load. Returns 0, or -1 for a width it does
 * not take. */
int specbench_q4k_to_bf16(const uint8_t *qs, const uint8_t *sm, const float *d, const float *dmin, int N, int KP,
                          uint16_t *out) {
    if (N < 1 || KP < QK || KP % QK) return -1;
    const int nsb = KP / QK;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int s = 0; s < nsb; s++) {
            const size_t b = (size_t)n * nsb + s;
            const uint8_t *q = qs + b * 128, *sc = sm + b * 16;
            uint16_t *o = out + (size_t)n * KP + (size_t)s * QK;
            for (int j = 0; j < 4; j++) {
                const float scale_lo = d[b] * (float)sc[2 * j], min_lo = dmin[b] * (float)sc[NSUB + 2 * j];
                const float scale_hi = d[b] * (float)sc[2 * j + 1], min_hi = dmin[b] * (float)sc[NSUB + 2 * j + 1];
                for (int i = 0; i < 32; i++) {
                    o[64 * j + i] = float_to_bf16(scale_lo * (float)(q[32 * j + i] & 0x0F) - min_lo);
                    o[64 * j + 32 + i] = float_to_bf16(scale_hi * (float)(q[32 * j + i] >> 4) - min_hi);
                }
            }
        }
    }
    return 0;
}

#else

int specbench_q4k_ready(void) { return 0; }

int specbench_lane_order(void) { return 0; }

int specbench_q4k_linear(const float *x, int M, int K, const uint8_t *qs, const uint8_t *sm, const float *d,
                         const float *dmin, const float *bias, int N, float *y) {
    (void)x; (void)M; (void)K; (void)qs; (void)sm; (void)d; (void)dmin; (void)bias; (void)N; (void)y;
    return -1;
}

int specbench_q4k_to_bf16(const uint8_t *qs, const uint8_t *sm, const float *d, const float *dmin, int N, int KP,
                          uint16_t *out) {
    (void)qs; (void)sm; (void)d; (void)dmin; (void)N; (void)KP; (void)out;
    return -1;
}

#endif
