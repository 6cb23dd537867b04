// Oracle for pocket's ggml_exact tiled K-quant matmul twins (kernels/src/ggml_exact/tiled.rs):
// random non-repacked Q6_K/Q5_K/Q4_K/Q3_K/Q2_K/IQ4_XS weights and f32 activations pushed through a real ggml graph
// (ggml_mul_mat, plain CPU context, so src0->extra == NULL and
// ggml_compute_forward_mul_mat takes ggml_compute_forward_mul_mat_tiled when
// src1->ne[1] >= 8), computed at several thread counts; inputs and every output written to
// a file that kernels/tests/ggml_exact_tiled.rs parses and recomputes bit for bit.
//
// usage: ggml_tiled_oracle SEED OUT.bin
//
// With GGML_CPU_TILED_MM_FORCE=1 in the environment (read once by ggml) the tiled path is
// taken for every batch size; the oracle then writes 1..7-token cases instead (the record
// says which mode ran). With GGML_CPU_TILED_MM=0 the tiled path is off altogether.
//
// Only public headers (ggml.h, ggml-cpu.h), built like the other oracles:
//   g++ -O2 -std=c++17 -I$S/include -I$S/ggml/include ggml_tiled_oracle.cpp -o OUT \
//       libllama.a libggml.a libggml-cpu.a libggml-base.a -fopenmp -lpthread
//
// File: "GTLO", u32 version=1, u32 forced (GGML_CPU_TILED_MM_FORCE=1 seen), then records,
// each starting with a u32 kind:
//   1 MUL_MAT: u32 type; u32 k; u32 rows; u32 tokens; weight bytes (rows * row_size);
//              f32 x[tokens][k]; u32 n_runs; n_runs x { u32 threads; f32 y[tokens][rows] }
//   0 END
#include "ggml.h"
#include "ggml-cpu.h"

#include "oracle_common.h"

#include <cstring>
#include <vector>

static const int QK_K = 256;

// Activations ~N(0,1), 1% outliers x20, some 256-blocks with +m and -m at their largest
// magnitude (as in ggml_kquant_oracle.cpp), and now and then an all-zero block (d = 0).
static std::vector<float> activations(size_t n) {
    std::vector<float> x = normal_with_outliers(n);
    for (size_t b = 0; b + QK_K <= n; b += QK_K) {
        const uint32_t r = below(40);
        if (r == 0) {
            std::fill(x.begin() + b, x.begin() + b + QK_K, 0.0f);
        } else if (r < 14) {
            tie_extremes(x, b, QK_K);
        }
    }
    return x;
}

// Random valid weight blocks (finite fp16 scales, any code/scale bytes).
static std::vector<uint8_t> weights(ggml_type t, int64_t k, int64_t rows) {
    std::vector<uint8_t> v;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < k / QK_K; ++b) {
            switch (t) {
                case GGML_TYPE_Q4_K:  // d, dmin, scales[12], qs[128]
                    put_h(v, unif(1e-4f, 3e-3f));
                    put_h(v, unif(1e-4f, 3e-3f));
                    rand_bytes(v, 12 + 128);
                    break;
                case GGML_TYPE_Q5_K:  // d, dmin, scales[12], qh[32], qs[128]
                    put_h(v, unif(1e-4f, 3e-3f));
                    put_h(v, unif(1e-4f, 3e-3f));
                    rand_bytes(v, 12 + 32 + 128);
                    break;
                case GGML_TYPE_Q6_K:  // ql[128], qh[64], scales[16] (any int8), d
                    rand_bytes(v, 128 + 64 + 16);
                    put_h(v, unif(1e-5f, 2e-4f));
                    break;
                case GGML_TYPE_Q3_K:  // hmask[32], qs[64], scales[12], d
                    rand_bytes(v, 32 + 64 + 12);
                    put_h(v, unif(1e-4f, 3e-3f));
                    break;
                case GGML_TYPE_Q2_K:  // scales[16], qs[64], d, dmin
                    rand_bytes(v, 16 + 64);
                    put_h(v, unif(1e-4f, 3e-3f));
                    put_h(v, unif(1e-4f, 3e-3f));
                    break;
                case GGML_TYPE_IQ4_XS:  // d, scales_h, scales_l[4], qs[128]
                    put_h(v, unif(1e-5f, 2e-4f));
                    rand_bytes(v, 2 + 4 + 128);
                    break;
                default: fprintf(stderr, "type\n"); exit(1);
            }
        }
    }
    if (v.size() != (size_t)rows * ggml_row_size(t, k)) { fprintf(stderr, "row size\n"); exit(1); }
    return v;
}

static void mul_mat_case(ggml_type t, int64_t k, int64_t rows, int64_t tokens) {
    const std::vector<uint8_t> w = weights(t, k, rows);
    const std::vector<float> x = activations(k * tokens);

    put_u32(1);
    put_u32(t); put_u32(k); put_u32(rows); put_u32(tokens);
    put_vec(w); put_vec(x);

    const int threads[] = { 1, 2, 3 };
    put_u32(3);
    for (int nt : threads) {
        // no_alloc = false: tensor data and the graph's work buffer live in this context.
        const size_t mem = w.size() + x.size() * 4 + (size_t)rows * tokens * 4
                         + ggml_row_size(GGML_TYPE_Q8_K, k) * tokens  // src1 as q8_K
                         + (size_t)(nt + 1) * (512 * 1024) + 64         // tiled workspaces
                         + 8 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20);
        ggml_init_params ip = { mem, nullptr, false };
        ggml_context * ctx = ggml_init(ip);
        ggml_tensor * W = ggml_new_tensor_2d(ctx, t, k, rows);
        memcpy(W->data, w.data(), w.size());
        ggml_tensor * X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, tokens);
        memcpy(X->data, x.data(), x.size() * 4);
        ggml_tensor * Y = ggml_mul_mat(ctx, W, X);
        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, Y);
        if (W->extra != nullptr) { fprintf(stderr, "weight unexpectedly repacked\n"); exit(1); }
        if (ggml_graph_compute_with_ctx(ctx, gf, nt) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute\n"); exit(1); }
        std::vector<float> y(rows * tokens);
        memcpy(y.data(), Y->data, y.size() * 4);
        put_u32(nt);
        put_vec(y);
        ggml_free(ctx);
    }
}

int main(int argc, char ** argv) {
    oracle_begin(argc, argv, "GTLO");
    const char * fe = getenv("GGML_CPU_TILED_MM_FORCE");
    const bool forced = fe != nullptr && atoi(fe) == 1;  // ggml_tiled_matmul_forced()
    put_u32(forced);

    ggml_cpu_init();

    const ggml_type types[] = { GGML_TYPE_Q6_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                GGML_TYPE_Q3_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ4_XS };
    if (forced) {
        // Tiled kernel below its batch floor: every token count 1..7.
        for (int64_t tokens = 1; tokens <= 7; ++tokens) {
            for (ggml_type t : types) {
                mul_mat_case(t, 256 * (1 + below(8)), 1 + below(40), tokens);
            }
        }
        mul_mat_case(GGML_TYPE_Q6_K, 2048, 640, 3);
    } else {
        // gemma-3-270m's Q6_K ffn_down (k = 2048 -> 640 rows) at prompt lengths around and
        // past the batch floor; 64 tokens at 640 rows reach the wide (per-slab) path.
        for (int64_t tokens : { 8, 9, 11, 16, 23, 64 }) {
            mul_mat_case(GGML_TYPE_Q6_K, 2048, 640, tokens);
        }
        // Random shapes: ragged row counts (not multiples of 16), > 256 rows (several
        // macrotile windows), long batches (> 256 tokens: several src1 windows).
        for (int i = 0; i < 4; ++i) {
            for (ggml_type t : types) {
                mul_mat_case(t, 256 * (1 + below(12)), 1 + below(300), 8 + below(40));
            }
        }
        mul_mat_case(GGML_TYPE_Q4_K, 2048, 640, 11);
        mul_mat_case(GGML_TYPE_Q5_K, 1024, 48, 20);
        mul_mat_case(GGML_TYPE_Q6_K, 256, 40, 300);
        mul_mat_case(GGML_TYPE_Q6_K, 3072, 17, 8);  // k_extent < k on the narrow path
        // 7 tokens: below the batch floor, vec_dot (the test checks it is not the tiled twin's
        // job: these must match vec_dot_q6_K_q8_K instead).
        mul_mat_case(GGML_TYPE_Q6_K, 2048, 640, 7);
    }

    oracle_end();
    return 0;
}
