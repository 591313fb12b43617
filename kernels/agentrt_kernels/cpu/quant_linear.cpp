// Weight-only quantized linear layers for CPU decode (AVX2 + FMA; AVX-512), GGUF Q8_0 and Q4_1.
//
//   out[m, n] = sum_g d[n, g] * sum_{k in g} x[m, k] * q[n, k]  (+ mn[n, g] * sum_{k in g} x[m, k])
//
// x (M, K) float32 row-major; groups of 32 weights along K, each with a float32 scale d and, for
// the 4-bit form, a float32 minimum mn (w = d * q + mn, q in 0..15); the 8-bit form is symmetric
// (w = d * q, q in -127..127). 4-bit bytes: byte j of a group holds q[j] (low nibble) and q[j + 16]
// (high nibble). Decode is memory-bound: each weight row is read once for up to four activation
// rows and widened to float32 in registers. Output rows are split across OpenMP threads; the
// library links the libgomp torch loaded, so both share one pool.
//
// Where the CPU has AVX-512 (checked at run time; `isa` 512), a second form dequantizes each
// group once into two 16-float registers, exactly as the reference does (d * q, then + mn), and
// multiplies it into up to eight activation rows at a time: a batch-8 step reads and widens
// every weight once instead of twice, and does no per-row scaling. A single row (batch-1
// decode) scales each group's dot product instead, which costs fewer operations per weight.
#include <immintrin.h>
#include <stdint.h>

#include <vector>

static constexpr int64_t G = 32;  // weights per group

static inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 shuf = _mm_movehdup_ps(lo);
    __m128 sums = _mm_add_ps(lo, shuf);
    shuf = _mm_movehl_ps(shuf, sums);
    return _mm_cvtss_f32(_mm_add_ss(sums, shuf));
}

static inline __m256 i8_to_ps(__m128i bytes8) {  // low 8 signed bytes -> 8 floats
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8));
}

static inline __m256 u8_to_ps(__m128i bytes8) {  // low 8 unsigned bytes -> 8 floats
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes8));
}

// One group's 32 weights as four vectors of 8 floats.
static inline void load_q8(const int8_t* q, __m256 w[4]) {
    __m128i a = _mm_loadu_si128((const __m128i*)q), b = _mm_loadu_si128((const __m128i*)(q + 16));
    w[0] = i8_to_ps(a); w[1] = i8_to_ps(_mm_srli_si128(a, 8));
    w[2] = i8_to_ps(b); w[3] = i8_to_ps(_mm_srli_si128(b, 8));
}

static inline void load_q4(const uint8_t* q, __m256 w[4]) {
    __m128i bytes = _mm_loadu_si128((const __m128i*)q), mask = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    w[0] = u8_to_ps(lo); w[1] = u8_to_ps(_mm_srli_si128(lo, 8));
    w[2] = u8_to_ps(hi); w[3] = u8_to_ps(_mm_srli_si128(hi, 8));
}

static inline __m256 group_dot(const __m256 w[4], const float* x) {
    __m256 t = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
    t = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), t);
    t = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), t);
    return _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), t);
}

// Up to four rows of x against weight row n; xsum (rows, K / G) is used by the 4-bit form.
template <bool FOUR_BIT>
static void row(const float* x, int64_t rows, int64_t K, const void* qrow, const float* d,
                const float* mn, const float* xsum, float* out, int64_t N) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float offset[4] = {0.f, 0.f, 0.f, 0.f};
    const int64_t groups = K / G;
    for (int64_t g = 0; g < groups; ++g) {
        __m256 w[4];
        if (FOUR_BIT) load_q4((const uint8_t*)qrow + g * (G / 2), w);
        else load_q8((const int8_t*)qrow + g * G, w);
        __m256 scale = _mm256_set1_ps(d[g]);
        for (int64_t i = 0; i < rows; ++i) {
            acc[i] = _mm256_fmadd_ps(scale, group_dot(w, x + i * K + g * G), acc[i]);
            if (FOUR_BIT) offset[i] += mn[g] * xsum[i * groups + g];
        }
    }
    for (int64_t i = 0; i < rows; ++i) out[i * N] = hsum(acc[i]) + offset[i];
}

template <bool FOUR_BIT>
static void linear(const float* x, int64_t M, int64_t K, const void* q, const float* d,
                   const float* mn, int64_t N, float* out, int32_t num_threads) {
    const int64_t groups = K / G, row_bytes = FOUR_BIT ? K / 2 : K;
    float* xsum = nullptr;
    if (FOUR_BIT) {  // sum of x over each group, shared by every weight row
        xsum = new float[M * groups];
        for (int64_t i = 0; i < M * groups; ++i) {
            float s = 0.f;
            for (int64_t k = 0; k < G; ++k) s += x[i * G + k];
            xsum[i] = s;
        }
    }
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const char* qrow = (const char*)q + n * row_bytes;
        for (int64_t m = 0; m < M; m += 4) {
            int64_t rows = (M - m) < 4 ? (M - m) : 4;
            row<FOUR_BIT>(x + m * K, rows, K, qrow, d + n * groups,
                          FOUR_BIT ? mn + n * groups : nullptr,
                          FOUR_BIT ? xsum + m * groups : nullptr, out + m * N + n, N);
        }
    }
    delete[] xsum;
}

// ---- AVX-512: one dequantized group, up to R512 activation rows per pass over a weight row ----
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
static constexpr int64_t R512 = 8;

// One group's 32 weights widened to float32, unscaled (q).
template <bool FOUR_BIT>
AVX512 static inline void widen512(const void* qrow, int64_t g, __m512 w[2]) {
    __m128i lo, hi;
    if (FOUR_BIT) {
        __m128i bytes = _mm_loadu_si128((const __m128i*)((const uint8_t*)qrow + g * (G / 2)));
        __m128i mask = _mm_set1_epi8(0x0F);
        lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        w[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo));
        w[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
    } else {
        const int8_t* p = (const int8_t*)qrow + g * G;
        lo = _mm_loadu_si128((const __m128i*)p), hi = _mm_loadu_si128((const __m128i*)(p + 16));
        w[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo));
        w[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi));
    }
}

// One group dequantized exactly as the reference does: d * q, then + mn.
template <bool FOUR_BIT>
AVX512 static inline void group512(const void* qrow, int64_t g, float d, float mn, __m512 w[2]) {
    widen512<FOUR_BIT>(qrow, g, w);
    const __m512 scale = _mm512_set1_ps(d);
    w[0] = _mm512_mul_ps(w[0], scale), w[1] = _mm512_mul_ps(w[1], scale);
    if (FOUR_BIT) {
        const __m512 low = _mm512_set1_ps(mn);
        w[0] = _mm512_add_ps(w[0], low), w[1] = _mm512_add_ps(w[1], low);
    }
}

// A single activation row (batch-1 decode), where the weight is used once: each group's dot
// product with the unscaled q is scaled once (d), and the 4-bit minimums enter as
// sum_g mn[g] * xsum[g]. Two accumulators, alternating groups, keep two FMA chains in flight.
template <bool FOUR_BIT>
AVX512 static void one_row512(const float* x, int64_t K, const void* qrow, const float* d,
                              const float* mn, const float* xsum, float* out) {
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    const int64_t groups = K / G;
    for (int64_t g = 0; g < groups; ++g) {
        __m512 w[2];
        widen512<FOUR_BIT>(qrow, g, w);
        __m512 t = _mm512_mul_ps(w[0], _mm512_loadu_ps(x + g * G));
        t = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(x + g * G + 16), t);
        if (g & 1) odd = _mm512_fmadd_ps(_mm512_set1_ps(d[g]), t, odd);
        else even = _mm512_fmadd_ps(_mm512_set1_ps(d[g]), t, even);
    }
    float offset = 0.f;
    if (FOUR_BIT)
        for (int64_t g = 0; g < groups; ++g) offset += mn[g] * xsum[g];
    *out = _mm512_reduce_add_ps(_mm512_add_ps(even, odd)) + offset;
}

// ROWS activation rows (a compile-time count, so the accumulators stay in registers).
template <bool FOUR_BIT, int ROWS>
AVX512 static void row512(const float* x, int64_t K, const void* qrow, const float* d,
                          const float* mn, float* out, int64_t N) {
    __m512 acc[ROWS][2];
    for (int i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t g = 0; g < K / G; ++g) {
        __m512 w[2];
        group512<FOUR_BIT>(qrow, g, d[g], FOUR_BIT ? mn[g] : 0.f, w);
        for (int i = 0; i < ROWS; ++i) {
            const float* xi = x + i * K + g * G;
            acc[i][0] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(xi), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(xi + 16), acc[i][1]);
        }
    }
    for (int i = 0; i < ROWS; ++i)
        out[i * N] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
}

template <bool FOUR_BIT>
AVX512 static void rows512(const float* x, int64_t rows, int64_t K, const void* qrow,
                           const float* d, const float* mn, float* out, int64_t N) {
    switch (rows) {
        case 1: return row512<FOUR_BIT, 1>(x, K, qrow, d, mn, out, N);
        case 2: return row512<FOUR_BIT, 2>(x, K, qrow, d, mn, out, N);
        case 3: return row512<FOUR_BIT, 3>(x, K, qrow, d, mn, out, N);
        case 4: return row512<FOUR_BIT, 4>(x, K, qrow, d, mn, out, N);
        case 5: return row512<FOUR_BIT, 5>(x, K, qrow, d, mn, out, N);
        case 6: return row512<FOUR_BIT, 6>(x, K, qrow, d, mn, out, N);
        case 7: return row512<FOUR_BIT, 7>(x, K, qrow, d, mn, out, N);
        default: return row512<FOUR_BIT, 8>(x, K, qrow, d, mn, out, N);
    }
}

template <bool FOUR_BIT>
AVX512 static void linear512(const float* x, int64_t M, int64_t K, const void* q, const float* d,
                             const float* mn, int64_t N, float* out, int32_t num_threads) {
    const int64_t groups = K / G, row_bytes = FOUR_BIT ? K / 2 : K;
    std::vector<float> xsum(M == 1 && FOUR_BIT ? groups : 0);
    for (int64_t g = 0; g < (int64_t)xsum.size(); ++g) {
        float s = 0.f;
        for (int64_t k = 0; k < G; ++k) s += x[g * G + k];
        xsum[g] = s;
    }
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const char* qrow = (const char*)q + n * row_bytes;
        const float* mrow = FOUR_BIT ? mn + n * groups : nullptr;
        if (M == 1) {
            one_row512<FOUR_BIT>(x, K, qrow, d + n * groups, mrow, xsum.data(), out + n);
            continue;
        }
        for (int64_t m = 0; m < M; m += R512)
            rows512<FOUR_BIT>(x + m * K, (M - m) < R512 ? (M - m) : R512, K, qrow,
                              d + n * groups, mrow, out + m * N + n, N);
    }
}

// 512 where the CPU has AVX-512 (F, BW, VL), else 256 (AVX2 + FMA).
extern "C" int32_t agentrt_quant_isa() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") ? 512 : 256;
}

extern "C" void agentrt_q8_linear(const float* x, int64_t M, int64_t K, const int8_t* q,
                                  const float* d, int64_t N, float* out, int32_t num_threads,
                                  int32_t isa) {
    if (M <= 0) return;
    if (isa == 512) linear512<false>(x, M, K, q, d, nullptr, N, out, num_threads);
    else linear<false>(x, M, K, q, d, nullptr, N, out, num_threads);
}

extern "C" void agentrt_q4_linear(const float* x, int64_t M, int64_t K, const uint8_t* q,
                                  const float* d, const float* mn, int64_t N, float* out,
                                  int32_t num_threads, int32_t isa) {
    if (M <= 0) return;
    if (isa == 512) linear512<true>(x, M, K, q, d, mn, N, out, num_threads);
    else linear<true>(x, M, K, q, d, mn, N, out, num_threads);
}

// The float32 (N, K) weight of a quantized one, for prefill-sized batches that run as a GEMM.
// w = d * q (+ mn) in two roundings (no FMA), exactly as the torch reference computes it.
template <bool FOUR_BIT>
static void dequantize(int64_t N, int64_t K, const void* q, const float* d, const float* mn,
                       float* out, int32_t num_threads) {
    const int64_t groups = K / G, row_bytes = FOUR_BIT ? K / 2 : K;
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const char* qrow = (const char*)q + n * row_bytes;
        for (int64_t g = 0; g < groups; ++g) {
            __m256 w[4];
            if (FOUR_BIT) load_q4((const uint8_t*)qrow + g * (G / 2), w);
            else load_q8((const int8_t*)qrow + g * G, w);
            const __m256 scale = _mm256_set1_ps(d[n * groups + g]);
            const __m256 low = _mm256_set1_ps(FOUR_BIT ? mn[n * groups + g] : 0.f);
            float* o = out + n * K + g * G;
            for (int j = 0; j < 4; ++j) {
                __m256 v = _mm256_mul_ps(w[j], scale);
                _mm256_storeu_ps(o + 8 * j, FOUR_BIT ? _mm256_add_ps(v, low) : v);
            }
        }
    }
}

extern "C" void agentrt_q8_dequantize(int64_t N, int64_t K, const int8_t* q, const float* d,
                                      float* out, int32_t num_threads) {
    dequantize<false>(N, K, q, d, nullptr, out, num_threads);
}

extern "C" void agentrt_q4_dequantize(int64_t N, int64_t K, const uint8_t* q, const float* d,
                                      const float* mn, float* out, int32_t num_threads) {
    dequantize<true>(N, K, q, d, mn, out, num_threads);
}
