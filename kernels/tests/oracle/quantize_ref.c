// Oracle for kernels/tests/formats_vs_llama_cpp_ref.rs: quantizes a little-endian f32
// file with llama.cpp's own reference quantizers (ggml-quants.c, from libggml-base.a).
//
//     quantize_ref TYPE IN.f32 OUT.bin      TYPE: q4_0 q4_1 q5_0 q5_1 q8_0 q8_1
//                                                 q4_K q5_K q6_K q8_K
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Declared in ggml-quants.h (not an installed header); block pointers taken as void*.
void quantize_row_q4_0_ref(const float *, void *, int64_t);
void quantize_row_q4_1_ref(const float *, void *, int64_t);
void quantize_row_q5_0_ref(const float *, void *, int64_t);
void quantize_row_q5_1_ref(const float *, void *, int64_t);
void quantize_row_q8_0_ref(const float *, void *, int64_t);
void quantize_row_q8_1_ref(const float *, void *, int64_t);
void quantize_row_q4_K_ref(const float *, void *, int64_t);
void quantize_row_q5_K_ref(const float *, void *, int64_t);
void quantize_row_q6_K_ref(const float *, void *, int64_t);
void quantize_row_q8_K_ref(const float *, void *, int64_t);

struct kind { const char * name; void (*fn)(const float *, void *, int64_t); int64_t block, size; };

static const struct kind KINDS[] = {
    {"q4_0", quantize_row_q4_0_ref, 32, 18},   {"q4_1", quantize_row_q4_1_ref, 32, 20},
    {"q5_0", quantize_row_q5_0_ref, 32, 22},   {"q5_1", quantize_row_q5_1_ref, 32, 24},
    {"q8_0", quantize_row_q8_0_ref, 32, 34},   {"q8_1", quantize_row_q8_1_ref, 32, 36},
    {"q4_K", quantize_row_q4_K_ref, 256, 144}, {"q5_K", quantize_row_q5_K_ref, 256, 176},
    {"q6_K", quantize_row_q6_K_ref, 256, 210}, {"q8_K", quantize_row_q8_K_ref, 256, 292},
};

int main(int argc, char ** argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s TYPE IN.f32 OUT.bin\n", argv[0]); return 2; }
    const struct kind * k = NULL;
    for (size_t i = 0; i < sizeof(KINDS) / sizeof(KINDS[0]); i++) {
        if (!strcmp(argv[1], KINDS[i].name)) k = &KINDS[i];
    }
    if (!k) { fprintf(stderr, "unknown type %s\n", argv[1]); return 2; }
    FILE * in = fopen(argv[2], "rb");
    if (!in) { perror(argv[2]); return 1; }
    fseek(in, 0, SEEK_END);
    int64_t n = ftell(in) / 4;
    fseek(in, 0, SEEK_SET);
    if (n % k->block) { fprintf(stderr, "%lld elements: not whole blocks\n", (long long) n); return 1; }
    float * x = malloc(n * 4 + 4);
    uint8_t * y = calloc(n / k->block * k->size + 1, 1); // zeroed: q8_K leaves bsums of zero blocks unset
    if (fread(x, 4, n, in) != (size_t) n) { perror("read"); return 1; }
    fclose(in);
    k->fn(x, y, n);
    FILE * out = fopen(argv[3], "wb");
    if (!out || fwrite(y, 1, n / k->block * k->size, out) != (size_t) (n / k->block * k->size)) { perror(argv[3]); return 1; }
    fclose(out);
    return 0;
}
