// Weight-only quantized linear layers for CPU decode (AVX2 + FMA), GGUF's Q8_0 and Q4_1 forms.
//
//   out[m, n] = sum_g  d[n, g] * sum_{k in g} x[m, k] * q[n, k]   (+ mn[n, g] * sum_{k in g} x[m, k])
//
// x (M, K) float32 row-major; groups of 32 weights along K, each with a float32 scale d and, for
// the 4-bit form, a float32 minimum mn (w = d * q + mn, q in 0..15); the 8-bit form is symmetric
// (w = d * q, q in -127..127). 4-bit bytes: byte j of a group holds q[j] (low nibble) and q[j + 16]
// (high nibble). Decode is memory-bound: each weight row is read once for up to four activation
// rows and widened to float32 in registers. Output rows are split across OpenMP threads; the
// library links the libgomp torch loaded, so both share one pool.
#include <immintrin.h>
#include <stdint.h>

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

extern "C" void agentrt_q8_linear(const float* x, int64_t M, int64_t K, const int8_t* q,
                                  const float* d, int64_t N, float* out, int32_t num_threads) {
    linear<false>(x, M, K, q, d, nullptr, M > 0 ? N : 0, out, num_threads);
}

extern "C" void agentrt_q4_linear(const float* x, int64_t M, int64_t K, const uint8_t* q,
                                  const float* d, const float* mn, int64_t N, float* out,
                                  int32_t num_threads) {
    linear<true>(x, M, K, q, d, mn, M > 0 ? N : 0, out, num_threads);
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
