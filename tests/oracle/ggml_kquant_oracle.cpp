// Oracle for pocket's ggml_exact K-quant / Q5_0 / GEGLU twins (kernels/src/ggml_exact/
// {q5_0,q8_k,q4_k,q6_k,gelu}.rs): random inputs pushed through the real ggml CPU code of the
// cached llama.cpp build, inputs and outputs written to a file that
// kernels/tests/ggml_exact_kquant.rs parses and recomputes bit for bit.
//
// usage: ggml_kquant_oracle SEED OUT.bin
//
// Only public headers (ggml.h, ggml-backend.h, ggml-cpu.h) plus extern "C" declarations of
// exported ggml-cpu functions, so it builds with the same flags as dump_logits:
//   g++ -O2 -std=c++17 -I$S/include -I$S/ggml/include ggml_kquant_oracle.cpp -o OUT \
//       libllama.a libggml.a libggml-cpu.a libggml-base.a -fopenmp -lpthread
//
// The matmuls go through a real graph on the CPU backend (one thread by default), so they take exactly
// the paths llama.cpp takes: Q4_K weights in the CPU_REPACK buffer (repacked to q4_K_8x8 at
// tensor_set; groups of 4 tokens via ggml_quantize_mat_q8_K_4x8 + ggml_gemm_q4_K_8x8_q8_K,
// leftovers via quantize_row_q8_K + ggml_gemv_q4_K_8x8_q8_K), Q5_0/Q8_0 via
// quantize_row_q8_0 then ggml_vec_dot (1 token) or llamafile's tinyBLAS_Q0_AVX (>= 2
// tokens), Q6_K via quantize_row_q8_K + ggml_vec_dot_q6_K_q8_K.
//
// File: "GKQO", u32 version=1, then records, each starting with a u32 kind:
//   1 QUANT_Q8K:     u32 k; f32 x[k]; block_q8_K out[k/256] (292 bytes each)
//   2 QUANT_Q8K_4X8: u32 k; f32 x[4][k]; block_q8_K out[4][k/256] (de-interleaved rows)
//   3 DOT:           u32 type (6 = Q5_0 x Q8_0, 14 = Q6_K x Q8_K); u32 k;
//                    weight blocks; activation blocks (ggml's own quantize); f32 result
//   4 MUL_MAT:       u32 type; u32 k; u32 rows; u32 tokens; u32 repacked;
//                    weight bytes (rows * row_size); f32 x[tokens][k]; f32 y[tokens][rows]
//   5 GEGLU:         u32 n; u32 rows; f32 gate[rows][n]; f32 up[rows][n]; f32 out[rows][n]
//   6 GELU_TABLE:    u16 table[65536]
//   0 END
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "oracle_common.h"

#include <cstring>
#include <string>
#include <vector>

extern "C" {
void quantize_row_q8_0(const float * x, void * y, int64_t k);
void quantize_row_q8_K(const float * x, void * y, int64_t k);
void ggml_quantize_mat_q8_K_4x8(const float * x, void * y, int64_t k);
void ggml_vec_dot_q5_0_q8_0(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);
void ggml_vec_dot_q6_K_q8_K(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);
extern ggml_fp16_t ggml_table_gelu_f16[1 << 16];
}

static const int QK_K = 256;
static const size_t Q8K_SIZE = 4 + 256 + 32;

// Activations ~N(0,1), 1% outliers x20; with `ties`, some 256-blocks get +m and -m at their
// largest magnitude (the q8_K quantizers break that tie differently).
static std::vector<float> activations(size_t n, bool ties) {
    std::vector<float> x = normal_with_outliers(n);
    if (ties) {
        for (size_t b = 0; b + QK_K <= n; b += QK_K) {
            if (below(3) != 0) continue;
            tie_extremes(x, b, QK_K);
        }
    }
    return x;
}

// Random valid weight blocks of a row of k elements (finite fp16 scales).
static std::vector<uint8_t> weights(ggml_type t, int64_t k, int64_t rows) {
    std::vector<uint8_t> v;
    for (int64_t r = 0; r < rows; ++r) {
        switch (t) {
            case GGML_TYPE_Q5_0:
                for (int64_t b = 0; b < k / 32; ++b) {
                    put_h(v, unif(-0.05f, 0.05f));
                    rand_bytes(v, 4 + 16);
                }
                break;
            case GGML_TYPE_Q8_0:
                for (int64_t b = 0; b < k / 32; ++b) {
                    put_h(v, unif(-0.01f, 0.01f));
                    for (int i = 0; i < 32; ++i) v.push_back((uint8_t)(int8_t)(int)(below(255) - 127));
                }
                break;
            case GGML_TYPE_Q4_K:
                for (int64_t b = 0; b < k / QK_K; ++b) {
                    put_h(v, unif(1e-4f, 3e-3f));
                    put_h(v, unif(1e-4f, 3e-3f));
                    rand_bytes(v, 12 + 128);
                }
                break;
            case GGML_TYPE_Q6_K:
                for (int64_t b = 0; b < k / QK_K; ++b) {
                    rand_bytes(v, 128 + 64 + 16);  // ql, qh, scales (any int8)
                    put_h(v, unif(1e-5f, 2e-4f));
                }
                break;
            default: fprintf(stderr, "type\n"); exit(1);
        }
    }
    if (v.size() != (size_t)rows * ggml_row_size(t, k)) { fprintf(stderr, "row size\n"); exit(1); }
    return v;
}

static ggml_backend_buffer_type_t repack_buft;

static void mul_mat_case(ggml_type t, int64_t k, int64_t rows, int64_t tokens, bool repack) {
    const std::vector<uint8_t> w = weights(t, k, rows);
    const std::vector<float> x = activations(k * tokens, true);

    weight_tensor W = new_weight(t, k, rows, w, repack ? repack_buft : nullptr);
    const std::vector<float> y = mul_mat_graph(W.t, x, tokens);

    put_u32(4);
    put_u32(t); put_u32(k); put_u32(rows); put_u32(tokens); put_u32(repack);
    put_vec(w); put_vec(x); put_vec(y);
    free_weight(W);
}

static void quant_q8k_case(int64_t k, bool zero_block) {
    std::vector<float> x = activations(k, true);
    if (zero_block) std::fill(x.begin(), x.begin() + QK_K, 0.0f);
    std::vector<uint8_t> q(k / QK_K * Q8K_SIZE, 0);
    quantize_row_q8_K(x.data(), q.data(), k);
    put_u32(1); put_u32(k); put_vec(x); put_vec(q);
}

static void quant_q8k_4x8_case(int64_t k) {
    const std::vector<float> x = activations(4 * k, true);
    const int64_t nb = k / QK_K;
    // block_q8_Kx4: float d[4]; int8 qs[1024]; int16 bsums[64]
    const size_t bsz = 16 + 1024 + 128;
    std::vector<uint8_t> q(nb * bsz);
    ggml_quantize_mat_q8_K_4x8(x.data(), q.data(), k);
    const std::vector<uint8_t> rows = deinterleave_4x8(q, nb, bsz, 4, QK_K, Q8K_SIZE,
        [](const uint8_t * blk, int r, uint8_t * o) {
            for (int g = 0; g < 16; ++g) {  // bsums: index (g/4)*16 + r*4 + g%4
                memcpy(o + 4 + QK_K + 2 * g, blk + 16 + 1024 + 2 * ((g / 4) * 16 + r * 4 + g % 4), 2);
            }
        });
    put_u32(2); put_u32(k); put_vec(x); put_vec(rows);
}

static void dot_case(ggml_type t, int64_t k) {
    const std::vector<uint8_t> w = weights(t, k, 1);
    const std::vector<float> x = activations(k, true);
    std::vector<uint8_t> a;
    float s = 0;
    if (t == GGML_TYPE_Q5_0) {
        a.resize(ggml_row_size(GGML_TYPE_Q8_0, k));
        quantize_row_q8_0(x.data(), a.data(), k);
        ggml_vec_dot_q5_0_q8_0(k, &s, 0, w.data(), 0, a.data(), 0, 1);
    } else {
        a.resize(ggml_row_size(GGML_TYPE_Q8_K, k));
        quantize_row_q8_K(x.data(), a.data(), k);
        ggml_vec_dot_q6_K_q8_K(k, &s, 0, w.data(), 0, a.data(), 0, 1);
    }
    put_u32(3); put_u32(t); put_u32(k); put_vec(w); put_vec(a); put(&s, 4);
}

static void geglu_case(int64_t n, int64_t rows) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> g(n * rows), u(n * rows);
    for (auto & v : g) v = nd(rng) * 4.0f;
    for (auto & v : u) v = nd(rng);
    // The table's edges and fp16 rounding boundaries.
    const float special[] = { -10.0f, 10.0f, -9.999f, 9.999f, -10.001f, 10.001f, 0.0f, -0.0f, 1e-8f, -3.0f, 65504.0f, -70000.0f };
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]) && i < g.size(); ++i) g[below(g.size())] = special[i];

    ggml_context * cctx = new_ctx(4);
    ggml_tensor * G = ggml_new_tensor_2d(cctx, GGML_TYPE_F32, n, rows);
    ggml_tensor * U = ggml_new_tensor_2d(cctx, GGML_TYPE_F32, n, rows);
    ggml_tensor * Y = ggml_geglu_split(cctx, G, U);
    const std::vector<float> y = compute_f32(cctx, Y, [&] {
        ggml_backend_tensor_set(G, g.data(), 0, g.size() * 4);
        ggml_backend_tensor_set(U, u.data(), 0, u.size() * 4);
    });
    put_u32(5); put_u32(n); put_u32(rows); put_vec(g); put_vec(u); put_vec(y);
}

int main(int argc, char ** argv) {
    oracle_begin(argc, argv, "GKQO");

    repack_buft = init_backend_with_repack();  // also the GELU table (ggml_cpu_init)

    put_u32(6);
    put(ggml_table_gelu_f16, sizeof(ggml_table_gelu_f16));

    const int64_t kk[] = { 256, 512, 1024, 2048 };
    for (int i = 0; i < 6; ++i) {
        quant_q8k_case(kk[below(4)], i == 0);
        quant_q8k_4x8_case(kk[below(4)]);
        dot_case(GGML_TYPE_Q6_K, kk[below(4)]);
        dot_case(GGML_TYPE_Q5_0, 32 * (1 + below(64)));
    }
    // Q4_K, repacked: every token count 1..7 (gemv only, gemm only, gemm + gemv leftovers).
    for (int64_t tokens = 1; tokens <= 7; ++tokens) {
        mul_mat_case(GGML_TYPE_Q4_K, kk[below(4)], 8 * (1 + below(4)), tokens, true);
    }
    mul_mat_case(GGML_TYPE_Q4_K, 1024, 640, 5, true);  // gemma-3-270m attn_output shape
    mul_mat_case(GGML_TYPE_Q4_K, 2048, 640, 2, true);  // its Q4_K ffn_down layers
    // 16+ tokens: the gemm's 16-token loop (then its 4-token loop, then gemv leftovers).
    mul_mat_case(GGML_TYPE_Q4_K, 512, 16, 16, true);
    mul_mat_case(GGML_TYPE_Q4_K, 256 * (1 + below(8)), 8, 16 + 4 + 1 + below(3), true);
    // Q6_K (vec_dot for all token counts), Q5_0 and Q8_0 (vec_dot for 1 token, llamafile
    // sgemm tiles for more; odd row counts reach the 1..3-row tiles).
    for (int64_t tokens = 1; tokens <= 7; ++tokens) {
        mul_mat_case(GGML_TYPE_Q6_K, kk[below(4)], 1 + below(13), tokens, false);
        mul_mat_case(GGML_TYPE_Q5_0, 32 * (1 + below(64)), 1 + below(13), tokens, false);
        mul_mat_case(GGML_TYPE_Q8_0, 32 * (1 + below(64)), 1 + below(13), tokens, false);
    }
    mul_mat_case(GGML_TYPE_Q5_0, 640, 1024, 9, false);  // gemma-3-270m attn_q shape, a batch
    mul_mat_case(GGML_TYPE_Q5_0, 640, 37, 23, false);   // longer batch, odd tiles
    mul_mat_case(GGML_TYPE_Q6_K, 2048, 640, 3, false);  // Q6_K ffn_down layers
    mul_mat_case(GGML_TYPE_Q5_0, 640, 256, 1, false);   // attn_k / Q5_0 attn_v, decode
    mul_mat_case(GGML_TYPE_Q8_0, 640, 256, 6, false);   // Q8_0 attn_v layers, a batch
    geglu_case(2048, 3);
    geglu_case(37, 2);

    oracle_end();
    ggml_backend_free(backend);
    return 0;
}
