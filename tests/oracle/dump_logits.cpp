// Greedy generation with llama.cpp that dumps the full logits of every step, so pocket's
// logits can be compared step by step on the same tokens (teacher forcing), not only the
// final text. Built against the cached llama.cpp static libraries by build_dump_logits.sh.
//
// usage: dump_logits MODEL PROMPT N_PREDICT OUT.bin [THREADS]
// OUT.bin: i32 n_vocab, i32 n_prompt, i32 n_steps, i32 prompt ids[n_prompt], then per step
// i32 chosen id and f32 logits[n_vocab]. Like llama-completion: the prompt is one batch
// (logits of its last row), then one token per decode; add_special and parse_special on.
// Environment: DUMP_FA=off uses llama.cpp's non-flash attention path; DUMP_FORCE=OTHER.bin
// feeds the tokens chosen in an earlier dump instead of this run's argmax (teacher forcing),
// so two llama.cpp configurations can be compared on the same token sequence.
#include "ggml.h"
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// DUMP_TENSORS=DIR: the f32 graph tensors of the first (prompt) batch, each as raw floats
// in DIR/<name>.bin (e.g. attn_norm-0.bin), to find the first operation two engines part at.
static const char * g_tensor_dir = nullptr;
static bool g_first_batch = true;
static bool dump_tensor(ggml_tensor * t, bool ask, void *) {
    if (!g_tensor_dir || !g_first_batch) return false;
    if (ask) return t->type == GGML_TYPE_F32 && ggml_is_contiguous(t);
    std::string path = std::string(g_tensor_dir) + "/" + ggml_get_name(t) + ".bin";
    if (FILE * f = fopen(path.c_str(), "wb")) {
        fwrite(t->data, 1, ggml_nbytes(t), f);
        fclose(f);
    }
    return true;
}

static void set_tokens(llama_batch_ext * b, const llama_token * t, int n, llama_pos p0) {
    llama_batch_ext_clear(b);
    for (int i = 0; i < n; ++i) {
        const int idx = llama_batch_ext_add_token(b, 0, t[i]);
        const llama_pos pos = p0 + i;
        llama_batch_ext_set_pos(b, idx, &pos);
    }
    llama_batch_ext_set_output_logits(b, n - 1, true);
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL PROMPT N_PREDICT OUT.bin [THREADS]\n", argv[0]);
        return 2;
    }
    const std::string prompt = argv[2];
    const int n_predict = atoi(argv[3]);
    const int threads = argc > 5 ? atoi(argv[5]) : 2;
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_prompt = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), NULL, 0, true, true);
    std::vector<llama_token> ids(n_prompt);
    llama_tokenize(vocab, prompt.c_str(), prompt.size(), ids.data(), ids.size(), true, true);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 4096;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    // DUMP_FA=off: llama.cpp's non-flash attention path (to measure its own spread).
    if (getenv("DUMP_FA") && std::string(getenv("DUMP_FA")) == "off") {
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    g_tensor_dir = getenv("DUMP_TENSORS");
    if (g_tensor_dir) {
        cp.cb_eval = dump_tensor;
        cp.cb_eval_user_data = nullptr;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }
    FILE * f = fopen(argv[4], "wb");
    if (!f) { fprintf(stderr, "cannot write %s\n", argv[4]); return 1; }
    fwrite(&n_vocab, 4, 1, f);
    fwrite(&n_prompt, 4, 1, f);
    fwrite(&n_predict, 4, 1, f);
    fwrite(ids.data(), 4, n_prompt, f);
    std::vector<llama_token> forced;
    if (const char * fp = getenv("DUMP_FORCE")) {
        FILE * ff = fopen(fp, "rb");
        if (!ff) { fprintf(stderr, "cannot read %s\n", fp); return 1; }
        int h[3];
        if (fread(h, 4, 3, ff) != 3 || h[1] != n_prompt) { fprintf(stderr, "bad DUMP_FORCE file\n"); return 1; }
        fseek(ff, 4L * h[1], SEEK_CUR);
        for (int i = 0; i < h[2]; ++i) {
            llama_token t;
            if (fread(&t, 4, 1, ff) != 1) break;
            forced.push_back(t);
            fseek(ff, 4L * h[0], SEEK_CUR);
        }
        fclose(ff);
    }
    llama_batch_ext * batch = llama_batch_ext_init(ctx);
    set_tokens(batch, ids.data(), n_prompt, 0);
    int n_pos = 0, n_tok = n_prompt;
    for (int step = 0; step < n_predict; ++step) {
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) { fprintf(stderr, "eval failed\n"); return 1; }
        n_pos += n_tok;
        g_first_batch = false;
        const float * lg = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int i = 1; i < n_vocab; ++i) if (lg[i] > lg[best]) best = i;
        if (step < (int) forced.size()) best = forced[step];
        fwrite(&best, 4, 1, f);
        fwrite(lg, 4, n_vocab, f);
        set_tokens(batch, &best, 1, n_pos);
        n_tok = 1;
    }
    fclose(f);
    llama_model_free(model);
    return 0;
}
