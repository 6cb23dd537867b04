// Shared by the ggml_*_oracle.cpp oracles (a header, not a .cpp: provision-llama.sh builds
// every tests/oracle/*.cpp into a binary): the output file, the seeded RNG and its
// random-data helpers, and the "PROG SEED OUT.bin" command line.
#pragma once

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static FILE * out_f;
static inline void put(const void * p, size_t n) {
    if (n && fwrite(p, 1, n, out_f) != n) { fprintf(stderr, "write failed\n"); exit(1); }
}
static inline void put_u32(uint32_t v) { put(&v, 4); }
static inline void put_f32(float v) { put(&v, 4); }
template <class T> static inline void put_vec(const std::vector<T> & v) { put(v.data(), v.size() * sizeof(T)); }

static std::mt19937_64 rng;
static inline float unif(float a, float b) { return std::uniform_real_distribution<float>(a, b)(rng); }
static inline uint32_t below(uint32_t n) { return (uint32_t)(rng() % n); }
// A fresh distribution per value (unlike normal_with_outliers, which keeps one).
static inline float gauss() { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }

static inline uint16_t h(float f) { return ggml_fp32_to_fp16(f); }
static inline void put_h(std::vector<uint8_t> & v, float f) {
    const uint16_t b = h(f);
    v.push_back(b & 0xff);
    v.push_back(b >> 8);
}
static inline void rand_bytes(std::vector<uint8_t> & v, size_t n) {
    for (size_t i = 0; i < n; ++i) v.push_back((uint8_t)rng());
}

// n values ~N(0,1) (one distribution for all of them), 1% outliers x20.
static inline std::vector<float> normal_with_outliers(size_t n) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto & v : x) {
        v = nd(rng);
        if (below(100) == 0) v *= 20.0f;
    }
    return x;
}

// Puts +m and -m (m = 1.5x the largest magnitude) at two random places of x[b, b + len),
// unless both draws hit the same place.
static inline void tie_extremes(std::vector<float> & x, size_t b, size_t len) {
    float m = 0;
    for (size_t i = b; i < b + len; ++i) m = std::max(m, std::fabs(x[i]));
    m *= 1.5f;
    const size_t i = b + below(len), j = b + below(len);
    if (i == j) return;
    x[i] = below(2) ? m : -m;
    x[j] = -x[i];
}

// "PROG SEED OUT.bin": seeds the RNG, opens OUT.bin and writes the 4-byte magic and
// version 1 (exits 2 on a wrong command line, 1 when the file cannot be written).
static inline void oracle_begin(int argc, char ** argv, const char * magic) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SEED OUT.bin\n", argv[0]);
        exit(2);
    }
    rng.seed(strtoull(argv[1], nullptr, 10));
    out_f = fopen(argv[2], "wb");
    if (!out_f) { fprintf(stderr, "cannot write %s\n", argv[2]); exit(1); }
    put(magic, 4);
    put_u32(1);
}

// The CPU backend the graph oracles compute on.
[[maybe_unused]] static ggml_backend_t backend;

// A context for `n_tensors` tensors and a graph, without data (allocated in a backend buffer).
static inline ggml_context * new_ctx(int n_tensors) {
    ggml_init_params ip = { ggml_tensor_overhead() * n_tensors + ggml_graph_overhead(), nullptr, true };
    return ggml_init(ip);
}

// Computes gf on `backend` (exits 1 on failure).
static inline void compute_graph(ggml_cgraph * gf) {
    if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute\n"); exit(1); }
}

// Starts `backend` (which also runs ggml_cpu_init) at ORACLE_THREADS threads (default 1:
// chunks and sgemm tiles split outputs, never one output's sum, which other thread counts
// let one check) and returns its CPU_REPACK buffer type (exits 1 when the build has none).
static inline ggml_backend_buffer_type_t init_backend_with_repack() {
    backend = ggml_backend_cpu_init();
    const char * nt = getenv("ORACLE_THREADS");
    ggml_backend_cpu_set_n_threads(backend, nt ? atoi(nt) : 1);
    ggml_backend_buffer_type_t repack = nullptr;
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (get_extra) {
        for (ggml_backend_buffer_type_t * b = get_extra(ggml_backend_reg_dev_get(reg, 0)); b && *b; ++b) {
            if (std::string(ggml_backend_buft_name(*b)) == "CPU_REPACK") repack = *b;
        }
    }
    if (!repack) { fprintf(stderr, "no CPU_REPACK buffer type in this build\n"); exit(1); }
    return repack;
}

// A 2-D weight (`k` x `rows` of `type`) holding `w` in a buffer of its own: of type `repack`
// (a CPU_REPACK buffer type; exits 1 when it did not repack the weight), or, when that is
// null, the plain CPU buffer.
struct weight_tensor {
    ggml_context * ctx;
    ggml_tensor * t;
    ggml_backend_buffer_t buf;
};
static inline weight_tensor new_weight(ggml_type type, int64_t k, int64_t rows, const std::vector<uint8_t> & w,
                                       ggml_backend_buffer_type_t repack) {
    weight_tensor W;
    W.ctx = new_ctx(1);
    W.t = ggml_new_tensor_2d(W.ctx, type, k, rows);
    W.buf = ggml_backend_alloc_ctx_tensors_from_buft(W.ctx, repack ? repack : ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(W.t, w.data(), 0, w.size());
    if (repack && W.t->extra == nullptr) { fprintf(stderr, "%s weight was not repacked\n", ggml_type_name(type)); exit(1); }
    return W;
}
static inline void free_weight(weight_tensor & W) {
    ggml_backend_buffer_free(W.buf);
    ggml_free(W.ctx);
}

// The f32 values of Y, computed on `backend` by the graph of Y in `cctx`: cctx's tensors
// are allocated, `set_inputs` fills the inputs, and the buffer and cctx are freed after.
template <class SetInputs>
static inline std::vector<float> compute_f32(ggml_context * cctx, ggml_tensor * Y, SetInputs set_inputs) {
    ggml_cgraph * gf = ggml_new_graph(cctx);
    ggml_build_forward_expand(gf, Y);
    ggml_backend_buffer_t cbuf = ggml_backend_alloc_ctx_tensors(cctx, backend);
    set_inputs();
    compute_graph(gf);
    std::vector<float> y(ggml_nelements(Y));
    ggml_backend_tensor_get(Y, y.data(), 0, y.size() * 4);
    ggml_backend_buffer_free(cbuf);
    ggml_free(cctx);
    return y;
}

// ggml_mul_mat(W, X) computed on `backend` for X = `tokens` rows of `x`: returns the
// `tokens` x rows outputs.
static inline std::vector<float> mul_mat_graph(ggml_tensor * W, const std::vector<float> & x, int64_t tokens) {
    ggml_context * cctx = new_ctx(4);
    ggml_tensor * X = ggml_new_tensor_2d(cctx, GGML_TYPE_F32, W->ne[0], tokens);
    ggml_tensor * Y = ggml_mul_mat(cctx, W, X);
    return compute_f32(cctx, Y, [&] { ggml_backend_tensor_set(X, x.data(), 0, x.size() * 4); });
}

// ggml's 4-row interleaved q8 activations (`q`: block_q8_0x4 or block_q8_Kx4, `bsz` bytes
// each: the 4 rows' scales of `d_size` bytes, then their `n_q` quants per row in 8-byte
// chunks, row after row) as 4 plain rows of `nb` blocks of `row_block` bytes: per block
// the scale, the quants, and what `rest` writes after them (it gets the block, the row
// and the row's block).
template <class Rest>
static inline std::vector<uint8_t> deinterleave_4x8(const std::vector<uint8_t> & q, int64_t nb, size_t bsz,
                                                    size_t d_size, int n_q, size_t row_block, Rest rest) {
    std::vector<uint8_t> rows(4 * nb * row_block);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t * blk = q.data() + b * bsz;
        for (int r = 0; r < 4; ++r) {
            uint8_t * o = rows.data() + (r * nb + b) * row_block;
            memcpy(o, blk + d_size * r, d_size);
            for (int e = 0; e < n_q; ++e) o[d_size + e] = blk[4 * d_size + ((e / 8) * 4 + r) * 8 + e % 8];
            rest(blk, r, o);
        }
    }
    return rows;
}

// The END record; closes the file.
static inline void oracle_end() {
    put_u32(0);
    fclose(out_f);
}
