// Linear layers on GGUF's own block formats, integer path (AVX2; AVX-512 VNNI), as llama.cpp
// computes them.
//
// The activations are quantized to 8 bits first, the way ggml does for its CPU dot products:
//   - against 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), per 32 values (ggml's Q8_0, as
//     its x86 code makes them): d = max|x| / 127 (kept rounded to f16, as ggml stores it),
//     q = round(x * (127 / max|x|)); against Q4_1 / Q5_1 also Q8_1's s = d * (sum of q), an
//     f16, which the block minimums multiply;
//   - against the k-quants (Q4_K, Q5_K, Q6_K), per 256 values (ggml's Q8_K): with xm the value of
//     largest magnitude, s = -127 / xm, q = min(127, round(s * x)), d = 1 / s;
// rounding half to even. Each weight block then meets its activation block in integer dot
// products (AVX2: maddubs, u8 x s8 pairs into int16, then madd with the block's scales into
// int32; AVX-512 VNNI: dpbusd, then dpwssd for the k-quants' sub-block scales), and one float
// multiply-add per block applies d_w * d_x. The result equals `(q_x * d_x) @ W.T` -- W the
// exact dequantized weight; Q4_1 / Q5_1: their minimums times s -- up to float32 rounding and
// summation order; the Python twin computes exactly that. Output rows are split across OpenMP
// threads (torch's libgomp).
//
// Each weight block is decoded once per call and meets every activation row of the batch (up
// to 8 per pass) while it sits in registers; with AVX-512 VNNI the 32-value formats decode 8
// blocks at a time into an order the activations were laid out in to match (Grouped), so a
// float multiply-add applies the scales once per 256 values, not per 32; the k-quant kernels
// read their activations block-major, in the order of their decoded weights (block_major), and
// at batch 1 take 4 weight rows a pass; batched, 4 weight rows take a chunk of blocks at a time,
// so the activations it meets stay in L1. The activations are quantized into buffers of the
// calling thread that grow to the largest call (no allocation per call after that).
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#pragma GCC target("f16c")

enum : int32_t { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13,
                 Q6_K = 14 };

static constexpr int R = 4;  // activation rows per pass over a weight row

static inline float half(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// ---- activations ----

struct Acts {           // M rows of K quantized activations
    std::vector<int8_t> q;   // (M, K)
    std::vector<float> d;    // (M, K / B) scales, B = 32 or 256
    std::vector<float> s;    // (M, K / 32): d * (sum of q), what a block minimum multiplies
    std::vector<int16_t> bsum;  // (M, K / 16) sums of q (k-quants)
    std::vector<int8_t> kq;     // (K / 256, M, 256): q, block-major, in the AVX-512 k-quant order
    std::vector<float> ksum;    // (K / 256, M, 8 or 16): d * sums of q, block-major (block_major)
    std::vector<float> kd;      // (K / 256, M): d, block-major
    int8_t* kq_at;              // where kq and ksum start, at 64-byte boundaries (aligned64)
    float* ksum_at;
    std::vector<int8_t> qg;   // (M, stride): q in the AVX-512 32-value layout (see Grouped)
    std::vector<float> dv;    // (M, vectors, 16): d per lane of that layout
    std::vector<float> sv;    // (M, vectors, 16): each lane's share of d * s
    int8_t* qg_at;            // where qg, dv and sv start, at 64-byte boundaries (aligned64)
    float* dv_at;
    float* sv_at;
};

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

static inline __m256 abs8(const float* x) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.f), _mm256_loadu_ps(x));
}

// q[0..31] = x * inv rounded half to even, clamped to +-127; sums[h] = the sum of q[16h..].
static inline void round32(const float* x, float inv, int8_t* q, int32_t sums[2]) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) {
        __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), _mm256_set1_ps(inv)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f));
        v[k] = _mm256_cvtps_epi32(r);
    }
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]),
                                             _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i*)q, _mm256_permutevar8x32_epi32(
        bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    sums[0] = hsum8i(_mm256_add_epi32(v[0], v[1])), sums[1] = hsum8i(_mm256_add_epi32(v[2], v[3]));
}

static inline float to_f16(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); }

// ggml's Q8_0 / Q8_1 blocks as its x86 code makes them: d = max|x| / 127 (kept as f16),
// q = x * (127 / max|x|) rounded half to even; s = d * (sum of q), an f16 of the unrounded d
// for Q8_1 (`q8_1`: what Q4_1 and Q5_1 meet), else the f16 d times the sum.
static void quantize32(const float* x, int64_t K, int8_t* q, float* d, float* s, bool q8_1) {
    for (int64_t b = 0; b < K / 32; ++b, x += 32, q += 32) {
        const __m256 m = _mm256_max_ps(_mm256_max_ps(abs8(x), abs8(x + 8)),
                                       _mm256_max_ps(abs8(x + 16), abs8(x + 24)));
        const float amax = hmax8(m), scale = amax / 127.f;
        int32_t sums[2];
        round32(x, amax != 0.f ? 127.f / amax : 0.f, q, sums);
        d[b] = to_f16(scale);
        const float total = (float)(sums[0] + sums[1]);
        s[b] = q8_1 ? to_f16(scale * total) : d[b] * total;
    }
}

static void quantize256(const float* x, int64_t K, int8_t* q, float* d, int16_t* bsum) {
    for (int64_t b = 0; b < K / 256; ++b, x += 256, q += 256, bsum += 16) {
        __m256 m = abs8(x);
        for (int k = 8; k < 256; k += 8) m = _mm256_max_ps(m, abs8(x + k));
        const float amax = hmax8(m);
        float xm = 0.f;  // the first value of largest magnitude
        for (int k = 0; amax != 0.f && k < 256; k += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs8(x + k), _mm256_set1_ps(amax),
                                                             _CMP_EQ_OQ));
            if (hit) {
                xm = x[k + __builtin_ctz(hit)];
                break;
            }
        }
        const float inv = amax != 0.f ? -127.f / xm : 0.f;
        for (int c = 0; c < 8; ++c) {
            int32_t sums[2];
            round32(x + 32 * c, inv, q + 32 * c, sums);
            bsum[2 * c] = (int16_t)sums[0], bsum[2 * c + 1] = (int16_t)sums[1];
        }
        d[b] = amax != 0.f ? 1.f / inv : 0.f;
    }
}

// n elements of v from a 64-byte boundary. NOTE: a 64-byte load across two cache lines costs
// two; unaligned activations ran the batch-8 k-quant kernels ~10% slower.
template <class T>
static T* aligned64(std::vector<T>& v, size_t n) {
    v.resize(n + 64 / sizeof(T));
    return (T*)(((uintptr_t)v.data() + 63) & ~(uintptr_t)63);
}

// The AVX-512 k-quant kernels' activations: block-major, so the rows of one block lie 256
// bytes apart (one pointer walks them all), each block's 16-value chunks in the order
// `chunks` (that of the type's decoded weights: KQuant::CHUNKS); `sums` 8: d * the sum of q per
// 32 values (Q4_K / Q5_K sub-blocks), 16: per 16 values (Q6_K).
static void block_major(Acts& a, int64_t M, int64_t K, const int (&chunks)[16], int sums) {
    const int64_t blocks = K / 256;
    a.kq_at = aligned64(a.kq, M * K), a.ksum_at = aligned64(a.ksum, M * K / 16);
    a.kd.resize(M * blocks);
    for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t m = 0; m < M; ++m) {
            const int64_t from = m * blocks + blk, to = blk * M + m;
            for (int c = 0; c < 16; ++c)
                memcpy(a.kq_at + to * 256 + 16 * c, &a.q[from * 256 + 16 * chunks[c]], 16);
            const int16_t* bsum = &a.bsum[from * 16];
            for (int l = 0; l < sums; ++l)
                a.ksum_at[to * sums + l] = a.d[from] * (sums == 8 ? bsum[2 * l] + bsum[2 * l + 1]
                                                                  : bsum[l]);
            a.kd[to] = a.d[from];
        }
}

// The activations of the AVX-512 32-value kernels, per row: `groups` groups of 8 blocks (256
// bytes: vector j holds values 8j..8j+7 of each block, block b in bytes 8b..8b+7), then the
// `tail` blocks whole, two per 64-byte vector (zeros after an odd last one). Per vector, 16
// lanes of d (dv) and of the lane's share of d * s (sv: halves in a group, eighths in a pair --
// powers of two, so the lanes of a block add up to d * s exactly). `flip`: q + 128, unsigned.
struct Grouped {
    int64_t groups, tail, pairs, vectors, stride;
};

static Grouped grouped(int64_t K) {
    const int64_t blocks = K / 32, groups = blocks / 8, tail = blocks % 8, pairs = (tail + 1) / 2;
    return {groups, tail, pairs, groups + pairs, 64 * (4 * groups + pairs)};
}

static void group_row(const int8_t* q, const float* d, const float* s, const Grouped& L,
                      bool flip, int8_t* out, float* dv, float* sv) {
    const uint64_t bias = flip ? 0x8080808080808080ull : 0;
    for (int64_t b = 0; b < 8 * L.groups + L.tail; ++b) {
        const bool in_group = b < 8 * L.groups;
        const int64_t t = b - 8 * L.groups, v = in_group ? b / 8 : L.groups + t / 2;
        const int lanes = in_group ? 2 : 8, first = in_group ? 2 * (b % 8) : 8 * (t % 2);
        for (int j = 0; j < 4; ++j) {
            uint64_t u;
            memcpy(&u, q + 32 * b + 8 * j, 8);
            u ^= bias;
            const int64_t at = in_group ? 256 * v + 64 * j + 8 * (b % 8)
                                        : 256 * L.groups + 64 * (t / 2) + 32 * (t % 2) + 8 * j;
            memcpy(out + at, &u, 8);
        }
        const float share = s[b] / (float)lanes;
        for (int l = 0; l < lanes; ++l)
            dv[16 * v + first + l] = d[b], sv[16 * v + first + l] = share;
    }
    if (L.tail % 2) {
        memset(out + L.stride - 32, 0, 32);
        for (int l = 8; l < 16; ++l)
            dv[16 * (L.vectors - 1) + l] = sv[16 * (L.vectors - 1) + l] = 0.f;
    }
}

// `L`: also lay the rows out for the AVX-512 32-value kernels (flipped for signed weights).
static void quantize(const float* x, int64_t M, int64_t K, int32_t type, Acts& a,
                     int32_t num_threads = 1, const Grouped* L = nullptr, bool flip = false) {
    const bool k_quant = type == Q4_K || type == Q5_K || type == Q6_K;
    const bool q8_1 = type == Q4_1 || type == Q5_1;
    a.q.resize(M * K);
    a.d.resize(M * K / (k_quant ? 256 : 32));
    a.s.resize(k_quant ? 0 : M * K / 32);
    a.bsum.resize(k_quant ? M * K / 16 : 0);
    if (L) {
        a.qg_at = aligned64(a.qg, M * L->stride);
        a.dv_at = aligned64(a.dv, M * L->vectors * 16);
        a.sv_at = aligned64(a.sv, M * L->vectors * 16);
    }
    #pragma omp parallel for num_threads(num_threads) schedule(static) if (M > 1)
    for (int64_t m = 0; m < M; ++m) {
        if (k_quant) quantize256(x + m * K, K, &a.q[m * K], &a.d[m * K / 256], &a.bsum[m * K / 16]);
        else quantize32(x + m * K, K, &a.q[m * K], &a.d[m * K / 32], &a.s[m * K / 32], q8_1);
        if (L)
            group_row(&a.q[m * K], &a.d[m * K / 32], &a.s[m * K / 32], *L, flip,
                      a.qg_at + m * L->stride, a.dv_at + m * L->vectors * 16,
                      a.sv_at + m * L->vectors * 16);
    }
}

// The arrays of Acts as plain pointers, for the kernels (see the NOTE of the AVX-512 region).
struct View {
    const int8_t* q;
    const float* d;
    const float* s;
    const int16_t* bsum;
};

// The activations of the AVX-512 32-value kernels.
struct GView {
    const int8_t* q;
    const float* dv;
    const float* sv;
    Grouped layout;
};

// The activations of the AVX-512 k-quant kernels (see block_major): M rows.
struct KView {
    const int8_t* q;
    const float* sums;
    const float* d;
    int64_t M;
};

static View view(const Acts& a) {
    return {a.q.data(), a.d.data(), a.s.data(), a.bsum.data()};
}

// ---- integer helpers ----

static inline __m256i load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }
static inline __m256i nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0xF)); }
static inline __m256i nibbles_hi(__m256i v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0xF));
}

// 16 bytes of nibbles -> 32 values: the low nibbles, then the high nibbles (ggml's order).
static inline __m256i nibbles32(const uint8_t* p) {
    const __m128i v = _mm_loadu_si128((const __m128i*)p);
    return nibbles_lo(_mm256_set_m128i(_mm_srli_epi16(v, 4), v));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set.
static inline __m256i bits32(const uint8_t* p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    const __m256i shuffle = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                               0x0303030303030303);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuffle);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

// 8 int32 lanes summing u8 * s8 products, pairs scaled by the int16 lanes of `scale`.
static inline __m256i dot_u8(__m256i w, __m256i x, __m256i scale) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), scale);
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// ---- 32-value formats: signed values (Q4_0, Q5_0, Q8_0) or unsigned with a minimum ----

template <int32_t TYPE>
struct Block32;

template <> struct Block32<Q8_0> {
    static constexpr int64_t BYTES = 34;
    static constexpr bool MIN = false;
    static inline __m256i values(const uint8_t* b) { return load32(b + 2); }
};

template <> struct Block32<Q4_0> {
    static constexpr int64_t BYTES = 18;
    static constexpr bool MIN = false;
    static inline __m256i values(const uint8_t* b) {
        return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    }
};

template <> struct Block32<Q5_0> {
    static constexpr int64_t BYTES = 22;
    static constexpr bool MIN = false;
    static inline __m256i values(const uint8_t* b) {  // q - 16: 0xF0 over a clear fifth bit
        const __m256i high = _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8((char)0xF0));
        return _mm256_or_si256(nibbles32(b + 6), high);
    }
};

template <> struct Block32<Q4_1> {
    static constexpr int64_t BYTES = 20;
    static constexpr bool MIN = true;
    static inline __m256i values(const uint8_t* b) { return nibbles32(b + 4); }
};

template <> struct Block32<Q5_1> {
    static constexpr int64_t BYTES = 24;
    static constexpr bool MIN = true;
    static inline __m256i values(const uint8_t* b) {
        const __m256i high = _mm256_and_si256(bits32(b + 4), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(nibbles32(b + 8), high);
    }
};

template <int32_t TYPE, int ROWS>
static void row32(const uint8_t* wrow, const View& a, int64_t m0, int64_t K, float* out,
                  int64_t N) {
    using B = Block32<TYPE>;
    const int64_t blocks = K / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[ROWS];
    float offset[ROWS];
    for (int i = 0; i < ROWS; ++i) acc[i] = _mm256_setzero_ps(), offset[i] = 0.f;
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const uint8_t* b = wrow + blk * B::BYTES;
        const float d = half(b);
        const __m256i q = B::values(b);
        const __m256i mag = B::MIN ? q : _mm256_sign_epi8(q, q);
        for (int i = 0; i < ROWS; ++i) {
            const int64_t at = (m0 + i) * blocks + blk;
            __m256i x = load32(&a.q[at * 32]);
            if (!B::MIN) x = _mm256_sign_epi8(x, q);
            const __m256i dot = dot_u8(mag, x, ones);
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[at]), _mm256_cvtepi32_ps(dot), acc[i]);
            if (B::MIN) offset[i] += half(b + 2) * a.s[at];
        }
    }
    for (int i = 0; i < ROWS; ++i) out[i * N] = hsum(acc[i]) + offset[i];
}

// ---- k-quants (super-blocks of 256 against ggml's Q8_K) ----

static inline void scales_k4(const uint8_t* q, int16_t sc[8], int16_t mn[8]) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) sc[j] = q[j] & 63, mn[j] = q[j + 4] & 63;
        else sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
             mn[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K / Q5_K: sum_s d*sc[s] * (q_s . x_s) - dmin * sum_s m[s] * (sum of x_s), times d_x.
template <bool FIVE, int ROWS>
static void row_k45(const uint8_t* wrow, const View& a, int64_t m0, int64_t K, float* out,
                    int64_t N) {
    constexpr int64_t BYTES = FIVE ? 176 : 144;
    const int64_t blocks = K / 256;
    __m256 acc[ROWS];
    float offset[ROWS];
    for (int i = 0; i < ROWS; ++i) acc[i] = _mm256_setzero_ps(), offset[i] = 0.f;
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const uint8_t* b = wrow + blk * BYTES;
        const float d = half(b), dmin = half(b + 2);
        int16_t sc[8], mn[8];
        scales_k4(b + 4, sc, mn);
        const uint8_t* ql = b + (FIVE ? 48 : 16);
        const __m256i qh = FIVE ? load32(b + 16) : _mm256_setzero_si256();
        __m256i sum[ROWS];
        for (int i = 0; i < ROWS; ++i) sum[i] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            const __m256i bytes = load32(ql + 32 * j);
            __m256i lo = nibbles_lo(bytes), hi = nibbles_hi(bytes);
            if (FIVE) {
                const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * j)));
                const __m256i b1 = _mm256_set1_epi8((char)(2 << (2 * j)));
                const __m256i top = _mm256_set1_epi8(16);
                lo = _mm256_or_si256(lo, _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), top));
                hi = _mm256_or_si256(hi, _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), top));
            }
            const __m256i s_lo = _mm256_set1_epi16(sc[2 * j]);
            const __m256i s_hi = _mm256_set1_epi16(sc[2 * j + 1]);
            for (int i = 0; i < ROWS; ++i) {
                const int8_t* x = &a.q[(m0 + i) * K + blk * 256 + 64 * j];
                sum[i] = _mm256_add_epi32(sum[i], dot_u8(lo, load32(x), s_lo));
                sum[i] = _mm256_add_epi32(sum[i], dot_u8(hi, load32(x + 32), s_hi));
            }
        }
        for (int i = 0; i < ROWS; ++i) {
            const int64_t at = (m0 + i) * blocks + blk;
            const int16_t* bs = &a.bsum[at * 16];
            int32_t mins = 0;
            for (int s = 0; s < 8; ++s) mins += mn[s] * (bs[2 * s] + bs[2 * s + 1]);
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[at]), _mm256_cvtepi32_ps(sum[i]),
                                     acc[i]);
            offset[i] -= dmin * a.d[at] * (float)mins;
        }
    }
    for (int i = 0; i < ROWS; ++i) out[i * N] = hsum(acc[i]) + offset[i];
}

// Q6_K: sum_g d*sc[g] * ((q_g . x_g) - 32 * (sum of x_g)), times d_x; q in 0..63.
template <int ROWS>
static void row_q6k(const uint8_t* wrow, const View& a, int64_t m0, int64_t K, float* out,
                    int64_t N) {
    const int64_t blocks = K / 256;
    const __m256i three = _mm256_set1_epi8(3);
    __m256 acc[ROWS];
    float offset[ROWS];
    for (int i = 0; i < ROWS; ++i) acc[i] = _mm256_setzero_ps(), offset[i] = 0.f;
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const uint8_t* b = wrow + blk * 210;
        const int8_t* sc = (const int8_t*)(b + 192);
        const float d = half(b + 208);
        __m256i sum[ROWS];
        for (int i = 0; i < ROWS; ++i) sum[i] = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = load32(b + 64 * h), ql1 = load32(b + 64 * h + 32);
            const __m256i qh = load32(b + 128 + 32 * h);
            for (int c = 0; c < 4; ++c) {
                const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), three);
                const __m256i low = c == 0 ? nibbles_lo(ql0) : c == 1 ? nibbles_lo(ql1)
                                  : c == 2 ? nibbles_hi(ql0) : nibbles_hi(ql1);
                const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(top, 4));
                const int g = 8 * h + 2 * c;
                const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]),
                                                       _mm_set1_epi16(sc[g]));
                for (int i = 0; i < ROWS; ++i) {
                    const int8_t* x = &a.q[(m0 + i) * K + blk * 256 + 128 * h + 32 * c];
                    sum[i] = _mm256_add_epi32(sum[i], dot_u8(q, load32(x), scale));
                }
            }
        }
        for (int i = 0; i < ROWS; ++i) {
            const int64_t at = (m0 + i) * blocks + blk;
            const int16_t* bs = &a.bsum[at * 16];
            int32_t shift = 0;
            for (int g = 0; g < 16; ++g) shift += sc[g] * bs[g];
            const float dd = d * a.d[at];
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sum[i]), acc[i]);
            offset[i] -= dd * (float)(32 * shift);
        }
    }
    for (int i = 0; i < ROWS; ++i) out[i * N] = hsum(acc[i]) + offset[i];
}

// ---- AVX-512 VNNI: 64 values per instruction (k-quants) ----
//
// dpbusd sums 4 u8 x s8 products into each int32 lane, small enough to narrow to int16, and
// dpwssd applies the sub-block scales to pairs of those (dot256). NOTE: no std:: templates in
// this region (an AVX-512 instantiation could be shared with the AVX2 path).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")

static constexpr int R512 = 8;
static constexpr int XR32 = 8;  // activation rows per decoded weight row (32-value formats)

static inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
static inline __m512i lo4_512(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0xF)); }
static inline __m512i hi4_512(__m512i v) { return lo4_512(_mm512_srli_epi16(v, 4)); }

struct Lanes16x32 {  // the 32 int16 lanes of a 512-bit constant
    alignas(64) int16_t v[32];
    inline __m512i load() const { return _mm512_load_si512(v); }
};

// `a` in int16 lanes 0..15, `b` in 16..31.
static constexpr Lanes16x32 halves(int a, int b) {
    Lanes16x32 r{};
    for (int l = 0; l < 32; ++l) r.v[l] = (int16_t)(l < 16 ? a : b);
    return r;
}

// The scale index of each int16 lane of packs(p, r), p and r int32 lanes whose 128-bit block k
// holds sub-block p_of[k] (r_of[k]): what dpwssd then multiplies each lane by.
static constexpr Lanes16x32 packed_scales(const int (&p_of)[4], const int (&r_of)[4]) {
    Lanes16x32 r{};
    for (int k = 0; k < 4; ++k)
        for (int w = 0; w < 8; ++w) r.v[8 * k + w] = (int16_t)(w < 4 ? p_of[k] : r_of[k]);
    return r;
}

// The scaled integer dot product of 256 unsigned weights q (4 vectors) with 256 activations
// x: 4 dpbusd leave sums of 4 products per int32 lane (at most 4 * 63 * 127, an int16), two
// packs narrow them to int16, and two dpwssd apply the scales `sc` (see packed_scales) -- 6
// multiplies where maddubs + dpwssd per 64 values take 8. Q4_K / Q5_K take 5 (KQuant45::dot).
static inline __m512i dot256(const __m512i q[4], const __m512i x[4], const __m512i sc[2]) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p[4];
    #pragma GCC unroll 4
    for (int z = 0; z < 4; ++z) p[z] = _mm512_dpbusd_epi32(zero, q[z], x[z]);
    return _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(zero, _mm512_packs_epi32(p[0], p[1]), sc[0]),
                               _mm512_packs_epi32(p[2], p[3]), sc[1]);
}

static inline void load256(const int8_t* x, __m512i v[4]) {
    #pragma GCC unroll 4
    for (int z = 0; z < 4; ++z) v[z] = load64(x + 64 * z);
}

// One k-quant super-block, decoded: its value is d * (the scaled dot product of q, KQuant::dot)
// + (off . the activation block's sums of q, times its d: KQuant::offset).
struct KBlock {
    __m512i q[4];   // the 256 values, unsigned, in the activations' order (KQuant::CHUNKS)
    __m512i sc[2];  // the scales, as KQuant::dot takes them
    __m512 off;     // weights of the activation sums: Q4_K / Q5_K -dmin * minimum (8 lanes),
    float d;        // Q6_K -32 d * scale (16: its values are q - 32)
};

template <int32_t TYPE> struct KQuant;

// Q4_K / Q5_K: nibbles of 64 bytes = sub-blocks 0 (low) and 1 (high) in bytes 0..31, 2 and 3
// in 32..63; bytes 64..127 the same for 4..7. Decoded, vector 0 holds values 0..15 of
// sub-blocks 0, 1, 2, 3 (a 128-bit block each), vector 1 their values 16..31, vectors 2 and 3
// the same of 4..7: two dpbusd then sum 8 products of one sub-block per lane (at most 8 * 31
// * 127, an int16), and one packs + one dpwssd apply the scales.
template <bool FIVE>
struct KQuant45 {
    static constexpr int64_t BYTES = FIVE ? 176 : 144;
    static constexpr int SUMS = 8;  // activation sums per block and row (block_major)
    static constexpr int CHUNKS[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
    static constexpr Lanes16x32 IDX = packed_scales({0, 1, 2, 3}, {4, 5, 6, 7});
    // the shift of each 128-bit block: low nibbles, high, low, high
    static constexpr Lanes16x32 SHIFT = packed_scales({0, 4, 0, 4}, {0, 4, 0, 4});

    // The twelve bytes of 6-bit scales at p -> 8 scales, then 8 minimums, one a byte.
    static inline __m128i scales(const uint8_t* p) {
        const __m128i v = _mm_loadu_si128((const __m128i*)p);
        const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11,
                                                            4, 5, 6, 7, 8, 9, 10, 11));
        const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3,
                                                            -1, -1, -1, -1, 4, 5, 6, 7));
        const __m128i low = _mm_and_si128(_mm_blend_epi32(a, _mm_srli_epi16(a, 4), 8),
                                          _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F,
                                                         0x0F0F0F0F));
        return _mm_or_si128(low, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
    }

    static inline void decode(const uint8_t* b, KBlock& k) {
        k.d = half(b);
        const __m128i s = scales(b + 4);
        k.off = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(-half(b + 2)),
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(s, 8)))));
        k.sc[0] = _mm512_permutexvar_epi16(IDX.load(), _mm512_castsi256_si512(
            _mm256_cvtepu8_epi16(s)));
        const uint8_t* ql = b + (FIVE ? 48 : 16);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {  // 128-bit blocks 0 0 2 2, then 1 1 3 3
            const __m512i v = load64(ql + 64 * h);
            k.q[2 * h] = lo4_512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(v, v, 0xA0), SHIFT.load()));
            k.q[2 * h + 1] = lo4_512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(v, v, 0xF5),
                                                       SHIFT.load()));
        }
        if (FIVE) {  // bit s of qh[l]: the fifth bit of value l of sub-block s
            const __m512i bits = _mm512_set_epi64(0x0808080808080808, 0x0808080808080808,
                                                  0x0404040404040404, 0x0404040404040404,
                                                  0x0202020202020202, 0x0202020202020202,
                                                  0x0101010101010101, 0x0101010101010101);
            #pragma GCC unroll 4
            for (int z = 0; z < 4; ++z) {
                const __m512i qh = _mm512_broadcast_i32x4(
                    _mm_loadu_si128((const __m128i*)(b + 16 + 16 * (z % 2))));
                const __mmask64 set = _mm512_test_epi8_mask(
                    qh, z < 2 ? bits : _mm512_slli_epi64(bits, 4));
                k.q[z] = _mm512_mask_add_epi8(k.q[z], set, k.q[z], _mm512_set1_epi8(16));
            }
        }
    }

    static inline __m512 offset(const KBlock& k, const float* sums, __m512 o) {  // 8 lanes
        return _mm512_castps256_ps512(_mm256_fmadd_ps(
            _mm512_castps512_ps256(k.off), _mm256_loadu_ps(sums), _mm512_castps512_ps256(o)));
    }

    static inline __m512i dot(const KBlock& k, const __m512i x[4]) {
        const __m512i zero = _mm512_setzero_si512();
        const __m512i low = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, k.q[0], x[0]), k.q[1],
                                                x[1]);
        const __m512i high = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, k.q[2], x[2]), k.q[3],
                                                 x[3]);
        return _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(low, high), k.sc[0]);
    }
};
template <> struct KQuant<Q4_K> : KQuant45<false> {};
template <> struct KQuant<Q5_K> : KQuant45<true> {};

// Q6_K: ql[64 h ..][0..63] low nibbles = values 128 h + 0..63, high = 128 h + 64..127, each
// 32 with its own two bits of qh[32 h ..]; a scale per 16 values.
template <> struct KQuant<Q6_K> {
    static constexpr int64_t BYTES = 210;
    static constexpr int SUMS = 16;
    static constexpr Lanes16x32 IDX[2] = {packed_scales({0, 1, 2, 3}, {4, 5, 6, 7}),
                                          packed_scales({8, 9, 10, 11}, {12, 13, 14, 15})};
    static constexpr Lanes16x32 SHIFT[2] = {halves(0, 2), halves(4, 6)};  // of qh, per half
    static constexpr int CHUNKS[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

    static inline void decode(const uint8_t* b, KBlock& k) {
        k.d = half(b + 208);
        const __m128i sc8 = _mm_loadu_si128((const __m128i*)(b + 192));
        k.off = _mm512_mul_ps(_mm512_set1_ps(-32.f * k.d),
                              _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
        const __m512i scales = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
        const __m512i three = _mm512_set1_epi8(3);
        k.sc[0] = _mm512_permutexvar_epi16(IDX[0].load(), scales);
        k.sc[1] = _mm512_permutexvar_epi16(IDX[1].load(), scales);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = load64(b + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(load32(b + 128 + 32 * h));
            const __m512i top_lo = _mm512_and_si512(_mm512_srlv_epi16(qh, SHIFT[0].load()), three);
            const __m512i top_hi = _mm512_and_si512(_mm512_srlv_epi16(qh, SHIFT[1].load()), three);
            k.q[2 * h] = _mm512_or_si512(lo4_512(ql), _mm512_slli_epi16(top_lo, 4));
            k.q[2 * h + 1] = _mm512_or_si512(hi4_512(ql), _mm512_slli_epi16(top_hi, 4));
        }
    }

    static inline __m512i dot(const KBlock& k, const __m512i x[4]) { return dot256(k.q, x, k.sc); }
    static inline __m512 offset(const KBlock& k, const float* sums, __m512 o) {
        return _mm512_fmadd_ps(k.off, _mm512_loadu_ps(sums), o);
    }
};

// The block's share of one activation row's result: d * dx * (integer dot) into acc,
// off * sums (their 16 products: float multiply-adds, not the integer pipe) into offset.
template <int32_t TYPE>
static inline void accumulate(const KBlock& k, const __m512i x[4], const float* sums, float dx,
                              __m512& acc, __m512& offset) {
    const __m512i dot = KQuant<TYPE>::dot(k, x);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(k.d * dx), _mm512_cvtepi32_ps(dot), acc);
    offset = KQuant<TYPE>::offset(k, sums, offset);
}

// The cache lines of the block at p, AHEAD bytes on: a batch-1 pass reads its rows faster than
// the hardware prefetcher runs ahead, and a batched one reads them in chunks it does not follow.
static constexpr int64_t AHEAD = 4096;
template <int32_t TYPE>
static inline void prefetch_block(const uint8_t* p) {
    #pragma GCC unroll 4
    for (int64_t at = 0; at < KQuant<TYPE>::BYTES; at += 64)
        _mm_prefetch((const char*)p + AHEAD + at, _MM_HINT_T0);
}

// One weight row's blocks b0..b1 against ROWS activation rows from m0: into out[i * N]
// (`add`: added to what is there, else stored).
template <int32_t TYPE, int ROWS>
static void rows_k512(const uint8_t* wrow, const KView& a, int64_t m0, int64_t b0, int64_t b1,
                      float* out, int64_t N, bool add) {
    __m512 acc[ROWS], offset[ROWS];
    #pragma GCC unroll 8
    for (int i = 0; i < ROWS; ++i) acc[i] = offset[i] = _mm512_setzero_ps();
    KBlock k;
    for (int64_t blk = b0; blk < b1; ++blk) {
        prefetch_block<TYPE>(wrow + blk * KQuant<TYPE>::BYTES);
        KQuant<TYPE>::decode(wrow + blk * KQuant<TYPE>::BYTES, k);
        const int64_t at = blk * a.M + m0;
        #pragma GCC unroll 8
        for (int i = 0; i < ROWS; ++i) {
            __m512i x[4];
            load256(a.q + (at + i) * 256, x);
            accumulate<TYPE>(k, x, a.sums + (at + i) * KQuant<TYPE>::SUMS, a.d[at + i], acc[i],
                             offset[i]);
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < ROWS; ++i) {
        const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], offset[i]));
        out[i * N] = add ? out[i * N] + v : v;
    }
}

// NW weight rows (row_bytes apart), one after the other, against the one activation row:
// out[0 .. NW - 1], their accumulators summed in one tree.
template <int32_t TYPE, int NW>
static void wrows_k512(const uint8_t* w, int64_t row_bytes, const KView& a, int64_t K,
                       float* out) {
    static_assert(NW == 4, "the final tree sums 4 rows");
    const int64_t blocks = K / 256;
    __m512 acc[NW], offset[NW];
    KBlock k;
    #pragma GCC unroll 4
    for (int j = 0; j < NW; ++j) {
        acc[j] = offset[j] = _mm512_setzero_ps();
        for (int64_t blk = 0; blk < blocks; ++blk) {
            __m512i x[4];
            load256(a.q + blk * 256, x);
            const uint8_t* b = w + j * row_bytes + blk * KQuant<TYPE>::BYTES;
            prefetch_block<TYPE>(b);
            KQuant<TYPE>::decode(b, k);
            accumulate<TYPE>(k, x, a.sums + blk * KQuant<TYPE>::SUMS, a.d[blk], acc[j],
                             offset[j]);
        }
    }
    __m256 h[NW];
    #pragma GCC unroll 4
    for (int j = 0; j < NW; ++j) {
        const __m512 v = _mm512_add_ps(acc[j], offset[j]);
        h[j] = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    }
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}

// ---- 32-value formats: eight blocks at a time (AVX-512 VNNI) ----
//
// A group of 8 weight blocks is decoded once per call into four 64-byte vectors: vector j
// holds values 8j..8j+7 of each block, block b in bytes 8b..8b+7 -- two int32 lanes of a
// dpbusd. The activations were laid out the same way (see Grouped), so four dpbusd leave each
// block's whole integer dot product in its two lanes, and one float multiply-add per 256
// values applies d_w * d_x. Blocks past the last full group run two to a vector, whole.
// Q4_0 and Q5_0 run as their unsigned values with a minimum of -8 d (-16 d); Q8_0's signed
// values meet q + 128 (unsigned), from a start of -128 * (sum of the weights in each lane).

// 16 bytes at p, p + stride, p + 2 stride, p + 3 stride.
static inline __m512i load4x16(const uint8_t* p, int64_t stride) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)p));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(p + stride)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(p + 2 * stride)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(p + 3 * stride)), 3);
}

// 16 bytes of each of 8 blocks (stride apart) -> bytes 0..7 of each (lo), bytes 8..15 (hi).
static inline void split8(const uint8_t* p, int64_t stride, __m512i& lo, __m512i& hi) {
    const __m512i a = load4x16(p, stride), b = load4x16(p + 4 * stride, stride);
    lo = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), b);
    hi = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), b);
}

// The f16 at p + b * stride (b = 0..7) in lanes 2b and 2b + 1; `high`: the f16 two bytes on.
template <bool HIGH = false>
static inline __m512 halves8(const uint8_t* p, int64_t stride) {
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm256_set1_epi32((int)stride));
    __m256i v = _mm256_i32gather_epi32((const int*)p, at, 1);
    v = HIGH ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    return _mm512_cvtph_ps(_mm256_or_si256(v, _mm256_slli_epi32(v, 16)));
}

// Q5: the fifth bits (32 at p + b * stride, bit i = value i) as byte masks of the 4 vectors.
static inline void fifth8(const uint8_t* p, int64_t stride, __mmask64 m[4]) {
    alignas(32) uint32_t qh[8];
    for (int b = 0; b < 8; ++b) memcpy(&qh[b], p + b * stride, 4);
    const __m256i order = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                           0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m256i t = _mm256_shuffle_epi8(_mm256_load_si256((const __m256i*)qh), order);
    const __m128i lo = _mm256_castsi256_si128(t), hi = _mm256_extracti128_si256(t, 1);
    const __m128i a = _mm_unpacklo_epi32(lo, hi), b = _mm_unpackhi_epi32(lo, hi);
    m[0] = (__mmask64)_mm_cvtsi128_si64(a), m[1] = (__mmask64)_mm_extract_epi64(a, 1);
    m[2] = (__mmask64)_mm_cvtsi128_si64(b), m[3] = (__mmask64)_mm_extract_epi64(b, 1);
}

// One weight row's share of a group (or of a tail pair): values, d and minimum per lane, and
// the int32 start of the dot product.
struct WGroup {
    __m512i w[4];
    __m512 d, m;
    __m512i init;
};

template <int32_t TYPE> struct G32;  // BYTES; SIGNED; group(b, out); pair(b, two, out)

template <int32_t TYPE, int NIB, int QH>
struct G32Nibbles {  // Q4_0, Q4_1, Q5_0, Q5_1 (QH: offset of the fifth bits, or -1)
    static constexpr bool SIGNED = false;
    static inline void values(const uint8_t* b, int64_t bytes, __m512i w[4]) {
        __m512i lo, hi;
        split8(b + NIB, bytes, lo, hi);
        w[0] = lo4_512(lo), w[1] = lo4_512(hi), w[2] = hi4_512(lo), w[3] = hi4_512(hi);
        if (QH >= 0) {
            __mmask64 m[4];
            fifth8(b + QH, bytes, m);
            #pragma GCC unroll 4
            for (int j = 0; j < 4; ++j)
                w[j] = _mm512_mask_add_epi8(w[j], m[j], w[j], _mm512_set1_epi8(16));
        }
    }
    static inline __m256i values32(const uint8_t* b) {  // one block, ggml's order, unsigned
        const __m256i q = nibbles32(b + NIB);
        if (QH < 0) return q;
        return _mm256_or_si256(q, _mm256_and_si256(bits32(b + QH), _mm256_set1_epi8(16)));
    }
};

template <int32_t TYPE> struct G32Traits;
template <> struct G32Traits<Q4_0> : G32Nibbles<Q4_0, 2, -1> {
    static constexpr int64_t BYTES = 18;
    static constexpr float OFFSET = -8.f;  // minimum = OFFSET * d
    static constexpr int MIN_AT = -1;
};
template <> struct G32Traits<Q4_1> : G32Nibbles<Q4_1, 4, -1> {
    static constexpr int64_t BYTES = 20;
    static constexpr float OFFSET = 0.f;
    static constexpr int MIN_AT = 2;
};
template <> struct G32Traits<Q5_0> : G32Nibbles<Q5_0, 6, 2> {
    static constexpr int64_t BYTES = 22;
    static constexpr float OFFSET = -16.f;
    static constexpr int MIN_AT = -1;
};
template <> struct G32Traits<Q5_1> : G32Nibbles<Q5_1, 8, 4> {
    static constexpr int64_t BYTES = 24;
    static constexpr float OFFSET = 0.f;
    static constexpr int MIN_AT = 2;
};
template <> struct G32Traits<Q8_0> {
    static constexpr int64_t BYTES = 34;
    static constexpr bool SIGNED = true;
    static constexpr float OFFSET = 0.f;
    static constexpr int MIN_AT = -1;
    static inline void values(const uint8_t* b, int64_t bytes, __m512i w[4]) {
        split8(b + 2, bytes, w[0], w[1]);
        split8(b + 18, bytes, w[2], w[3]);
    }
    static inline __m256i values32(const uint8_t* b) { return load32(b + 2); }
};

template <int32_t TYPE>
static constexpr bool has_min() {
    return G32Traits<TYPE>::MIN_AT >= 0 || G32Traits<TYPE>::OFFSET != 0.f;
}

// -128 * (sum of the signed weights in each int32 lane), for q + 128 activations.
static inline __m512i signed_start(const __m512i* w, int count) {
    __m512i s = _mm512_setzero_si512();
    for (int j = 0; j < count; ++j) s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8(1), w[j]);
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 7));
}

template <int32_t TYPE>
static inline void group32(const uint8_t* b, WGroup& g) {
    using B = G32Traits<TYPE>;
    B::values(b, B::BYTES, g.w);
    g.d = halves8(b, B::BYTES);
    if constexpr (B::MIN_AT >= 0) g.m = halves8<true>(b, B::BYTES);  // NOTE: MIN_AT is 2
    else g.m = _mm512_mul_ps(g.d, _mm512_set1_ps(B::OFFSET));
    g.init = B::SIGNED ? signed_start(g.w, 4) : _mm512_setzero_si512();
}

// Blocks b (and b + 1 when `two`) whole in one vector; d, minimum 8 lanes each.
template <int32_t TYPE>
static inline void pair32(const uint8_t* b, bool two, WGroup& g) {
    using B = G32Traits<TYPE>;
    const __m256i second = two ? B::values32(b + B::BYTES) : _mm256_setzero_si256();
    g.w[0] = _mm512_inserti64x4(_mm512_castsi256_si512(B::values32(b)), second, 1);
    const float d0 = half(b), d1 = two ? half(b + B::BYTES) : 0.f;
    g.d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
    if constexpr (B::MIN_AT >= 0) {
        const float m0 = half(b + B::MIN_AT), m1 = two ? half(b + B::BYTES + B::MIN_AT) : 0.f;
        g.m = _mm512_insertf32x8(_mm512_set1_ps(m0), _mm256_set1_ps(m1), 1);
    } else {
        g.m = _mm512_mul_ps(g.d, _mm512_set1_ps(B::OFFSET));
    }
    g.init = B::SIGNED ? signed_start(g.w, 1) : _mm512_setzero_si512();
}

// V activation vectors at byte `at` of each row (scales at vector index v) against one weight
// row's share g.
template <int32_t TYPE, int XR, int V>
static inline void dot32g(const WGroup& g, const GView& a, int64_t m0, int64_t v, int64_t at,
                          __m512 (&acc)[XR]) {
    using B = G32Traits<TYPE>;
    const Grouped& L = a.layout;
    #pragma GCC unroll 16
    for (int i = 0; i < XR; ++i) {
        const int8_t* x = a.q + (m0 + i) * L.stride + at;
        const __m512 dx = _mm512_loadu_ps(a.dv + ((m0 + i) * L.vectors + v) * 16);
        __m512i dot = g.init;
        #pragma GCC unroll 4
        for (int j = 0; j < V; ++j) {
            const __m512i xj = _mm512_loadu_si512(x + 64 * j);
            dot = B::SIGNED ? _mm512_dpbusd_epi32(dot, xj, g.w[j])
                            : _mm512_dpbusd_epi32(dot, g.w[j], xj);
        }
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(g.d, dx), _mm512_cvtepi32_ps(dot), acc[i]);
        if constexpr (has_min<TYPE>())
            acc[i] = _mm512_fmadd_ps(g.m, _mm512_loadu_ps(a.sv + ((m0 + i) * L.vectors + v) * 16),
                                     acc[i]);
    }
}

// The lane sums of 8 vectors, in one tree (8 separate reductions cost 3x the instructions).
static inline __m256 reduce8(const __m512* v) {
    __m256 h[8];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
        h[i] = _mm256_add_ps(_mm512_castps512_ps256(v[i]), _mm512_extractf32x8_ps(v[i], 1));
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// One weight row against XR activation rows from m0: out[i * N].
template <int32_t TYPE, int XR>
static void rows32g(const uint8_t* wrow, const GView& a, int64_t m0, float* out, int64_t N) {
    using B = G32Traits<TYPE>;
    const Grouped& L = a.layout;
    __m512 acc[XR];
    #pragma GCC unroll 16
    for (int i = 0; i < XR; ++i) acc[i] = _mm512_setzero_ps();
    WGroup g;
    for (int64_t v = 0; v < L.groups; ++v) {
        group32<TYPE>(wrow + 8 * v * B::BYTES, g);
        dot32g<TYPE, XR, 4>(g, a, m0, v, 256 * v, acc);
    }
    for (int64_t p = 0; p < L.pairs; ++p) {
        pair32<TYPE>(wrow + (8 * L.groups + 2 * p) * B::BYTES, 2 * p + 1 < L.tail, g);
        dot32g<TYPE, XR, 1>(g, a, m0, L.groups + p, 256 * L.groups + 64 * p, acc);
    }
    if constexpr (XR == 8) {
        alignas(32) float sums[8];
        _mm256_store_ps(sums, reduce8(acc));
        #pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) out[i * N] = sums[i];
    } else {
        #pragma GCC unroll 16
        for (int i = 0; i < XR; ++i) out[i * N] = _mm512_reduce_add_ps(acc[i]);
    }
}

// NOTE: one weight row at a time, also for one activation row: two rows interleaved took the
// streamed bandwidth of a 4096 x 4096 Q4_1 layer from 17 to 7 GB/s (the row prefetch).
template <int32_t TYPE>
static void linear32g(const uint8_t* w, int64_t row_bytes, const GView& a, int64_t M, int64_t N,
                      float* out, int32_t num_threads) {
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const uint8_t* wrow = w + n * row_bytes;
        int64_t m = 0;
        for (; m + XR32 <= M; m += XR32) rows32g<TYPE, XR32>(wrow, a, m, out + m * N + n, N);
        if (m + 4 <= M) rows32g<TYPE, 4>(wrow, a, m, out + m * N + n, N), m += 4;
        if (m + 2 <= M) rows32g<TYPE, 2>(wrow, a, m, out + m * N + n, N), m += 2;
        if (m < M) rows32g<TYPE, 1>(wrow, a, m, out + m * N + n, N);
    }
}

template <int32_t TYPE>
static void linear512(const uint8_t* w, int64_t row_bytes, const KView& a, int64_t M, int64_t K,
                      int64_t N, float* out, int32_t num_threads) {
    if (M == 1) {  // 4 weight rows a pass, sharing the activation loads
        #pragma omp parallel for num_threads(num_threads) schedule(static)
        for (int64_t n = 0; n < N / 4 * 4; n += 4)
            wrows_k512<TYPE, 4>(w + n * row_bytes, row_bytes, a, K, out + n);
        for (int64_t n = N / 4 * 4; n < N; ++n)
            rows_k512<TYPE, 1>(w + n * row_bytes, a, 0, 0, K / 256, out + n, N, false);
        return;
    }
    // A pass of 8 activation rows reads 2 KiB of them per weight block, so past 8 blocks
    // they would leave L1 before the next weight row meets them: TILE weight rows at a time
    // run a chunk of blocks (8 at 8 rows: 16 KiB of activations), adding their partial sums.
    // With each row's blocks prefetched, batch-8 Q4_K / Q6_K layers of K = 4096 ran 15-35%
    // faster than one whole row after the other, K = 1024 5-15% (benchmarks/gguf_kernels.py).
    constexpr int64_t TILE = 4, CHUNK_BYTES = 16384;  // of activations: 8 rows x 8 blocks
    const int64_t blocks = K / 256;
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n0 = 0; n0 < N; n0 += TILE) {
        const int64_t n1 = n0 + TILE < N ? n0 + TILE : N;
        for (int64_t m = 0; m < M;) {
            const int64_t rows = M - m >= R512 ? R512 : M - m >= 4 ? 4 : M - m >= 2 ? 2 : 1;
            const int64_t chunk = CHUNK_BYTES / (256 * rows);
            for (int64_t b0 = 0; b0 < blocks; b0 += chunk) {
                const int64_t b1 = b0 + chunk < blocks ? b0 + chunk : blocks;
                for (int64_t n = n0; n < n1; ++n) {
                    const uint8_t* wrow = w + n * row_bytes;
                    float* o = out + m * N + n;
                    switch (rows) {
                        case R512: rows_k512<TYPE, R512>(wrow, a, m, b0, b1, o, N, b0 > 0); break;
                        case 4: rows_k512<TYPE, 4>(wrow, a, m, b0, b1, o, N, b0 > 0); break;
                        case 2: rows_k512<TYPE, 2>(wrow, a, m, b0, b1, o, N, b0 > 0); break;
                        default: rows_k512<TYPE, 1>(wrow, a, m, b0, b1, o, N, b0 > 0); break;
                    }
                }
            }
            m += rows;
        }
    }
}

#pragma GCC pop_options

template <int32_t TYPE, int ROWS>
static inline void rows(const uint8_t* wrow, const View& a, int64_t m0, int64_t K, float* out,
                        int64_t N) {
    if constexpr (TYPE == Q4_K) row_k45<false, ROWS>(wrow, a, m0, K, out, N);
    else if constexpr (TYPE == Q5_K) row_k45<true, ROWS>(wrow, a, m0, K, out, N);
    else if constexpr (TYPE == Q6_K) row_q6k<ROWS>(wrow, a, m0, K, out, N);
    else row32<TYPE, ROWS>(wrow, a, m0, K, out, N);
}

template <int32_t TYPE>
static void linear(const uint8_t* w, int64_t row_bytes, const View& a, int64_t M, int64_t K,
                   int64_t N, float* out, int32_t num_threads) {
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const uint8_t* wrow = w + n * row_bytes;
        int64_t m = 0;
        for (; m + R <= M; m += R) rows<TYPE, R>(wrow, a, m, K, out + m * N + n, N);
        if (m + 2 <= M) rows<TYPE, 2>(wrow, a, m, K, out + m * N + n, N), m += 2;
        if (m < M) rows<TYPE, 1>(wrow, a, m, K, out + m * N + n, N);
    }
}

// 512 where the CPU has AVX-512 with VNNI (F, BW, VL, DQ, VNNI), else 256 (AVX2).
extern "C" int32_t agentrt_gguf_int8_isa() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni") ? 512 : 256;
}

// out (M, N) = quantized x (M, K) @ w.T for the (N, K) weight of ggml type `type` (row_bytes
// bytes a row); 0, or -1 for a type without an integer kernel. isa 512 runs the AVX-512 VNNI
// forms.
extern "C" int32_t agentrt_gguf_int8_linear(int32_t type, const uint8_t* w, int64_t row_bytes,
                                            const float* x, int64_t M, int64_t K, int64_t N,
                                            float* out, int32_t num_threads, int32_t isa) {
    const bool k_quant = type == Q4_K || type == Q5_K || type == Q6_K;
    static thread_local Acts a;  // NOTE: grows to the largest call, no allocation after that
    switch (type) {
        case Q4_0: case Q4_1: case Q5_0: case Q5_1: case Q8_0: case Q4_K: case Q5_K: case Q6_K:
            break;
        default: return -1;
    }
    const Grouped L = grouped(K);
    const bool by_group = isa == 512 && !k_quant;
    quantize(x, M, K, type, a, num_threads, by_group ? &L : nullptr, type == Q8_0);
    if (isa == 512 && k_quant)
        block_major(a, M, K, type == Q6_K ? KQuant<Q6_K>::CHUNKS : KQuant<Q4_K>::CHUNKS,
                    type == Q6_K ? KQuant<Q6_K>::SUMS : KQuant<Q4_K>::SUMS);
    const View v = view(a);
    const GView g = {a.qg_at, a.dv_at, a.sv_at, L};
    const KView kv = {a.kq_at, a.ksum_at, a.kd.data(), M};
    if (isa == 512) {
        switch (type) {
            case Q4_0: linear32g<Q4_0>(w, row_bytes, g, M, N, out, num_threads); break;
            case Q4_1: linear32g<Q4_1>(w, row_bytes, g, M, N, out, num_threads); break;
            case Q5_0: linear32g<Q5_0>(w, row_bytes, g, M, N, out, num_threads); break;
            case Q5_1: linear32g<Q5_1>(w, row_bytes, g, M, N, out, num_threads); break;
            case Q8_0: linear32g<Q8_0>(w, row_bytes, g, M, N, out, num_threads); break;
            case Q4_K: linear512<Q4_K>(w, row_bytes, kv, M, K, N, out, num_threads); break;
            case Q5_K: linear512<Q5_K>(w, row_bytes, kv, M, K, N, out, num_threads); break;
            default: linear512<Q6_K>(w, row_bytes, kv, M, K, N, out, num_threads); break;
        }
        return 0;
    }
    switch (type) {
        case Q4_0: linear<Q4_0>(w, row_bytes, v, M, K, N, out, num_threads); break;
        case Q4_1: linear<Q4_1>(w, row_bytes, v, M, K, N, out, num_threads); break;
        case Q5_0: linear<Q5_0>(w, row_bytes, v, M, K, N, out, num_threads); break;
        case Q5_1: linear<Q5_1>(w, row_bytes, v, M, K, N, out, num_threads); break;
        case Q8_0: linear<Q8_0>(w, row_bytes, v, M, K, N, out, num_threads); break;
        case Q4_K: linear<Q4_K>(w, row_bytes, v, M, K, N, out, num_threads); break;
        case Q5_K: linear<Q5_K>(w, row_bytes, v, M, K, N, out, num_threads); break;
        default: linear<Q6_K>(w, row_bytes, v, M, K, N, out, num_threads); break;
    }
    return 0;
}

// The activations as the integer path sees them: q * d per value, (M, K) float32 (the twin's
// input, and the tests').
extern "C" void agentrt_gguf_int8_activations(int32_t type, const float* x, int64_t M,
                                              int64_t K, float* out) {
    const bool k_quant = type == Q4_K || type == Q5_K || type == Q6_K;
    Acts a;
    quantize(x, M, K, type, a);
    const int64_t block = k_quant ? 256 : 32;
    for (int64_t i = 0; i < M * K; ++i) out[i] = (float)a.q[i] * a.d[i / block];
}
