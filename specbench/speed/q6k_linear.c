/* A batch-invariant linear layer over a GGUF file's own Q6_K blocks, for AVX2 CPUs
 * (speed/native.py builds and loads it; speed/gguf_blocks.py's Q6KLinear calls it).
 *
 * Q6_K (llama.cpp's k-quant): a weight row is cut into super-blocks of 256 columns, each
 * into 16 sub-blocks of 16; weight = (d * sc[j]) * (q - 32), with q in 0..63 (its low 4 bits
 * in ql, its high 2 in qh), sc[j] a signed byte and d one float per super-block. A Q4_K_M
 * file keeps its output head, and half its attn_v and ffn_down, in Q6_K: on the default
 * target 0.43 of its weights. gguf_blocks.py repacks the file's 210-byte blocks into four
 * arrays (ql, qh, sc, d) without changing a value, so this layer multiplies by exactly the
 * weights the file holds. Before it, those layers ran as int8 rows (quantize.py), which
 * rounded the file's weights a second time and read 8 bits a weight, not 6.56.
 *
 * Activations: q4k_linear.c's (int8 per row and super-block, llama.cpp's Q8_K rule), with
 * the sum of each 16 columns, so a super-block's dot product is an exact integer sum:
 *
 *   y[m, n] = sum_s  xs[m,s] * d[n,s] * sum_j sc[j] * (sum_i q_i * x_i - 32 * sum_i x_i)   (+ bias[n])
 *
 * vpmaddubsw multiplies 32 unsigned q (0..63) by 32 signed int8 activations into 16 int16
 * pairs (at most 2 * 63 * 127 = 16002, no saturation); vpmaddwd by the two sub-blocks'
 * scales widens them into 8 int32 lanes (a super-block adds at most 8 * 2 * 16002 * 128 <
 * 2^25 to a lane; the lanes restart at every super-block); the offset's 16 sums go through
 * one vpmaddwd by the scales. Each weight row's 6-bit values are unpacked once per tile and
 * used by up to MT activation rows. Batch-invariant for q4k_linear.c's reasons: exact
 * integers, then the same float operations in the same order for every (m, n).
 *
 * The two orders (q4k_linear.c's LANE_ORDER): a VNNI build reads the file's order, where the
 * 32 values of a vpmaddubsw are two sub-blocks and each product gets its own scale vector.
 * A build for AVX2 alone reads lane order: gguf_blocks.py stores the values so that bytes 2p
 * and 2p + 1 of every 32 are sub-block p (value 32v + 2p + t is column 2v + t of sub-block p),
 * and the activations likewise; two products then add as int16 (at most 2 * 16002 < 2^15)
 * before one vpmaddwd by the 16 scales: 12 multiplies a super-block and row instead of 16.
 * Lane l then holds sub-blocks 2l and 2l + 1, as the offset's lanes do in both orders.
 */
#include "q4k_linear.c"

#if defined(__AVX2__)

int specbench_q6k_ready(void) { return 1; }

typedef struct {
    const int8_t *xq;      /* [M, K] */
    const float *xs;       /* [M, K / QK] */
    const int16_t *bsum16; /* [M, K / 16] */
    const uint8_t *ql;     /* [N, K / QK, 128]: low 4 bits, in the order LANE_ORDER says */
    const uint8_t *qh;     /* [N, K / QK, 64]: high 2 bits, likewise */
    const int8_t *sc;      /* [N, K / QK, 16] */
    const float *d;        /* [N, K / QK] */
    const float *bias;     /* [N] or NULL */
    int M, N, K;           /* K: a multiple of QK */
    float *y;              /* [M, N] */
} q6k_job_t;

/* byte masks for vpshufb: pair p takes scale bytes 2p (8 times) then 2p + 1 (8 times) */
static const int8_t pair_masks[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},         {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},         {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},         {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13}, {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* the 6-bit values (0..63) of columns 128h + 32c .. + 31: the low nibbles of ql's bytes 64h
 * + 32(c % 2) .. (c < 2) or their high nibbles (c >= 2), and bits 2c, 2c + 1 of qh's bytes
 * 32h .. as bits 4 and 5 */
static inline __m256i q6_values(__m256i ql, __m256i qh, int c) {
    const __m256i low = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    const __m256i nibbles = c < 2 ? _mm256_and_si256(ql, low) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low);
    __m256i high;
    switch (c) {
    case 0: high = _mm256_slli_epi16(qh, 4); break;
    case 1: high = _mm256_slli_epi16(qh, 2); break;
    case 2: high = qh; break;
    default: high = _mm256_srli_epi16(qh, 2);
    }
    return _mm256_or_si256(nibbles, _mm256_and_si256(high, top));
}

/* weight row n against activation rows m0..m0+mt-1 -> y */
static inline __attribute__((always_inline)) void q6k_tile(const q6k_job_t *J, int n, int m0, int mt) {
    const int nsb = J->K / QK;
    __m256 acc[MT];
    for (int i = 0; i < mt; i++) acc[i] = _mm256_setzero_ps();
    const size_t block = (size_t)n * nsb;
    for (int s = 0; s < nsb; s++) {
        const uint8_t *ql = J->ql + (block + s) * 128, *qh = J->qh + (block + s) * 64;
        const int8_t *sc = J->sc + (block + s) * 16;
        _mm_prefetch((const char *)(ql + PREFETCH_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(ql + PREFETCH_BYTES + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(qh + PREFETCH_BYTES / 2), _MM_HINT_T0);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)sc);
        __m256i sumi[MT];
        for (int i = 0; i < mt; i++) sumi[i] = _mm256_setzero_si256();
#if LANE_ORDER
        /* int16 lane p of every product is sub-block p: two products add as int16, then one
         * vpmaddwd by the 16 scales */
        const __m256i scales16 = _mm256_cvtepi8_epi16(sc8);
        __m256i first[MT];
#endif
        for (int h = 0; h < 2; h++) { /* values 128h..128h+127: ql[64h..], qh[32h..] */
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
            for (int c = 0; c < 4; c++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32 * (c % 2)));
                const __m256i q = q6_values(bits, hb, c);
#if LANE_ORDER
                for (int i = 0; i < mt; i++) {
                    const int8_t *x = J->xq + (size_t)(m0 + i) * J->K + (size_t)s * QK + 128 * h + 32 * c;
                    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)x));
                    if (c % 2 == 0) {
                        first[i] = p;
                    } else {
                        sumi[i] = MADD_ACC(sumi[i], _mm256_add_epi16(first[i], p), scales16);
                        KEEP_IN_REGISTER(sumi[i]);
                    }
                }
#else
                /* sub-blocks 8h + 2c (lanes 0-3) and 8h + 2c + 1 (lanes 4-7) */
                const __m256i scale = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_loadu_si128((const __m128i *)pair_masks[4 * h + c])));
                for (int i = 0; i < mt; i++) {
                    const int8_t *x = J->xq + (size_t)(m0 + i) * J->K + (size_t)s * QK + 128 * h + 32 * c;
                    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)x));
                    sumi[i] = MADD_ACC(sumi[i], p, scale);
                    KEEP_IN_REGISTER(sumi[i]);
                }
#endif
            }
        }
        /* the offset: 32 * sum_j sc[j] * (sum of sub-block j's activations), in the same 8 lanes */
        const __m256i scales = _mm256_cvtepi8_epi16(sc8);
        for (int i = 0; i < mt; i++) {
            const int m = m0 + i;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(J->bsum16 + (size_t)m * (J->K / 16) + s * 16));
            const __m256i lanes = _mm256_sub_epi32(sumi[i], _mm256_slli_epi32(_mm256_madd_epi16(scales, bs), 5));
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(J->d[block + s] * J->xs[(size_t)m * nsb + s])));
        }
    }
    for (int i = 0; i < mt; i++) {
        float v = hsum(acc[i]);
        if (J->bias) v = v + J->bias[n];
        J->y[(size_t)(m0 + i) * J->N + n] = v;
    }
}

ROWS_OF(q6k_rows, q6k_job_t, q6k_tile)

/* y [M, N] (float32) = x [M, K] (float32) times the Q6_K weight [N, K]^T (+ bias [N]);
 * K a multiple of 256 (a GGUF file's Q6_K rows are). Returns 0, or -1 for arguments it
 * does not take. */
int specbench_q6k_linear(const float *x, int M, int K, const uint8_t *ql, const uint8_t *qh, const int8_t *sc, const float *d,
                         const float *bias, int N, float *y) {
    if (M < 1 || K < 1 || N < 1 || K % QK != 0) return -1;
    quantized_t Q;
    if (quantize_rows(x, M, K, K, LANE_ORDER ? Q6K_LANES : COLUMNS, 1, &Q) != 0) return -1;
    q6k_job_t J = {Q.xq, Q.xs, Q.bsum16, ql, qh, sc, d, bias, M, N, K, y};
    SPLIT_ROWS(q6k_rows, &J, N)
    free_quantized(&Q);
    return 0;
}

#else

int specbench_q6k_ready(void) { return 0; }

int specbench_q6k_linear(const float *x, int M, int K, const uint8_t *ql, const uint8_t *qh, const int8_t *sc, const float *d,
                         const float *bias, int N, float *y) {
    (void)x; (void)M; (void)K; (void)ql; (void)qh; (void)sc; (void)d; (void)bias; (void)N; (void)y;
    return -1;
}

#endif
