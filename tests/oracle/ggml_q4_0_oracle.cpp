// Oracle for pocket's ggml_exact Q4_0 twins (kernels/src/ggml_exact/q4_0.rs): random inputs
// pushed through the real ggml CPU code of the cached llama.cpp build, inputs and outputs
// written to a file that kernels/tests/ggml_exact_q4_0.rs parses and recomputes bit for bit.
//
// usage: ggml_q4_0_oracle SEED OUT.bin      (ORACLE_THREADS=n: CPU backend threads, default 1)
//
// Built like the other oracles by compare/provision-llama.sh (public headers plus extern "C"
// declarations of exported ggml-cpu functions).
//
// The matmuls go through a real graph on the CPU backend, so they take exactly the paths
// llama.cpp takes: Q4_0 weights with ne[1] % 8 == 0 in the CPU_REPACK buffer (repacked to
// q4_0_8x8 at tensor_set, nibbles XOR 0x88; groups of 4 tokens via
// ggml_quantize_mat_q8_0_4x8 + ggml_gemm_q4_0_8x8_q8_0, leftovers via quantize_row_q8_0 +
// ggml_gemv_q4_0_8x8_q8_0), other Q4_0 weights in the plain CPU buffer (quantize_row_q8_0,
// then ggml_vec_dot_q4_0_q8_0 for 1 token, llamafile's tinyBLAS_Q0_AVX for more).
//
// File: "GQ40", u32 version=1, then records, each starting with a u32 kind:
//   1 QUANT_Q8_0:     u32 k; f32 x[k]; block_q8_0 out[k/32] (34 bytes each)
//   2 QUANT_Q8_0_4X8: u32 k; f32 x[4][k]; block_q8_0 out[4][k/32] (de-interleaved rows)
//   3 DOT:            u32 k; block_q4_0 w[k/32]; block_q8_0 a[k/32] (ggml's quantize);
//                     f32 ggml_vec_dot_q4_0_q8_0
//   4 MUL_MAT:        u32 k; u32 rows; u32 repacked; weight bytes (rows * row_size);
//                     u32 n_cases; n_cases x { u32 tokens; f32 x[tokens][k];
//                     f32 y[tokens][rows] }
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
void ggml_quantize_mat_q8_0_4x8(const float * x, void * y, int64_t k);
void ggml_vec_dot_q4_0_q8_0(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);
}

static const size_t Q8_0_SIZE = 2 + 32;

// Activations ~N(0,1), 1% outliers x20; some 32-blocks get +m and -m at their largest
// magnitude, a few are all zero (amax == 0: id = 0).
static std::vector<float> activations(size_t n) {
    std::vector<float> x = normal_with_outliers(n);
    for (size_t b = 0; b + 32 <= n; b += 32) {
        const uint32_t c = below(40);
        if (c == 0) {
            std::fill(x.begin() + b, x.begin() + b + 32, 0.0f);
        } else if (c < 8) {
            tie_extremes(x, b, 32);
        }
    }
    return x;
}

// Random Q4_0 rows of k elements (finite fp16 scales, any nibbles).
static std::vector<uint8_t> weights(int64_t k, int64_t rows) {
    std::vector<uint8_t> v;
    for (int64_t b = 0; b < rows * (k / 32); ++b) {
        put_h(v, unif(-0.05f, 0.05f));
        for (int i = 0; i < 16; ++i) v.push_back((uint8_t)rng());
    }
    if (v.size() != (size_t)rows * ggml_row_size(GGML_TYPE_Q4_0, k)) { fprintf(stderr, "row size\n"); exit(1); }
    return v;
}

static ggml_backend_buffer_type_t repack_buft;

// One weight, several token counts; the weight is in the CPU_REPACK buffer when
// rows % 8 == 0 (as llama.cpp places it), else in the plain CPU buffer.
static void mul_mat_case(int64_t k, int64_t rows, const std::vector<int64_t> & token_counts) {
    const bool repack = rows % 8 == 0;
    const std::vector<uint8_t> w = weights(k, rows);
    weight_tensor W = new_weight(GGML_TYPE_Q4_0, k, rows, w, repack ? repack_buft : nullptr);

    put_u32(4);
    put_u32(k); put_u32(rows); put_u32(repack);
    put_vec(w);
    put_u32(token_counts.size());
    for (int64_t tokens : token_counts) {
        const std::vector<float> x = activations(k * tokens);
        const std::vector<float> y = mul_mat_graph(W.t, x, tokens);
        put_u32(tokens); put_vec(x); put_vec(y);
    }
    free_weight(W);
}

static void quant_case(int64_t k) {
    const std::vector<float> x = activations(k);
    std::vector<uint8_t> q(k / 32 * Q8_0_SIZE);
    quantize_row_q8_0(x.data(), q.data(), k);
    put_u32(1); put_u32(k); put_vec(x); put_vec(q);
}

static void quant_4x8_case(int64_t k) {
    const std::vector<float> x = activations(4 * k);
    const int64_t nb = k / 32;
    // block_q8_0x4: ggml_half d[4]; int8 qs[128], rows interleaved in 8-byte chunks.
    const size_t bsz = 8 + 128;
    std::vector<uint8_t> q(nb * bsz);
    ggml_quantize_mat_q8_0_4x8(x.data(), q.data(), k);
    const std::vector<uint8_t> rows = deinterleave_4x8(q, nb, bsz, 2, 32, Q8_0_SIZE, [](const uint8_t *, int, uint8_t *) {});
    put_u32(2); put_u32(k); put_vec(x); put_vec(rows);
}

static void dot_case(int64_t k) {
    const std::vector<uint8_t> w = weights(k, 1);
    const std::vector<float> x = activations(k);
    std::vector<uint8_t> a(ggml_row_size(GGML_TYPE_Q8_0, k));
    quantize_row_q8_0(x.data(), a.data(), k);
    float s = 0;
    ggml_vec_dot_q4_0_q8_0(k, &s, 0, w.data(), 0, a.data(), 0, 1);
    put_u32(3); put_u32(k); put_vec(w); put_vec(a); put(&s, 4);
}

int main(int argc, char ** argv) {
    oracle_begin(argc, argv, "GQ40");

    repack_buft = init_backend_with_repack();

    for (int i = 0; i < 8; ++i) {
        quant_case(32 * (1 + below(96)));
        quant_4x8_case(32 * (1 + below(96)));
        dot_case(32 * (1 + below(96)));
    }
    // Qwen2-0.5B-like shapes (k x rows): attn q/o, k/v, ffn gate/up, ffn down. Every token
    // count 1..9 (gemv only, gemm only, gemm + gemv leftovers), 16 (the gemm's 16-token
    // loop) and 23 (16 + 4 + 3 leftovers).
    const std::vector<int64_t> tc = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 23 };
    mul_mat_case(896, 896, tc);
    mul_mat_case(896, 128, tc);
    mul_mat_case(896, 2560, tc);
    mul_mat_case(2560, 896, tc);
    // Random small repacked and plain shapes; plain ones reach vec_dot (1 token) and the
    // sgemm tiles (1..3-row and odd tiles).
    for (int i = 0; i < 4; ++i) {
        mul_mat_case(32 * (1 + below(64)), 8 * (1 + below(6)), { 1, 3, 4, 5, 17 });
        int64_t rows = 1 + below(40);
        if (rows % 8 == 0) rows += 1;
        mul_mat_case(32 * (1 + below(64)), rows, { 1, 2, 3, 4, 5, 6, 7, 9, 23 });
    }
    mul_mat_case(896, 151, { 1, 2, 7, 16 });  // plain, a vocabulary-like odd row count

    oracle_end();
    ggml_backend_free(backend);
    return 0;
}
