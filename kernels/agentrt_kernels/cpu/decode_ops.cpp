// Fused small ops of a decode step (AVX2), where one torch op per elementary step costs more
// in dispatch than in arithmetic: RMSNorm (alone or after the residual add), rotary embedding
// in place, SwiGLU's silu(gate) * up, and attention of single-token queries over the paged KV
// cache.
//
// RMSNorm and RoPE round exactly as the torch reference does (separate multiplies and adds;
// built with -ffp-contract=off), except that RMSNorm sums its squares in another order.
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cmath>
#include <vector>

static inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    return _mm_cvtss_f32(_mm_add_ss(lo, _mm_movehdup_ps(lo)));
}

// o = w * (x * (1 / sqrt(mean(x^2) + eps))) for one row of `dim` floats (a multiple of 8).
static void norm_row(const float* x, const float* w, float* o, int64_t dim, float eps) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < dim; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    const __m256 inv = _mm256_set1_ps(1.f / std::sqrt(hsum(acc) / (float)dim + eps));
    for (int64_t i = 0; i < dim; i += 8) {
        __m256 h = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), h));
    }
}

extern "C" void agentrt_rms_norm(const float* x, const float* w, float* out, int64_t rows,
                                 int64_t dim, float eps) {
    for (int64_t r = 0; r < rows; ++r) norm_row(x + r * dim, w, out + r * dim, dim, eps);
}

// The residual add and the next RMSNorm: x += a (in place), out = norm(x).
extern "C" void agentrt_add_rms_norm(float* x, const float* a, const float* w, float* out,
                                     int64_t rows, int64_t dim, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        float* xr = x + r * dim;
        for (int64_t i = 0; i < dim; i += 8)
            _mm256_storeu_ps(xr + i, _mm256_add_ps(_mm256_loadu_ps(xr + i),
                                                   _mm256_loadu_ps(a + r * dim + i)));
        norm_row(xr, w, out + r * dim, dim, eps);
    }
}

// Rotate heads in place, half-split convention: for i < D/2 (t = token, one cos/sin row each)
//   x[i]       <- x[i] * cos[i] + (-x[i + D/2]) * sin[i]
//   x[i + D/2] <- x[i + D/2] * cos[i + D/2] + x[i] * sin[i + D/2]
// x: T rows of `heads` heads of D floats, rows `row_stride` floats apart.
extern "C" void agentrt_rope(float* x, int64_t row_stride, int64_t T, int64_t heads, int64_t D,
                             const float* cos, const float* sin) {
    const int64_t half = D / 2;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t t = 0; t < T; ++t) {
        const float* c = cos + t * D;
        const float* s = sin + t * D;
        for (int64_t h = 0; h < heads; ++h) {
            float* v = x + t * row_stride + h * D;
            for (int64_t i = 0; i < half; i += 8) {
                const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
                const __m256 lo = _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(c + i)),
                                                _mm256_mul_ps(_mm256_xor_ps(b, sign),
                                                              _mm256_loadu_ps(s + i)));
                const __m256 hi = _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(c + half + i)),
                                                _mm256_mul_ps(a, _mm256_loadu_ps(s + half + i)));
                _mm256_storeu_ps(v + i, lo);
                _mm256_storeu_ps(v + half + i, hi);
            }
        }
    }
}

// exp(x) for 8 floats (Cephes' polynomial, as in avx_mathfun): relative error ~1e-7.
static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)),
                      _mm256_set1_ps(-88.3762626647949f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                               _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x), _mm256_set1_ps(1.f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n),
                                                   _mm256_set1_epi32(0x7f)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// p[0..n) <- exp(p - max); returns their sum.
static float softmax_numerators(float* p, int64_t n, float max) {
    __m256 total = _mm256_setzero_ps();
    const __m256 m = _mm256_set1_ps(max);
    int64_t l = 0;
    for (; l + 8 <= n; l += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + l), m));
        _mm256_storeu_ps(p + l, e);
        total = _mm256_add_ps(total, e);
    }
    float sum = hsum(total);
    for (; l < n; ++l) sum += (p[l] = std::exp(p[l] - max));
    return sum;
}

// SwiGLU's gate: out[r, i] = silu(g) * u with g = gu[r, i], u = gu[r, inter + i], and
// silu(g) = g / (1 + exp(-g)) as torch computes it (exp here within ~1e-7 of torch's).
extern "C" void agentrt_silu_mul(const float* gu, float* out, int64_t rows, int64_t inter) {
    const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        const float* g = gu + r * 2 * inter;
        const float* u = g + inter;
        float* o = out + r * inter;
        for (int64_t i = 0; i < inter; i += 8) {
            const __m256 x = _mm256_loadu_ps(g + i);
            const __m256 e = exp8(_mm256_xor_ps(x, sign));
            const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
        }
    }
}

static constexpr int64_t MAX_D = 256;  // head_dim bound of the on-stack accumulators
static constexpr int64_t KEYS = 8;     // keys scored together: eight independent dot products
static constexpr int64_t AHEAD = 32;   // keys prefetched ahead (about a memory latency's work)

// The eight horizontal sums of a[0..8), as one vector (lane j = sum of a[j]).
static inline __m256 hsum8(const __m256 a[8]) {
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

static inline void prefetch_row(const float* row, int64_t D) {  // D floats, 64-byte lines
    for (int64_t i = 0; i < D; i += 16) _mm_prefetch((const char*)(row + i), _MM_HINT_T0);
}

static inline void prefetch_rows(const float* slots, const int64_t* sl, int64_t from, int64_t to,
                                 int64_t slot_size, int64_t D) {
    for (int64_t j = from; j < to; ++j) prefetch_row(slots + sl[j] * slot_size, D);
}

// scores[g * n + l] = scale * q_g . k_l for the `group` heads, KEYS keys at a time (a short
// last block repeats its first key), and each head's maximum in max[g]. Rows AHEAD keys on are
// prefetched: K and V come from memory, after a step's weights have streamed through the caches.
static void score_keys(const float* q, const float* k_slots, const int64_t* sl, int64_t n,
                       int64_t group, int64_t slot_size, int64_t D, float scale, float* scores,
                       float* max) {
    for (int64_t g = 0; g < group; ++g) max[g] = -INFINITY;
    const __m256 s8 = _mm256_set1_ps(scale);
    prefetch_rows(k_slots, sl, 0, n < AHEAD ? n : AHEAD, slot_size, D);
    for (int64_t l0 = 0; l0 < n; l0 += KEYS) {
        const int64_t count = n - l0 < KEYS ? n - l0 : KEYS;
        const float* k[KEYS];
        for (int64_t j = 0; j < KEYS; ++j)
            k[j] = k_slots + sl[l0 + (j < count ? j : 0)] * slot_size;
        const int64_t ahead = l0 + AHEAD;
        prefetch_rows(k_slots, sl, ahead, n < ahead + KEYS ? n : ahead + KEYS, slot_size, D);
        for (int64_t g = 0; g < group; ++g) {
            __m256 a[KEYS];
            for (int64_t j = 0; j < KEYS; ++j) a[j] = _mm256_setzero_ps();
            for (int64_t i = 0; i < D; i += 8) {
                const __m256 qv = _mm256_loadu_ps(q + g * D + i);
                for (int64_t j = 0; j < KEYS; ++j)
                    a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + i), a[j]);
            }
            float block[KEYS];
            _mm256_storeu_ps(block, _mm256_mul_ps(hsum8(a), s8));
            for (int64_t j = 0; j < count; ++j) {
                scores[g * n + l0 + j] = block[j];
                max[g] = block[j] > max[g] ? block[j] : max[g];
            }
        }
    }
}

static constexpr int64_t CHUNK_KEYS = 128;  // keys per task of a long sequence: see below

// out[0 .. 8 W) = inv * sum_l p[l] * v_l[0 .. 8 W), v_l at v + sl[l] * slot_size: W vectors of
// accumulators, a compile-time count so that they stay in registers (a runtime count kept
// them on the stack: a load, FMA and store per 8 values and key, 80% of the kernel's time).
// `prefetch`: the floats of each row to prefetch AHEAD keys on (0: none).
template <int W>
static inline void weigh_values(const float* p, const float* v, const int64_t* sl, int64_t n,
                                int64_t slot_size, __m256 inv, float* out, int64_t prefetch) {
    __m256 acc[W];
    #pragma GCC unroll 8
    for (int i = 0; i < W; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t l = 0; l < n; ++l) {
        const float* row = v + sl[l] * slot_size;
        if (prefetch && l + AHEAD < n) prefetch_row(v + sl[l + AHEAD] * slot_size, prefetch);
        const __m256 w = _mm256_set1_ps(p[l]);
        #pragma GCC unroll 8
        for (int i = 0; i < W; ++i)
            acc[i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * i), acc[i]);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < W; ++i) _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(acc[i], inv));
}

// One sequence and one kv head over the keys sl[0..n): the `group` query heads that read it,
// scored together (each K row is loaded once), then each head's weighted sum of V (D / 8
// accumulators in registers). `stats` null: out[g * D ..] = softmax-weighted sum; else the
// chunk's share for merge_chunks: out the sum weighted by exp(s - max) and stats[2g],
// stats[2g + 1] = (max, sum of the weights).
static void attend_kv_head(const float* q, const float* k_slots, const float* v_slots,
                           const int64_t* sl, int64_t n, int64_t group, int64_t slot_size,
                           int64_t D, float scale, float* out, float* stats, float* scores) {
    float max[8];
    score_keys(q, k_slots, sl, n, group, slot_size, D, scale, scores, max);
    prefetch_rows(v_slots, sl, 0, n < AHEAD ? n : AHEAD, slot_size, D);
    for (int64_t g = 0; g < group; ++g) {
        float* p = scores + g * n;
        const float sum = softmax_numerators(p, n, max[g]);
        const __m256 inv = _mm256_set1_ps(stats ? 1.f : 1.f / sum);
        if (stats) stats[2 * g] = max[g], stats[2 * g + 1] = sum;
        int64_t at = 0;  // D in slices whose accumulators stay in registers
        for (; at + 64 <= D; at += 64)
            weigh_values<8>(p, v_slots + at, sl, n, slot_size, inv, out + g * D + at,
                            g == 0 && at == 0 ? D : 0);
        if (at + 32 <= D)
            weigh_values<4>(p, v_slots + at, sl, n, slot_size, inv, out + g * D + at, 0), at += 32;
        if (at + 16 <= D)
            weigh_values<2>(p, v_slots + at, sl, n, slot_size, inv, out + g * D + at, 0), at += 16;
        if (at < D) weigh_values<1>(p, v_slots + at, sl, n, slot_size, inv, out + g * D + at, 0);
    }
}

// The `chunks` shares of one sequence and kv head (each `group` x (D + 2) floats: the weighted
// sums, then (max, sum) per head) -> out[g * D ..], the softmax over all of their keys.
static void merge_chunks(const float* part, int64_t chunks, int64_t group, int64_t D,
                         float* out) {
    const int64_t share = group * (D + 2);
    for (int64_t g = 0; g < group; ++g) {
        float top = -INFINITY, total = 0.f;
        for (int64_t c = 0; c < chunks; ++c)
            top = std::fmax(top, part[c * share + group * D + 2 * g]);
        float* o = out + g * D;
        for (int64_t i = 0; i < D; ++i) o[i] = 0.f;
        for (int64_t c = 0; c < chunks; ++c) {
            const float* stats = part + c * share + group * D + 2 * g;
            const float w = std::exp(stats[0] - top);
            total += w * stats[1];
            const __m256 w8 = _mm256_set1_ps(w);
            const float* acc = part + c * share + g * D;
            for (int64_t i = 0; i < D; i += 8)
                _mm256_storeu_ps(o + i, _mm256_fmadd_ps(w8, _mm256_loadu_ps(acc + i),
                                                        _mm256_loadu_ps(o + i)));
        }
        const __m256 inv = _mm256_set1_ps(1.f / total);
        for (int64_t i = 0; i < D; i += 8)
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), inv));
    }
}

// Decode attention: query row rows[b] (heads x D, `q_stride` floats between rows) attends to the
// first lens[b] slots of slots[b * max_len ...] in the flat K/V cache (slot = kv_heads x D);
// grouped-query: query head h reads kv head h / (heads / kv_heads). Written to the same row of
// `out` (heads x D, contiguous rows). Softmax in float32 with the maximum subtracted. Returns
// -1 (nothing done) for a head_dim above MAX_D or a group above 8.
//
// A sequence longer than CHUNK_KEYS is split into chunks of that many keys, one task each
// (split-K, as flash-decoding does), merged by their maxima and sums: a long context then runs
// on every thread even at batch 1, and the V rows of a chunk (32 KiB at D = 64) stay in L1
// while each query head of the group reads them (one pass over all keys re-read them from
// memory per head). 24 layers of 16 heads on 4 kv heads, D = 64, 2 threads: 2,000 keys at
// batch 1 took 14.2 ms before, 9 after; 80 keys at batch 8, 4.1 and 2.8 ms.
extern "C" int agentrt_decode_attention(const float* q, int64_t q_stride, const float* k_slots,
                                        const float* v_slots, const int64_t* slots,
                                        const int64_t* lens, const int64_t* rows, int64_t B,
                                        int64_t max_len, int64_t heads, int64_t kv_heads,
                                        int64_t D, float scale, float* out,
                                        int32_t num_threads) {
    const int64_t group = heads / kv_heads, slot_size = kv_heads * D;
    if (D > MAX_D || group > 8) return -1;
    const int64_t chunks = (max_len + CHUNK_KEYS - 1) / CHUNK_KEYS, share = group * (D + 2);
    static thread_local std::vector<float> parts;  // NOTE: the caller's; grows, never shrinks
    if (chunks > 1 && parts.size() < (size_t)(B * kv_heads * chunks * share))
        parts.resize(B * kv_heads * chunks * share);
    float* part = parts.data();
    // A task takes every kv head of its keys, whose K (V) rows lie side by side in a slot, so
    // it reads whole slots (batch 8 at 80 keys: 1.17-1.30x faster than a task per kv head);
    // where that leaves fewer than two tasks a thread, a task per kv head.
    const int64_t per_task = B * chunks >= 2 * num_threads ? kv_heads : 1;
    #pragma omp parallel num_threads(num_threads)
    {
        float scores[8 * CHUNK_KEYS];
        #pragma omp for schedule(dynamic, 1) collapse(3)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t c = 0; c < chunks; ++c)
                for (int64_t s = 0; s < kv_heads / per_task; ++s)
                    for (int64_t kvh = s * per_task; kvh < (s + 1) * per_task; ++kvh) {
                        const int64_t l0 = c * CHUNK_KEYS, n = lens[b] - l0;
                        if (n <= 0) continue;
                        const float* qh = q + rows[b] * q_stride + kvh * group * D;
                        const int64_t* sl = slots + b * max_len + l0;
                        if (lens[b] <= CHUNK_KEYS) {  // one chunk: the result itself
                            attend_kv_head(qh, k_slots + kvh * D, v_slots + kvh * D, sl, n,
                                           group, slot_size, D, scale,
                                           out + rows[b] * heads * D + kvh * group * D,
                                           nullptr, scores);
                            continue;
                        }
                        float* mine = part + ((b * kv_heads + kvh) * chunks + c) * share;
                        attend_kv_head(qh, k_slots + kvh * D, v_slots + kvh * D, sl,
                                       n < CHUNK_KEYS ? n : CHUNK_KEYS, group, slot_size, D,
                                       scale, mine, mine + group * D, scores);
                    }
        #pragma omp for schedule(static) collapse(2)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t kvh = 0; kvh < kv_heads; ++kvh)
                if (lens[b] > CHUNK_KEYS)
                    merge_chunks(part + (b * kv_heads + kvh) * chunks * share,
                                 (lens[b] + CHUNK_KEYS - 1) / CHUNK_KEYS, group, D,
                                 out + rows[b] * heads * D + kvh * group * D);
    }
    return 0;
}

// ---- a whole decode step in one call ----
//
// The layers of a Llama-family model run here one op after another, exactly as the Python
// forward pass calls the kernels above and the linear kernels (whose C entries arrive as
// function pointers), so a decode step costs one call from Python instead of ~10 per layer.
// The structs mirror `agentrt_kernels.cpu.decode_step` (ctypes); keep the two in sync.

typedef int32_t (*FloatLinearFn)(int32_t, const uint8_t*, const float*, int64_t, int64_t,
                                 int64_t, float*, int32_t, int32_t);
typedef int32_t (*Int8LinearFn)(int32_t, const uint8_t*, int64_t, const float*, int64_t,
                                int64_t, int64_t, float*, int32_t, int32_t);

struct LinearPart {     // one weight in the GGUF file's own blocks
    void* fn;           // agentrt_gguf_linear (kind 0) or agentrt_gguf_int8_linear (kind 1)
    int32_t kind, type, isa, pad;
    const uint8_t* w;
    int64_t row_bytes, N;
    const float* bias;  // N floats, or null
};

struct LinearDesc {     // outputs of `count` parts side by side (a fused QKV or gate/up)
    const LinearPart* parts;
    int64_t count, K, N;
};

struct LayerDesc {
    const float *input_norm, *post_norm, *q_norm, *k_norm;  // q/k norms: null, or D floats
    LinearDesc qkv, o, gate_up, down;
    float *k_slots, *v_slots;  // this layer's flat KV slots (slot = kv_heads x D floats)
};

struct ModelDesc {
    const LayerDesc* layers;
    const float* final_norm;
    int64_t num_layers, hidden, heads, kv_heads, head_dim, inter;
    float eps, scale;
    LinearDesc head;  // the output head (hidden -> vocab), or count 0: none here
};

struct StepArgs {
    int64_t T;                  // tokens, one per sequence
    float* x;                   // (T, hidden) residual stream: the embeddings in, updated
    float* out;                 // (T, hidden) the final norm's output
    float* logits;              // (T, vocab) the head's output, or null: not computed
    const float *cos, *sin;     // (T, head_dim) rows of each token's position
    const int64_t* slot_mapping;  // (T,) KV slot each token writes
    const int64_t *slots, *lens, *rows;  // decode plan: see agentrt_decode_attention
    int64_t max_len;
    float* scratch;             // agentrt_decode_step_scratch(model, T) floats
    int32_t num_threads;
    double* usage;              // null, or 1 + 2 * num_threads doubles: see open_usage
};

// ---- what each thread of the step's team got of its CPU ----
//
// usage[0] = the step's wall seconds; for team thread i, usage[1 + 2i] = its CPU seconds and
// usage[2 + 2i] = its involuntary context switches (the times the kernel took its CPU away)
// during the step; -1 where a thread of the closing team did not open it.

static double seconds(clockid_t clock) {
    timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void thread_usage(double* cpu, double* preempted) {
    rusage u;
    getrusage(RUSAGE_THREAD, &u);
    *cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
    *preempted = (double)u.ru_nivcsw;
}

static thread_local double opened_cpu, opened_preempted;
static thread_local const void* opened_by = nullptr;

static void open_usage(const StepArgs* a) {
    if (!a->usage) return;
    a->usage[0] = seconds(CLOCK_MONOTONIC);
    #pragma omp parallel num_threads(a->num_threads)
    {
        thread_usage(&opened_cpu, &opened_preempted);
        opened_by = a;
    }
}

static void close_usage(const StepArgs* a) {
    if (!a->usage) return;
    #pragma omp parallel num_threads(a->num_threads)
    {
        const int i = omp_get_thread_num();
        double cpu, preempted;
        thread_usage(&cpu, &preempted);
        a->usage[1 + 2 * i] = opened_by == a ? cpu - opened_cpu : -1.0;
        a->usage[2 + 2 * i] = opened_by == a ? preempted - opened_preempted : -1.0;
        opened_by = nullptr;
    }
    a->usage[0] = seconds(CLOCK_MONOTONIC) - a->usage[0];
}

static int64_t qkv_width(const ModelDesc* m) { return (m->heads + 2 * m->kv_heads) * m->head_dim; }

extern "C" int64_t agentrt_decode_step_scratch(const ModelDesc* m, int64_t T) {
    int64_t widest = 0;  // a part's own output before it is placed among the others
    auto widen = [&widest](const LinearDesc& l) {
        if (l.count > 1)
            for (int64_t p = 0; p < l.count; ++p)
                widest = l.parts[p].N > widest ? l.parts[p].N : widest;
    };
    for (int64_t i = 0; i < m->num_layers; ++i)
        for (const LinearDesc* l : {&m->layers[i].qkv, &m->layers[i].o, &m->layers[i].gate_up,
                                    &m->layers[i].down})
            widen(*l);
    widen(m->head);
    return T * (m->hidden + qkv_width(m) + m->heads * m->head_dim + m->hidden +
                3 * m->inter + widest);
}

// out (T, l.N) = x (T, l.K) @ W.T (+ bias), part by part; -1 on a kernel's refusal.
static int32_t run_linear(const LinearDesc& l, const float* x, int64_t T, float* out,
                          float* tmp, int32_t threads) {
    int64_t col = 0;
    for (int64_t p = 0; p < l.count; ++p) {
        const LinearPart& part = l.parts[p];
        const bool direct = l.count == 1 || T == 1;  // its rows are contiguous in `out`
        float* dst = direct ? out + col : tmp;
        const int32_t rc = part.kind == 0
            ? ((FloatLinearFn)part.fn)(part.type, part.w, x, T, l.K, part.N, dst, threads,
                                       part.isa)
            : ((Int8LinearFn)part.fn)(part.type, part.w, part.row_bytes, x, T, l.K, part.N,
                                      dst, threads, part.isa);
        if (rc != 0) return rc;
        for (int64_t t = 0; t < T; ++t) {
            float* row = out + t * l.N + col;
            if (!direct) memcpy(row, tmp + t * part.N, part.N * sizeof(float));
            if (part.bias)
                for (int64_t i = 0; i < part.N; ++i) row[i] += part.bias[i];
        }
        col += part.N;
    }
    return 0;
}

// The decode step: for each layer, norm -> QKV (+ q/k norm) -> RoPE -> KV write -> attention
// -> O -> residual + norm -> gate/up -> SiLU * up -> down -> residual + next norm; `out` gets
// the last norm, `logits` (when asked and the model has a head here) the head's output. 0, or
// -1 where a kernel refused (nothing is then valid).
static int32_t decode_step(const ModelDesc* m, const StepArgs* a) {
    const int64_t T = a->T, H = m->hidden, D = m->head_dim, W = qkv_width(m);
    const int64_t q_size = m->heads * D, kv_size = m->kv_heads * D;
    float* h = a->scratch;
    float* qkv = h + T * H;
    float* attn = qkv + T * W;
    float* proj = attn + T * q_size;
    float* gu = proj + T * H;
    float* act = gu + T * 2 * m->inter;
    float* tmp = act + T * m->inter;
    agentrt_rms_norm(a->x, m->layers[0].input_norm, h, T, H, m->eps);
    for (int64_t i = 0; i < m->num_layers; ++i) {
        const LayerDesc& L = m->layers[i];
        if (run_linear(L.qkv, h, T, qkv, tmp, a->num_threads)) return -1;
        if (L.q_norm)
            for (int64_t t = 0; t < T; ++t) {
                float* row = qkv + t * W;
                for (int64_t j = 0; j < m->heads; ++j)
                    norm_row(row + j * D, L.q_norm, row + j * D, D, m->eps);
                for (int64_t j = 0; j < m->kv_heads; ++j)
                    norm_row(row + q_size + j * D, L.k_norm, row + q_size + j * D, D, m->eps);
            }
        agentrt_rope(qkv, W, T, m->heads, D, a->cos, a->sin);
        agentrt_rope(qkv + q_size, W, T, m->kv_heads, D, a->cos, a->sin);
        for (int64_t t = 0; t < T; ++t) {
            const int64_t slot = a->slot_mapping[t];
            memcpy(L.k_slots + slot * kv_size, qkv + t * W + q_size, kv_size * sizeof(float));
            memcpy(L.v_slots + slot * kv_size, qkv + t * W + q_size + kv_size,
                   kv_size * sizeof(float));
        }
        if (agentrt_decode_attention(qkv, W, L.k_slots, L.v_slots, a->slots, a->lens, a->rows,
                                     T, a->max_len, m->heads, m->kv_heads, D, m->scale, attn,
                                     a->num_threads))
            return -1;
        if (run_linear(L.o, attn, T, proj, tmp, a->num_threads)) return -1;
        agentrt_add_rms_norm(a->x, proj, L.post_norm, h, T, H, m->eps);
        if (run_linear(L.gate_up, h, T, gu, tmp, a->num_threads)) return -1;
        agentrt_silu_mul(gu, act, T, m->inter);
        if (run_linear(L.down, act, T, proj, tmp, a->num_threads)) return -1;
        const float* next = i + 1 < m->num_layers ? m->layers[i + 1].input_norm : m->final_norm;
        agentrt_add_rms_norm(a->x, proj, next, i + 1 < m->num_layers ? h : a->out, T, H, m->eps);
    }
    if (a->logits && m->head.count && run_linear(m->head, a->out, T, a->logits, tmp,
                                                 a->num_threads))
        return -1;
    return 0;
}

extern "C" int32_t agentrt_decode_step(const ModelDesc* m, const StepArgs* a) {
    open_usage(a);
    const int32_t rc = decode_step(m, a);
    close_usage(a);
    return rc;
}
