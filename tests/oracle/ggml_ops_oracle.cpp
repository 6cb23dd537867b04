// Oracle for pocket's remaining ggml_exact twins (kernels/src/ggml_exact/{quantize,dots,vec,
// rope,attention}.rs): random inputs, with edge cases, pushed through the real ggml CPU code
// of the cached llama.cpp build (exported functions called directly, RoPE and flash
// attention through real graphs on the CPU backend); inputs and outputs written to a file
// that kernels/tests/ggml_exact_ops.rs parses and recomputes bit for bit.
//
// usage: ggml_ops_oracle SEED OUT.bin
//
// Only public headers plus extern "C" declarations of exported ggml-cpu functions, built
// like the other oracles:
//   g++ -O2 -std=c++17 -I$S/include -I$S/ggml/include ggml_ops_oracle.cpp -o OUT \
//       libllama.a libggml.a libggml-cpu.a libggml-base.a -fopenmp -lpthread
//
// File: "GOPO", u32 version=1, then records, each starting with a u32 kind:
//   1 QUANT_Q8_0: u32 k; f32 x[k]; block_q8_0 out[k/32] (34 bytes each)
//   2 QUANT_Q8_1: u32 k; f32 x[k]; block_q8_1 out[k/32] (36 bytes each)
//   3 DOT_Q4_1:   u32 k; block_q4_1 w[k/32]; block_q8_1 a[k/32] (ggml's quantize); f32 s
//   4 DOT_Q8_0:   u32 k; block_q8_0 w[k/32]; block_q8_0 a[k/32]; f32 s
//   5 DOT_F16:    u32 n; f16 x[n]; f16 y[n]; f32 s
//   6 SWIGLU:     u32 n; f32 x[n] (gate); f32 g[n] (up); f32 y[n]   (ggml_vec_swiglu_f32)
//   7 ROPE:       u32 mode; u32 head_dim; u32 n_dims; f32 freq_base; u32 n_head; u32 n_pos;
//                 i32 pos[n_pos]; f32 x[n_pos][n_head][head_dim]; f32 y[same]
//   8 FLASH_ATTN: u32 DK; u32 DV; u32 n_kv; u32 n_head; u32 n_head_kv; u32 n_rows;
//                 u32 threads; f32 scale; f32 q[n_head][n_rows][DK];
//                 f16 k[n_head_kv][n_kv][DK]; f16 v[n_head_kv][n_kv][DV];
//                 f16 mask[n_rows][n_kv]; f32 out[n_rows][n_head][DV]
//                 (ggml's path: n_rows >= 64 tiled, n_rows == 1 and n_kv >= 512 split-KV,
//                 else one_chunk)
//   0 END
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "oracle_common.h"

#include <cstring>
#include <vector>

extern "C" {
void quantize_row_q8_0(const float * x, void * y, int64_t k);
void quantize_row_q8_1(const float * x, void * y, int64_t k);
void ggml_vec_dot_q4_1_q8_1(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);
void ggml_vec_dot_q8_0_q8_0(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);
void ggml_vec_dot_f16(int n, float * s, size_t bs, ggml_fp16_t * x, size_t bx, ggml_fp16_t * y, size_t by, int nrc);
void ggml_vec_swiglu_f32(const int n, float * y, const float * x, const float * g);
}

// n values ~N(0,1), each from a fresh distribution (`gauss`, unlike
// `normal_with_outliers`), with 1% outliers x20: what both activation kinds start from.
static std::vector<float> gauss_with_outliers(size_t n) {
    std::vector<float> x(n);
    for (auto & v : x) {
        v = gauss();
        if (below(100) == 0) v *= 20.0f;
    }
    return x;
}

// Activations for the 32-element quantizers: ~N(0,1) with 1% outliers x20, and per block
// now and then one edge case: all zeros, all equal, +m and -m tied at the largest
// magnitude, codes exactly at (and one ulp around) .5 rounding boundaries, huge or tiny
// magnitudes, signed zeros.
static std::vector<float> q8_activations(size_t n) {
    std::vector<float> x = gauss_with_outliers(n);
    for (size_t b = 0; b + 32 <= n; b += 32) {
        float * p = x.data() + b;
        switch (below(16)) {
            case 0: std::fill(p, p + 32, 0.0f); break;
            case 1: { const float c = below(2) ? unif(-3, 3) : -0.0f; std::fill(p, p + 32, c); } break;
            case 2: {  // +m and -m
                float m = 0;
                for (int i = 0; i < 32; ++i) m = std::max(m, std::fabs(p[i]));
                m *= 1.25f;
                const int i = below(32), j = (i + 1 + below(31)) % 32;
                p[i] = m; p[j] = -m;
            } break;
            case 3: case 4: {  // amax = 127 or 254 (id = 1 or 0.5): codes land on .5 exactly
                const float amax = below(2) ? 127.0f : 254.0f;
                const float step = amax / 127.0f;
                for (int i = 0; i < 32; ++i) {
                    float v = ((int)below(254) - 127 + 0.5f) * step;
                    const uint32_t r = below(4);
                    if (r == 1) v = std::nextafter(v, INFINITY);
                    if (r == 2) v = std::nextafter(v, -INFINITY);
                    p[i] = v;
                }
                p[below(32)] = below(2) ? amax : -amax;
            } break;
            case 5: {  // big magnitudes: d overflows fp16 (inf) above ~8.3e6
                const float s = below(2) ? 1e5f : std::pow(10.0f, unif(6, 30));
                for (int i = 0; i < 32; ++i) p[i] *= s;
            } break;
            case 6: {  // small magnitudes: d is an fp16 subnormal or zero. Not below amax =
                       // 127/FLT_MAX (3.7e-37): there ggml's id = 127/amax is +inf and
                       // _mm256_cvtps_epi32 of x*id (inf or NaN) is INT_MIN, so every code is
                       // -128 (and q8_1's s sums the wrapped INT_MINs), where the twin writes
                       // +-127 / -128 / 0. Harmless downstream (d rounds to fp16 0 there), so
                       // quantize.rs leaves it alone and this oracle does not generate it.
                const float s = std::pow(10.0f, unif(-30, -5));
                for (int i = 0; i < 32; ++i) p[i] *= s;
            } break;
            case 7: for (int i = 0; i < 32; i += 3) p[i] = (i & 1) ? -0.0f : 0.0f; break;
            case 8: case 9: {  // any amax: x * (127/amax) within an ulp or two of c + .5, where
                               // x * id and x / d (d = amax/127) can round to different codes
                const float amax = std::pow(10.0f, unif(-3, 3));
                const float id = 127.0f / amax;
                for (int i = 0; i < 32; ++i) {
                    float v = ((int)below(254) - 127 + 0.5f) / id;
                    for (int s = (int)below(5) - 2; s != 0; s += s > 0 ? -1 : 1) {
                        v = std::nextafter(v, s > 0 ? INFINITY : -INFINITY);
                    }
                    p[i] = std::fabs(v) < amax ? v : 0.0f;
                }
                p[below(32)] = below(2) ? amax : -amax;
            } break;
            default: break;
        }
    }
    return x;
}

// `x` in ggml's Q8_1 (`q8_1`) or Q8_0 blocks.
static std::vector<uint8_t> quantize_q8(const std::vector<float> & x, bool q8_1) {
    const int64_t k = (int64_t)x.size();
    std::vector<uint8_t> q(k / 32 * (q8_1 ? 36 : 34));
    if (q8_1) quantize_row_q8_1(x.data(), q.data(), k); else quantize_row_q8_0(x.data(), q.data(), k);
    return q;
}

static void quant_case(bool q8_1, int64_t k) {
    const std::vector<float> x = q8_activations(k);
    put_u32(q8_1 ? 2 : 1); put_u32(k); put_vec(x); put_vec(quantize_q8(x, q8_1));
}

// Activations without the degenerate blocks, for the dot products.
static std::vector<float> dot_activations(size_t n) {
    std::vector<float> x = gauss_with_outliers(n);
    for (size_t b = 0; b + 32 <= n; b += 32) {
        if (below(16) == 0) std::fill(x.begin() + b, x.begin() + b + 32, 0.0f);
        else if (below(8) == 0) for (size_t i = b; i < b + 32; ++i) x[i] *= 1000.0f;
    }
    return x;
}

// A dot-product case: `dot_activations` quantized to Q8_1 (`q8_1`) or Q8_0, ggml's
// `vec_dot` of them with the weight blocks `w`, and the record `tag k w a s`.
template <typename VecDot>
static void emit_dot(uint32_t tag, int64_t k, const std::vector<uint8_t> & w, bool q8_1, VecDot vec_dot) {
    const std::vector<uint8_t> a = quantize_q8(dot_activations(k), q8_1);
    float s = 0;
    vec_dot(k, &s, 0, w.data(), 0, a.data(), 0, 1);
    put_u32(tag); put_u32(k); put_vec(w); put_vec(a); put_f32(s);
}

static void dot_q4_1_case(int64_t k) {
    std::vector<uint8_t> w;
    for (int64_t b = 0; b < k / 32; ++b) {
        const uint32_t r = below(16);
        float d = unif(1e-4f, 0.05f), m = -unif(0.0f, 0.4f);
        if (r == 0) { d = 0; m = 0; }
        else if (r == 1) { d = unif(1, 100); m = -unif(1, 800); }
        put_h(w, d); put_h(w, m);
        for (int i = 0; i < 16; ++i) w.push_back((uint8_t)rng());
    }
    emit_dot(3, k, w, true, ggml_vec_dot_q4_1_q8_1);
}

static void dot_q8_0_case(int64_t k) {
    std::vector<uint8_t> w;
    for (int64_t b = 0; b < k / 32; ++b) {
        put_h(w, below(16) == 0 ? 0.0f : unif(-0.02f, 0.02f));
        const bool extreme = below(8) == 0;
        for (int i = 0; i < 32; ++i) w.push_back((uint8_t)(int8_t)(extreme ? (below(2) ? 127 : -128) : (int)below(256) - 128));
    }
    emit_dot(4, k, w, false, ggml_vec_dot_q8_0_q8_0);
}

static void dot_f16_case(int n) {
    std::vector<ggml_fp16_t> x(n), y(n);
    const float sx = std::pow(10.0f, unif(-2, 1)), sy = std::pow(10.0f, unif(-2, 1));
    for (int i = 0; i < n; ++i) {
        x[i] = h(gauss() * sx);
        y[i] = h(gauss() * sy);
        if (below(50) == 0) x[i] = h(below(2) ? 0.0f : -0.0f);
        if (below(100) == 0) y[i] = h(below(2) ? 60000.0f : -1e-7f);
    }
    float s = 0;
    ggml_vec_dot_f16(n, &s, 0, x.data(), 0, y.data(), 0, 1);
    put_u32(5); put_u32(n); put_vec(x); put_vec(y); put_f32(s);
}

static void swiglu_case(int n) {
    std::vector<float> x(n), g(n), y(n);
    for (int i = 0; i < n; ++i) {
        x[i] = gauss() * 3.0f;
        g[i] = gauss();
        switch (below(12)) {
            case 0: x[i] = unif(-200, 200); break;          // |x| > 88: v_expf's slow branch
            case 1: x[i] = unif(-100, -80); break;          // around the underflow
            case 2: x[i] = below(2) ? -0.0f : 0.0f; break;
            case 3: x[i] = below(2) ? unif(80, 200) : unif(-200, -125); break;
            case 4: x[i] = gauss() * 1e-6f; break;
            default: break;
        }
    }
    ggml_vec_swiglu_f32(n, y.data(), x.data(), g.data());
    put_u32(6); put_u32(n); put_vec(x); put_vec(g); put_vec(y);
}

static void compute(ggml_cgraph * gf, int threads) {
    ggml_backend_cpu_set_n_threads(backend, threads);
    compute_graph(gf);
}

static void rope_case(int mode, int head_dim, int n_dims, float base, int n_head, int n_pos) {
    std::vector<int32_t> pos(n_pos);
    for (int i = 0; i < n_pos; ++i) pos[i] = i == 0 ? 0 : i == 1 ? 300 : (int32_t)below(301);
    std::vector<float> x((size_t)n_pos * n_head * head_dim);
    for (auto & v : x) {
        v = gauss() * 2.0f;
        if (below(50) == 0) v *= 100.0f;
        if (below(100) == 0) v = 0.0f;
    }

    ggml_context * ctx = new_ctx(4);
    ggml_tensor * X = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, head_dim, n_head, n_pos);
    ggml_tensor * P = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_pos);
    ggml_tensor * Y = ggml_rope_ext(ctx, X, P, nullptr, n_dims, mode, 0, base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, Y);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    ggml_backend_tensor_set(X, x.data(), 0, x.size() * 4);
    ggml_backend_tensor_set(P, pos.data(), 0, pos.size() * 4);
    compute(gf, 1 + below(2));
    std::vector<float> y(x.size());
    ggml_backend_tensor_get(Y, y.data(), 0, y.size() * 4);

    put_u32(7); put_u32(mode); put_u32(head_dim); put_u32(n_dims); put_f32(base);
    put_u32(n_head); put_u32(n_pos); put_vec(pos); put_vec(x); put_vec(y);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

// n_vis <= n_kv keys visible to the last row; a causal mask (row r of n_rows sees keys up to
// n_vis - n_rows + r), -INF for the padding, and a few random holes in the visible part.
static void flash_case(int DK, int DV, int n_kv, int n_vis, int n_head, int n_head_kv, int n_rows, float scale,
                       const std::vector<int> & threads) {
    std::vector<float> q((size_t)n_head * n_rows * DK);
    for (auto & v : q) v = gauss();
    std::vector<ggml_fp16_t> k((size_t)n_head_kv * n_kv * DK), v((size_t)n_head_kv * n_kv * DV);
    for (int hk = 0; hk < n_head_kv; ++hk) {
        for (int i = 0; i < n_kv; ++i) {
            // Some keys much larger: new running maxima in the middle of the sequence.
            const float ks = below(10) == 0 ? unif(2, 4) : 1.0f;
            for (int d = 0; d < DK; ++d) k[((size_t)hk * n_kv + i) * DK + d] = h(gauss() * ks);
            for (int d = 0; d < DV; ++d) v[((size_t)hk * n_kv + i) * DV + d] = h(gauss() * 2.0f);
        }
    }
    const bool holes = below(2);
    std::vector<ggml_fp16_t> mask((size_t)n_rows * n_kv);
    for (int r = 0; r < n_rows; ++r) {
        const int last = n_vis - n_rows + r;  // inclusive
        for (int i = 0; i < n_kv; ++i) {
            const bool vis = i <= last && !(holes && i != last && below(8) == 0);
            mask[(size_t)r * n_kv + i] = h(vis ? 0.0f : -INFINITY);
        }
    }

    ggml_context * ctx = new_ctx(6);
    ggml_tensor * Q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, DK, n_rows, n_head);
    ggml_tensor * K = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DK, n_kv, n_head_kv);
    ggml_tensor * V = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, DV, n_kv, n_head_kv);
    ggml_tensor * M = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, n_rows);
    ggml_tensor * O = ggml_flash_attn_ext(ctx, Q, K, V, M, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(O, GGML_PREC_F32);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, O);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    ggml_backend_tensor_set(Q, q.data(), 0, q.size() * 4);
    ggml_backend_tensor_set(K, k.data(), 0, k.size() * 2);
    ggml_backend_tensor_set(V, v.data(), 0, v.size() * 2);
    ggml_backend_tensor_set(M, mask.data(), 0, mask.size() * 2);
    for (int t : threads) {
        compute(gf, t);
        std::vector<float> o((size_t)n_rows * n_head * DV);
        ggml_backend_tensor_get(O, o.data(), 0, o.size() * 4);
        put_u32(8); put_u32(DK); put_u32(DV); put_u32(n_kv); put_u32(n_head); put_u32(n_head_kv);
        put_u32(n_rows); put_u32(t); put_f32(scale);
        put_vec(q); put_vec(k); put_vec(v); put_vec(mask); put_vec(o);
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    oracle_begin(argc, argv, "GOPO");
    backend = ggml_backend_cpu_init();

    for (int i = 0; i < 8; ++i) {
        quant_case(false, 32 * (1 + below(64)));
        quant_case(true, 32 * (1 + below(64)));
    }
    for (int i = 0; i < 40; ++i) {
        dot_q4_1_case(32 * (1 + below(96)));
        dot_q8_0_case(32 * (1 + below(96)));
    }
    const int f16_lens[] = { 64, 128, 256, 70, 33, 1, 31, 32, 96, 200, 257, 1000 };
    for (int n : f16_lens) dot_f16_case(n);
    for (int i = 0; i < 28; ++i) dot_f16_case(1 + below(300));
    const int swiglu_lens[] = { 8, 64, 1024, 1, 7, 13, 77, 2051 };
    for (int n : swiglu_lens) swiglu_case(n);

    for (int mode : { 0, 2 }) {
        for (float base : { 10000.0f, 1000000.0f }) {
            rope_case(mode, 64, 64, base, 3, 6);
            rope_case(mode, 128, 128, base, 2, 6);
            rope_case(mode, 128, 64, base, 2, 4);   // partial rotary
            rope_case(mode, 80, 32, base, 2, 4);    // phi-like partial
        }
    }

    // Prefill-like (several rows) and decode (one row), at 1 and 2 threads.
    const std::vector<int> th = { 1, 2 };
    flash_case(64, 64, 256, 200, 4, 2, 7, 0.125f, th);
    flash_case(128, 128, 256, 1 + below(200), 14, 2, 16, 0.125f, th);
    flash_case(64, 64, 256, 37, 6, 2, 1, 0.125f, th);
    flash_case(128, 128, 256, 200, 8, 2, 1, 1.0f, th);
    flash_case(64, 64, 256, 16 + below(180), 10, 2, 1 + below(16), 1.0f, th);
    flash_case(128, 128, 256, 5, 4, 2, 3, 0.125f, th);
    flash_case(64, 64, 256, 1, 4, 2, 1, 0.125f, th);

    // 32..63 rows still take one_chunk (the tiled path starts at GGML_FA_TILE_Q = 64 rows).
    flash_case(64, 64, 256, 200, 4, 2, 40, 0.125f, th);
    flash_case(128, 128, 512, 400, 4, 2, 2 + below(14), 0.125f, th);  // > 1 row: no split
    // A decode row over >= 512 cells: the split-KV path, one cell range per thread (at one
    // thread one_chunk's arithmetic), partials merged in f32; some thread ranges empty.
    const std::vector<int> th4 = { 1, 2, 3, 4 };
    flash_case(64, 64, 512, 300, 4, 2, 1, 0.125f, th4);
    flash_case(128, 128, 768, 257 + below(500), 8, 2, 1, 0.125f, th4);
    flash_case(64, 64, 512, 100, 6, 2, 1, 1.0f, th4);
    flash_case(128, 128, 1024, 1000, 4, 2, 1, 1.0f, th4);
    // 64+ rows: the tiled path (Q tiles of 64 rows, KV tiles of 64 cells, f32 sums); a
    // partial last KV tile, Q tiles cut by heads and thread chunks, fully masked KV tiles.
    flash_case(64, 64, 256, 200, 4, 2, 64, 0.125f, th);
    flash_case(128, 128, 512, 300 + below(200), 6, 2, 70, 0.125f, th4);
    flash_case(64, 64, 200, 200, 4, 2, 100, 1.0f, th);
    flash_case(128, 128, 256, 256, 14, 2, 64 + below(64), 1.0f, { 2 });

    oracle_end();
    ggml_backend_free(backend);
    return 0;
}
