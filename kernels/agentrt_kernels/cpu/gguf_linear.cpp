// Linear layers on GGUF's own block formats, exact float path (AVX2 + FMA; AVX-512).
//
//   out[m, n] = sum_k x[m, k] * w[n, k],  w = the weight ggml's dequantize_row_* produces
//
// Weight row n is the file's bytes for that row: K / BLOCK blocks of BYTES bytes each, exactly
// as stored (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 in blocks of 32; Q4_K, Q5_K, Q6_K in super-blocks of
// 256; F16, BF16, F32 one value each). Each thread dequantizes one weight row at a time into a
// float buffer -- the same float32 operations in the same order as ggml and gguf-py's
// reference (d * sc, then * q, then - dmin * m: no FMA, the file is built -ffp-contract=off)
// -- and multiplies it into up to 8 (AVX-512) or 4 (AVX2) activation rows per pass. The
// result therefore differs from `x @ dequantize(w).T` only by the float32 summation order.
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

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

template <int R>
AVX512 static inline void dot512(const float* w, const float* x, int64_t ldx, int64_t K,
                                 float* out, int64_t ldo) {
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        const __m512 w0 = _mm512_loadu_ps(w + k), w1 = _mm512_loadu_ps(w + k + 16);
        for (int i = 0; i < R; ++i) {
            acc[i][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i * ldx + k), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i * ldx + k + 16), acc[i][1]);
        }
    }
    for (int i = 0; i < R; ++i) {
        float t = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
        for (int64_t j = k; j < K; ++j) t += w[j] * x[i * ldx + j];
        out[i * ldo] = t;
    }
}

template <bool W512>
static inline void dot_rows(const float* w, const float* x, int64_t M, int64_t K, float* out,
                            int64_t N);

template <>
inline void dot_rows<false>(const float* w, const float* x, int64_t M, int64_t K, float* out,
                            int64_t N) {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) dot256<4>(w, x + m * K, K, K, out + m * N, N);
    if (m + 2 <= M) dot256<2>(w, x + m * K, K, K, out + m * N, N), m += 2;
    if (m < M) dot256<1>(w, x + m * K, K, K, out + m * N, N);
}

template <>
AVX512 inline void dot_rows<true>(const float* w, const float* x, int64_t M, int64_t K,
                                  float* out, int64_t N) {
    int64_t m = 0;
    for (; m + 8 <= M; m += 8) dot512<8>(w, x + m * K, K, K, out + m * N, N);
    if (m + 4 <= M) dot512<4>(w, x + m * K, K, K, out + m * N, N), m += 4;
    if (m + 2 <= M) dot512<2>(w, x + m * K, K, K, out + m * N, N), m += 2;
    if (m < M) dot512<1>(w, x + m * K, K, K, out + m * N, N);
}

template <class F, bool W512>
static void linear(const uint8_t* w, const float* x, int64_t M, int64_t K, int64_t N,
                   float* out, int32_t num_threads) {
    const int64_t rb = row_bytes<F>(K);
    #pragma omp parallel num_threads(num_threads)
    {
        std::vector<float> buf(K);
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
            F::row(w + n * rb, K, buf.data());
            dot_rows<W512>(buf.data(), x, M, K, out + n, N);
        }
    }
}

template <class F>
static void dequantize(const uint8_t* w, int64_t K, const int64_t* rows, int64_t first,
                       int64_t count, float* out, int32_t num_threads) {
    const int64_t rb = row_bytes<F>(K);
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
        const int64_t n = rows ? rows[i] : first + i;
        F::row(w + n * rb, K, out + i * K);
    }
}

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
        if (isa == 512) linear<F, true>(w, x, M, K, N, out, num_threads);
        else linear<F, false>(w, x, M, K, N, out, num_threads);
    });
    return known ? 0 : -1;
}

// out (count, K) = float rows rows[i] (or first + i when rows is null) of the (N, K) weight.
extern "C" int32_t agentrt_gguf_dequantize(int32_t type, const uint8_t* w, int64_t K,
                                           const int64_t* rows, int64_t first, int64_t count,
                                           float* out, int32_t num_threads) {
    const bool known = dispatch(type, [&](auto f) {
        dequantize<decltype(f)>(w, K, rows, first, count, out, num_threads);
    });
    return known ? 0 : -1;
}
