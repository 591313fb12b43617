// Linear layers on GGUF's own block formats, exact float path (AVX2 + FMA; AVX-512).
//
//   out[m, n] = sum_k x[m, k] * w[n, k],  w = the weight ggml's dequantize_row_* produces
//
// Weight row n is the file's bytes for that row: K / BLOCK blocks of BYTES bytes each, exactly
// as stored (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 in blocks of 32; Q4_K, Q5_K, Q6_K in super-blocks of
// 256; F16, BF16, F32 one value each). Each thread dequantizes one weight row at a time into a
// float buffer -- the same float32 operations in the same order as ggml and gguf-py's
// reference (d * sc, then * q, then - dmin * m: no FMA, the file is built -ffp-contract=off)
// -- and multiplies it into up to 8 (AVX-512) or 4 (AVX2) activation rows per pass; AVX-512
// decodes each block straight into registers, the 4- and 5-bit formats by lookup in a vector
// of the block's 16 (32) possible weights, computed with those same operations. The result
// therefore differs from `x @ dequantize(w).T` only by the float32 summation order.
// Output rows are split across OpenMP threads (the libgomp torch loaded: one pool).
//
// `agentrt_gguf_dequantize` writes whole float rows (all of them, a contiguous range, or an
// index list) for embedding lookups and prefill-sized batches, which run a GEMM on tiles.
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#pragma GCC target("f16c")

// ggml's type ids (gguf.GGMLQuantizationType).
enum : int32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12,
                 Q5_K = 13, Q6_K = 14, BF16 = 30 };

static inline float half(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// ---- one block each, as ggml's dequantize_row_* writes it ----

struct BlockQ4_0 {
    static constexpr int64_t BLOCK = 32, BYTES = 18;
    static void dequant(const uint8_t* b, float* y) {
        const float d = half(b);
        const uint8_t* qs = b + 2;
        for (int j = 0; j < 16; ++j) {
            y[j] = (float)((qs[j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
};

struct BlockQ4_1 {
    static constexpr int64_t BLOCK = 32, BYTES = 20;
    static void dequant(const uint8_t* b, float* y) {
        const float d = half(b), m = half(b + 2);
        const uint8_t* qs = b + 4;
        for (int j = 0; j < 16; ++j) {
            y[j] = (float)(qs[j] & 0x0F) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
};

template <bool MIN>
static inline void dequant_q5(const float d, const float m, const uint8_t* b, float* y) {
    uint32_t qh;
    memcpy(&qh, b, 4);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
        const int hi = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
        if (MIN) {
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        } else {
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

struct BlockQ5_0 {
    static constexpr int64_t BLOCK = 32, BYTES = 22;
    static void dequant(const uint8_t* b, float* y) { dequant_q5<false>(half(b), 0.f, b + 2, y); }
};

struct BlockQ5_1 {
    static constexpr int64_t BLOCK = 32, BYTES = 24;
    static void dequant(const uint8_t* b, float* y) {
        dequant_q5<true>(half(b), half(b + 2), b + 4, y);
    }
};

struct BlockQ8_0 {
    static constexpr int64_t BLOCK = 32, BYTES = 34;
    static void dequant(const uint8_t* b, float* y) {
        const float d = half(b);
        const int8_t* qs = (const int8_t*)(b + 2);
        for (int j = 0; j < 32; ++j) y[j] = (float)qs[j] * d;
    }
};

// The k-quants' eight 6-bit sub-block scales and minimums, packed in 12 bytes.
static inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K / Q5_K: d, dmin (f16), 12 bytes of scales, [Q5_K: 32 bytes of fifth bits], 128 bytes of
// nibbles; sub-block s (32 values) = nibble s % 2 of bytes 32 * (s / 2) ...; w = d*sc*q - dmin*m.
template <bool FIVE>
static inline void dequant_k(const uint8_t* b, float* y) {
    const float d = half(b), dmin = half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + (FIVE ? 48 : 16);
    for (int j = 0; j < 4; ++j) {
        int sc, mn;
        scale_min_k4(2 * j, scales, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        scale_min_k4(2 * j + 1, scales, &sc, &mn);
        const float d2 = d * (float)sc, m2 = dmin * (float)mn;
        const uint8_t* q = ql + 32 * j;
        for (int l = 0; l < 32; ++l) {
            const int h1 = FIVE ? ((qh[l] >> (2 * j)) & 1) << 4 : 0;
            const int h2 = FIVE ? ((qh[l] >> (2 * j + 1)) & 1) << 4 : 0;
            y[64 * j + l] = d1 * (float)((q[l] & 0x0F) | h1) - m1;
            y[64 * j + 32 + l] = d2 * (float)((q[l] >> 4) | h2) - m2;
        }
    }
}

struct BlockQ4_K {
    static constexpr int64_t BLOCK = 256, BYTES = 144;
    static void dequant(const uint8_t* b, float* y) { dequant_k<false>(b, y); }
};

struct BlockQ5_K {
    static constexpr int64_t BLOCK = 256, BYTES = 176;
    static void dequant(const uint8_t* b, float* y) { dequant_k<true>(b, y); }
};

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, d (f16);
// w = d * sc[i / 16] * (q - 32).
struct BlockQ6_K {
    static constexpr int64_t BLOCK = 256, BYTES = 210;
    static void dequant(const uint8_t* b, float* y) {
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const int8_t* sc = (const int8_t*)(b + 192);
        const float d = half(b + 208);
        for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
};

// The float formats convert a whole row at once (K need not be a multiple of anything).
struct RowF32 {
    static constexpr int64_t BLOCK = 1, BYTES = 4;
    static void row(const uint8_t* r, int64_t K, float* y) { memcpy(y, r, K * 4); }
};

struct RowF16 {
    static constexpr int64_t BLOCK = 1, BYTES = 2;
    static void row(const uint8_t* r, int64_t K, float* y) {
        int64_t k = 0;
        for (; k + 8 <= K; k += 8)
            _mm256_storeu_ps(y + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(r + 2 * k))));
        for (; k < K; ++k) y[k] = half(r + 2 * k);
    }
};

struct RowBF16 {
    static constexpr int64_t BLOCK = 1, BYTES = 2;
    static void row(const uint8_t* r, int64_t K, float* y) {
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(r + 2 * k)));
            _mm256_storeu_si256((__m256i*)(y + k), _mm256_slli_epi32(v, 16));
        }
        for (; k < K; ++k) {
            uint32_t u = (uint32_t)(r[2 * k] | (r[2 * k + 1] << 8)) << 16;
            memcpy(y + k, &u, 4);
        }
    }
};

template <class B>
struct Blocks {  // a row of blocks
    static constexpr int64_t BLOCK = B::BLOCK, BYTES = B::BYTES;
    static void row(const uint8_t* r, int64_t K, float* y) {
        for (int64_t i = 0; i < K / BLOCK; ++i) B::dequant(r + i * BYTES, y + i * BLOCK);
    }
};

template <class F>
static inline int64_t row_bytes(int64_t K) { return K / F::BLOCK * F::BYTES; }

// ---- the dot products of one dequantized weight row with R activation rows ----

template <int R>
static inline void dot256(const float* w, const float* x, int64_t ldx, int64_t K, float* out,
                          int64_t ldo) {
    __m256 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        const __m256 w0 = _mm256_loadu_ps(w + k), w1 = _mm256_loadu_ps(w + k + 8);
        for (int i = 0; i < R; ++i) {
            acc[i][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + k), acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * ldx + k + 8), acc[i][1]);
        }
    }
    for (int i = 0; i < R; ++i) {
        __m256 v = _mm256_add_ps(acc[i][0], acc[i][1]);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        float t = _mm_cvtss_f32(s);
        for (int64_t j = k; j < K; ++j) t += w[j] * x[i * ldx + j];
        out[i * ldo] = t;
    }
}

template <class F>
static void linear256(const uint8_t* w, const float* x, int64_t M, int64_t K, int64_t N,
                      float* out, int32_t num_threads) {
    const int64_t rb = row_bytes<F>(K);
    #pragma omp parallel num_threads(num_threads)
    {
        std::vector<float> buf(K);
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
            F::row(w + n * rb, K, buf.data());
            int64_t m = 0;
            for (; m + 4 <= M; m += 4) dot256<4>(buf.data(), x + m * K, K, K, out + m * N + n, N);
            if (m + 2 <= M) dot256<2>(buf.data(), x + m * K, K, K, out + m * N + n, N), m += 2;
            if (m < M) dot256<1>(buf.data(), x + m * K, K, K, out + m * N + n, N);
        }
    }
}

template <class F>
static void dequantize256(const uint8_t* w, int64_t K, const int64_t* rows, int64_t first,
                          int64_t count, float* out, int32_t num_threads) {
    const int64_t rb = row_bytes<F>(K);
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
        const int64_t n = rows ? rows[i] : first + i;
        F::row(w + n * rb, K, out + i * K);
    }
}

// ---- AVX-512: each block decoded straight into registers, 16 exact weights at a time ----
//
// V512<F>::block(b, emit) calls emit(offset, w) for each 16 consecutive weights of the block at
// b, w computed with the scalar form's float32 operations. NOTE: no std:: templates in this
// region: an instantiation compiled for AVX-512 could be shared with the AVX2 path.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")

static inline __m512 i8_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }
static inline __m512 i32_ps(__m512i v) { return _mm512_cvtepi32_ps(v); }
static inline __m128i low4(__m128i v) { return _mm_and_si128(v, _mm_set1_epi8(0x0F)); }
static inline __m128i high4(__m128i v) { return low4(_mm_srli_epi16(v, 4)); }
static inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128((const __m128i*)p); }

template <class F> struct V512;

template <> struct V512<Blocks<BlockQ8_0>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        const __m512 d = _mm512_set1_ps(half(b));
        emit(0, _mm512_mul_ps(i8_ps(load16(b + 2)), d));
        emit(16, _mm512_mul_ps(i8_ps(load16(b + 18)), d));
    }
};

// The 4-bit formats by lookup: a block's (sub-block's) 16 possible weights, computed with the
// scalar form's float32 operations, fill one vector, and each nibble picks its weight from it
// (vpermps reads the low 4 bits of an index: a byte widened to 32 bits as is gives its low
// nibble's weight, shifted right by 4 its high nibble's).
static inline __m512 iota16() {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// emit(at, ...) the weights of the low nibbles of 16 bytes at q, emit(at + step, ...) the high.
template <class E>
static inline void nibbles_lut(const uint8_t* q, __m512 lut_low, __m512 lut_high, int at,
                               int step, E& emit) {
    const __m512i v = _mm512_cvtepu8_epi32(load16(q));
    emit(at, _mm512_permutexvar_ps(v, lut_low));
    emit(at + step, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut_high));
}

template <> struct V512<Blocks<BlockQ4_0>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        const __m512 lut = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8.f)),
                                         _mm512_set1_ps(half(b)));  // (q - 8) * d
        nibbles_lut(b + 2, lut, lut, 0, 16, emit);
    }
};

template <> struct V512<Blocks<BlockQ4_1>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        const __m512 lut = _mm512_add_ps(_mm512_mul_ps(iota16(), _mm512_set1_ps(half(b))),
                                         _mm512_set1_ps(half(b + 2)));  // q * d + m
        nibbles_lut(b + 4, lut, lut, 0, 16, emit);
    }
};

// The 5-bit formats the same way from 32 possible weights in two vectors (vpermt2ps reads 5
// bits): a nibble's index, with 16 added where its fifth bit is set (`top`).
template <class E>
static inline void fives_lut(const uint8_t* q, __mmask16 top_low, __mmask16 top_high,
                             const __m512 lut_low[2], const __m512 lut_high[2], int at, int step,
                             E& emit) {
    const __m512i v = _mm512_cvtepu8_epi32(load16(q)), sixteen = _mm512_set1_epi32(16);
    const __m512i low = _mm512_and_si512(v, _mm512_set1_epi32(15)), high = _mm512_srli_epi32(v, 4);
    emit(at, _mm512_permutex2var_ps(lut_low[0], _mm512_mask_or_epi32(low, top_low, low, sixteen),
                                    lut_low[1]));
    emit(at + step, _mm512_permutex2var_ps(
        lut_high[0], _mm512_mask_or_epi32(high, top_high, high, sixteen), lut_high[1]));
}

// Q5_0 / Q5_1: bit j of qh is the fifth bit of value j; weights (q - 16) * d or q * d + m.
template <bool MIN, class E>
static inline void q5_block(float dq, float mq, const uint8_t* b, E& emit) {
    uint32_t qh;
    memcpy(&qh, b, 4);
    const __m512 d = _mm512_set1_ps(dq), m = _mm512_set1_ps(mq);
    __m512 lut[2];
    for (int t = 0; t < 2; ++t) {
        const __m512 q = _mm512_add_ps(iota16(), _mm512_set1_ps(16.f * (float)t));
        lut[t] = MIN ? _mm512_add_ps(_mm512_mul_ps(q, d), m)
                     : _mm512_mul_ps(_mm512_sub_ps(q, _mm512_set1_ps(16.f)), d);
    }
    fives_lut(b + 4, (__mmask16)qh, (__mmask16)(qh >> 16), lut, lut, 0, 16, emit);
}

template <> struct V512<Blocks<BlockQ5_0>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        q5_block<false>(half(b), 0.f, b + 2, emit);
    }
};

template <> struct V512<Blocks<BlockQ5_1>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        q5_block<true>(half(b), half(b + 2), b + 4, emit);
    }
};

// Q4_K / Q5_K: sub-block s (32 values) = d * sc[s] * q - dmin * m[s]; the pair 2j, 2j + 1 is
// the low and high nibbles of bytes 32 j ... (Q5_K: the fifth bit of value l of sub-block s is
// bit s of qh[l]). By lookup (nibbles_lut, fives_lut), each pair's weights in the order
// 64 j + (0, 32, 16, 48): every accumulator of rows512 meets its weights in the order of the
// sub-blocks, as before the lookups (the sums are bit for bit the same).
template <bool FIVE, class E>
static inline void k_block(const uint8_t* b, E& emit) {
    const float d = half(b), dmin = half(b + 2);
    const uint8_t* ql = b + (FIVE ? 48 : 16);
    const __m128i qh[2] = {load16(b + 16), load16(b + 32)};
    for (int j = 0; j < 4; ++j) {
        __m512 lut[2][2];  // [sub-block 2j + t][q < 16, q >= 16]
        for (int t = 0; t < 2; ++t) {
            int sc, mn;
            scale_min_k4(2 * j + t, b + 4, &sc, &mn);
            const __m512 ds = _mm512_set1_ps(d * (float)sc), ms = _mm512_set1_ps(dmin * (float)mn);
            for (int u = 0; u < (FIVE ? 2 : 1); ++u)
                lut[t][u] = _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_add_ps(
                    iota16(), _mm512_set1_ps(16.f * (float)u))), ms);
        }
        for (int h = 0; h < 2; ++h) {
            const uint8_t* q = ql + 32 * j + 16 * h;
            if (FIVE)
                fives_lut(q, _mm_test_epi8_mask(qh[h], _mm_set1_epi8((char)(1 << (2 * j)))),
                          _mm_test_epi8_mask(qh[h], _mm_set1_epi8((char)(2 << (2 * j)))),
                          lut[0], lut[1], 64 * j + 16 * h, 32, emit);
            else
                nibbles_lut(q, lut[0][0], lut[1][0], 64 * j + 16 * h, 32, emit);
        }
    }
}

template <> struct V512<Blocks<BlockQ4_K>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        k_block<false>(b, emit);
    }
};

template <> struct V512<Blocks<BlockQ5_K>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        k_block<true>(b, emit);
    }
};

// Q6_K: value 128 * h + 32 * c + l is nibble (c / 2) of ql[64 h + 32 (c % 2) + l] with bits
// 2c, 2c + 1 of qh[32 h + l] above it, minus 32, times d * sc[8 h + 2 c + l / 16].
template <> struct V512<Blocks<BlockQ6_K>> {
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        const float d = half(b + 208);
        const int8_t* sc = (const int8_t*)(b + 192);
        const __m128i three = _mm_set1_epi8(3), bias = _mm_set1_epi8(32);
        for (int h = 0; h < 2; ++h) {
            for (int l = 0; l < 32; l += 16) {
                const __m128i hi = load16(b + 128 + 32 * h + l);
                for (int c = 0; c < 4; ++c) {
                    const __m128i lo = load16(b + 64 * h + 32 * (c % 2) + l);
                    const __m128i top = _mm_and_si128(_mm_srli_epi16(hi, 2 * c), three);
                    const __m128i q = _mm_sub_epi8(
                        _mm_or_si128(c < 2 ? low4(lo) : high4(lo), _mm_slli_epi16(top, 4)), bias);
                    const __m512 ds = _mm512_set1_ps(d * (float)sc[8 * h + 2 * c + l / 16]);
                    emit(128 * h + 32 * c + l, _mm512_mul_ps(ds, i8_ps(q)));
                }
            }
        }
    }
};

template <> struct V512<RowF32> {
    static constexpr int64_t BLOCK = 16, BYTES = 64;
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        emit(0, _mm512_loadu_ps((const float*)b));
    }
};

template <> struct V512<RowF16> {
    static constexpr int64_t BLOCK = 16, BYTES = 32;
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        emit(0, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)b)));
    }
};

template <> struct V512<RowBF16> {
    static constexpr int64_t BLOCK = 16, BYTES = 32;
    template <class E> static inline void block(const uint8_t* b, E& emit) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)b));
        emit(0, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
};

template <class F> struct Shape512 {  // block formats: the scalar form's block
    static constexpr int64_t BLOCK = F::BLOCK, BYTES = F::BYTES;
};
template <> struct Shape512<RowF32> : V512<RowF32> {};
template <> struct Shape512<RowF16> : V512<RowF16> {};
template <> struct Shape512<RowBF16> : V512<RowBF16> {};

// R activation rows (x, row stride K) against one weight row; out[i * N] for row i.
template <class F, int R>
static void rows512(const uint8_t* wrow, const float* x, int64_t K, float* out, int64_t N) {
    constexpr int64_t BLOCK = Shape512<F>::BLOCK, BYTES = Shape512<F>::BYTES;
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < K / BLOCK; ++blk) {
        const float* xb = x + blk * BLOCK;
        auto emit = [&](int off, __m512 w) {
            const int a = (off / 16) % 2;
            for (int i = 0; i < R; ++i)
                acc[i][a] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xb + i * K + off), acc[i][a]);
        };
        V512<F>::block(wrow + blk * BYTES, emit);
    }
    for (int i = 0; i < R; ++i)
        out[i * N] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
}

template <class F>
static void linear512(const uint8_t* w, const float* x, int64_t M, int64_t K, int64_t N,
                      float* out, int32_t num_threads) {
    const int64_t rb = row_bytes<F>(K);
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const uint8_t* wrow = w + n * rb;
        int64_t m = 0;
        for (; m + 8 <= M; m += 8) rows512<F, 8>(wrow, x + m * K, K, out + m * N + n, N);
        if (m + 4 <= M) rows512<F, 4>(wrow, x + m * K, K, out + m * N + n, N), m += 4;
        if (m + 2 <= M) rows512<F, 2>(wrow, x + m * K, K, out + m * N + n, N), m += 2;
        if (m < M) rows512<F, 1>(wrow, x + m * K, K, out + m * N + n, N);
    }
}

template <class F>
static void dequantize512(const uint8_t* w, int64_t K, const int64_t* rows, int64_t first,
                          int64_t count, float* out, int32_t num_threads) {
    constexpr int64_t BLOCK = Shape512<F>::BLOCK, BYTES = Shape512<F>::BYTES;
    const int64_t rb = row_bytes<F>(K);
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
        const uint8_t* wrow = w + (rows ? rows[i] : first + i) * rb;
        for (int64_t blk = 0; blk < K / BLOCK; ++blk) {
            float* y = out + i * K + blk * BLOCK;
            auto emit = [&](int off, __m512 v) { _mm512_storeu_ps(y + off, v); };
            V512<F>::block(wrow + blk * BYTES, emit);
        }
    }
}

#pragma GCC pop_options

// Calls fn.template operator()<Format>() for the format `type`; false if it is not one.
template <class Fn>
static bool dispatch(int32_t type, Fn&& fn) {
    switch (type) {
        case F32: fn(RowF32{}); return true;
        case F16: fn(RowF16{}); return true;
        case BF16: fn(RowBF16{}); return true;
        case Q4_0: fn(Blocks<BlockQ4_0>{}); return true;
        case Q4_1: fn(Blocks<BlockQ4_1>{}); return true;
        case Q5_0: fn(Blocks<BlockQ5_0>{}); return true;
        case Q5_1: fn(Blocks<BlockQ5_1>{}); return true;
        case Q8_0: fn(Blocks<BlockQ8_0>{}); return true;
        case Q4_K: fn(Blocks<BlockQ4_K>{}); return true;
        case Q5_K: fn(Blocks<BlockQ5_K>{}); return true;
        case Q6_K: fn(Blocks<BlockQ6_K>{}); return true;
        default: return false;
    }
}

// 512 where the CPU has AVX-512 (F, BW, VL), else 256 (AVX2 + FMA).
extern "C" int32_t agentrt_gguf_isa() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") ? 512 : 256;
}

// out (M, N) = x (M, K) @ w.T for w the (N, K) weight of ggml type `type`; 0, or -1 for a type
// this file does not know.
extern "C" int32_t agentrt_gguf_linear(int32_t type, const uint8_t* w, const float* x, int64_t M,
                                       int64_t K, int64_t N, float* out, int32_t num_threads,
                                       int32_t isa) {
    const bool known = dispatch(type, [&](auto f) {
        using F = decltype(f);
        if (isa == 512 && K % Shape512<F>::BLOCK == 0)
            linear512<F>(w, x, M, K, N, out, num_threads);
        else linear256<F>(w, x, M, K, N, out, num_threads);
    });
    return known ? 0 : -1;
}

// out (count, K) = float rows rows[i] (or first + i when rows is null) of the (N, K) weight.
extern "C" int32_t agentrt_gguf_dequantize(int32_t type, const uint8_t* w, int64_t K,
                                           const int64_t* rows, int64_t first, int64_t count,
                                           float* out, int32_t num_threads, int32_t isa) {
    const bool known = dispatch(type, [&](auto f) {
        using F = decltype(f);
        if (isa == 512 && K % Shape512<F>::BLOCK == 0)
            dequantize512<F>(w, K, rows, first, count, out, num_threads);
        else dequantize256<F>(w, K, rows, first, count, out, num_threads);
    });
    return known ? 0 : -1;
}
