// ggml reference timings for the shapes of ../gemv_bandwidth.rs: ggml_mul_mat of a
// quantized weight (N x K) by an f32 activation (K x T) on the CPU backend, plain (weights
// in an ordinary buffer: llamafile sgemm / vec_dot) and repacked (the CPU_REPACK extra
// buffer type: q4_0_8x8 on AVX2; other types have no x86 repack). Times include ggml's
// own activation quantization. Not built by cargo. Build against a llama.cpp build dir:
//
//   L=~/.cache/pocket/llama.cpp B=~/.cache/pocket/llama.cpp-build
//   gcc -O2 -I$L/ggml/include mul_mat_bench.c -o /tmp/mul_mat_bench \
//     $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \
//     -lstdc++ -lm -lpthread -fopenmp
//   OMP_NUM_THREADS=1 /tmp/mul_mat_bench 1 gemv   # threads; any 2nd arg adds the T=1 shapes
#include "ggml.h"
#include "ggml-cpu.h"
#include "ggml-backend.h"
#include "ggml-alloc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void run(enum ggml_type ty, int N, int K, int T, int nt, int repack) {
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, nt);
    ggml_backend_dev_t dev = ggml_backend_get_device(be);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    ggml_backend_buffer_type_t wbuft = ggml_backend_get_default_buffer_type(be);
    if (repack) {
        typedef ggml_backend_buffer_type_t * (*get_extra_t)(ggml_backend_dev_t);
        get_extra_t ge = (get_extra_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
        ggml_backend_buffer_type_t * ex = ge(dev);
        if (ex && ex[0]) wbuft = ex[0];
    }
    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * cw = ggml_init(ip);
    struct ggml_context * cx = ggml_init(ip);
    struct ggml_tensor * W = ggml_new_tensor_2d(cw, ty, K, N);
    struct ggml_tensor * X = ggml_new_tensor_2d(cx, GGML_TYPE_F32, K, T);
    struct ggml_tensor * Y = ggml_mul_mat(cx, W, X);
    ggml_backend_buffer_t bw = ggml_backend_alloc_ctx_tensors_from_buft(cw, wbuft);
    ggml_backend_buffer_t bx = ggml_backend_alloc_ctx_tensors(cx, be);
    float * f = malloc(sizeof(float) * (size_t)N * K);
    for (size_t i = 0; i < (size_t)N * K; i++) f[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    size_t nb = ggml_row_size(ty, K) * N;
    void * q = malloc(nb);
    ggml_quantize_chunk(ty, f, q, 0, N, K, NULL);
    ggml_backend_tensor_set(W, q, 0, nb);
    float * x = malloc(sizeof(float) * (size_t)K * T);
    for (size_t i = 0; i < (size_t)K * T; i++) x[i] = (float)((i * 40503u) % 997) / 997.0f - 0.5f;
    ggml_backend_tensor_set(X, x, 0, sizeof(float) * (size_t)K * T);
    struct ggml_cgraph * gf = ggml_new_graph(cx);
    ggml_build_forward_expand(gf, Y);
    ggml_backend_graph_compute(be, gf);
    double best = 1e9, t0 = now();
    int n = 0;
    while (n < 3 || now() - t0 < 0.5) {
        double t = now();
        ggml_backend_graph_compute(be, gf);
        double dt = now() - t;
        if (dt < best) best = dt;
        n++;
    }
    double ops = 2.0 * N * K * T;
    printf("ggml %-5s %s %5dx%5d x %4d tok %dT: %9.3f ms %7.1f GOP/s %7.2f GB/s (weights %.1f MB)\n",
        ggml_type_name(ty), repack ? "repack" : "plain ", N, K, T, nt, best * 1e3, ops / best / 1e9, nb / best / 1e9, nb / 1e6);
    ggml_backend_buffer_free(bw); ggml_backend_buffer_free(bx); ggml_free(cw); ggml_free(cx); ggml_backend_free(be);
    free(f); free(q); free(x);
}

int main(int argc, char ** argv) {
    setvbuf(stdout, NULL, _IONBF, 0); int nt = argc > 1 ? atoi(argv[1]) : 1;
    enum ggml_type tys[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0 };
    for (int i = 0; i < 3; i++) {
        for (int rp = 0; rp < (tys[i] == GGML_TYPE_Q4_0 ? 2 : 1); rp++) {
            run(tys[i], 2560, 896, 128, nt, rp);
            run(tys[i], 4864, 896, 512, nt, rp);
            if (argc > 2) { run(tys[i], 2560, 896, 1, nt, rp); run(tys[i], 86800 * 18 / (int)ggml_type_size(tys[i]) / 8 * 8, 4096, 1, nt, rp); }
        }
    }
    return 0;
}
