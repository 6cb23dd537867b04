"""Turns a Qwen3 GGUF into an MNN-LLM model directory, run with the private venv's python
(`bash compare/provision-mnn.sh MODEL.gguf` calls it; `pocket compare --engines mnn` too,
through the same venv, when a model has no MNN directory yet).

    python mnn_export.py --gguf MODEL.gguf --out DIR

Steps: the GGUF's tensors dequantized to f32 (the `gguf` package's reference
dequantization) into a Hugging Face checkpoint (config.json, model.safetensors and a
byte-level BPE tokenizer.json made from the GGUF's own vocabulary and merges), then MNN's
exporter (`llmexport`, the release before the `mnn` wheel's) to MNN's 4-bit format: blocks of
64, asymmetric (a scale and a zero point per block), the head tied to the embedding.

A GGUF quantized MNN's way (pocket synth's MNN-Pocket Q4_1: each 64-group written as two
Q4_1 32-blocks with the same (d, m)) comes back with the very same codes: a group's
dequantized minimum is m and its range 15 d, so MNN's min/max quantization of the f32
values finds d, m and every code again. Both are checked: Q4_1 not in 64-groups, or a code
that the exporter's own quantization function does not give back, stops the export. Any other GGUF is re-quantized (not the same
weights as the other engines), which is why pocket runs MNN only on the MNN-Pocket shapes.

The output directory gets config.json (MNN-LLM's runtime options), llm_config.json,
llm.mnn, llm.mnn.weight and tokenizer.txt; DIR/EXPORT_INFO is written last.
"""

import argparse
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# pocket's compare/mnn_bench.py reads the same config keys.
QUANT_BIT = 4
QUANT_BLOCK = 64


def die(msg):
    print(f"mnn_export: {msg}", file=sys.stderr)
    sys.exit(1)


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode("utf-8")
    return v.tolist()[0]


def strings(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def hf_name(name):
    """The Hugging Face Qwen3 name of a GGUF tensor (None: not a weight of the model)."""
    top = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    if name in top:
        return top[name]
    parts = name.split(".")
    if len(parts) != 4 or parts[0] != "blk":
        return None
    per_layer = {
        "attn_norm": "input_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
        "ffn_norm": "post_attention_layernorm",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    if parts[2] not in per_layer:
        return None
    return f"model.layers.{parts[1]}.{per_layer[parts[2]]}.{parts[3]}"


def check_groups_of_64(t):
    """Refuses Q4_1 that is not in MNN's 64-groups (pairs of 32-blocks with the same d and
    m): MNN would re-quantize it, and run other weights than the other engines."""
    blocks = np.asarray(t.data).reshape(-1, 20)
    heads = blocks[:, 0:4].copy().view(np.uint32).reshape(-1)
    if heads.size % 2 or not np.array_equal(heads[0::2], heads[1::2]):
        die(
            f"{t.name}: Q4_1 not in 64-groups (pairs of 32-blocks sharing d, m); MNN's "
            f"4-bit block-64 export would change its weights"
        )


@functools.cache
def llmexport_dir():
    """The llmexport package's directory (looked up once: with the directory on sys.path,
    as check_same_codes puts it, `llmexport` would name its llmexport.py)."""
    spec = importlib.util.find_spec("llmexport")
    if spec is None or not spec.submodule_search_locations:
        die("the llmexport package is not installed in this python")
    return list(spec.submodule_search_locations)[0]


def check_same_codes(t, w):
    """Quantizes `w` (a Q4_1 tensor, dequantized) with the exporter's own function, as the
    export will, and refuses the model unless every 4-bit code is the GGUF's: the proof that
    MNN runs the same weights as the other engines."""
    import torch

    if llmexport_dir() not in sys.path:
        sys.path.insert(0, llmexport_dir())
    from utils.torch_utils import quant

    q, _ = quant(torch.from_numpy(w), QUANT_BIT, QUANT_BLOCK, False, False, False)
    q = q.numpy().reshape(-1)
    ours = np.stack([q >> 4, q & 15], axis=1).reshape(-1)  # two codes a byte, high first
    qs = np.asarray(t.data).reshape(-1, 20)[:, 4:]
    theirs = np.concatenate([qs & 15, qs >> 4], axis=1).reshape(-1)  # Q4_1: low nibbles first
    differ = int((ours != theirs).sum())
    if differ:
        die(f"{t.name}: {differ} of {theirs.size} codes differ after MNN's quantization")


def checkpoint(gguf_path, hf_dir):
    """Writes the GGUF as a Hugging Face Qwen3 checkpoint into hf_dir."""
    from gguf import GGUFReader, GGMLQuantizationType
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    reader = GGUFReader(gguf_path)
    arch = field(reader, "general.architecture")
    if arch != "qwen3":
        die(f"{gguf_path}: architecture {arch!r}; only qwen3 is exported")
    p = f"{arch}."
    n_embd = field(reader, p + "embedding_length")
    n_head = field(reader, p + "attention.head_count")
    tensors = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            die(f"{gguf_path}: unexpected tensor {t.name}")
        if t.tensor_type == GGMLQuantizationType.Q4_1:
            check_groups_of_64(t)
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(d) for d in reversed(t.shape.tolist())]
        tensors[name] = np.ascontiguousarray(w.reshape(shape))
        if t.tensor_type == GGMLQuantizationType.Q4_1:
            check_same_codes(t, tensors[name])
    tied = "lm_head.weight" not in tensors
    head_dim = field(reader, p + "attention.key_length", n_embd // n_head)
    vocab = tensors["model.embed_tokens.weight"].shape[0]
    eos = field(reader, "tokenizer.ggml.eos_token_id", 0)
    bos = field(reader, "tokenizer.ggml.bos_token_id", eos)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": n_embd,
        "intermediate_size": field(reader, p + "feed_forward_length"),
        "num_hidden_layers": field(reader, p + "block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": field(reader, p + "attention.head_count_kv", n_head),
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": field(reader, p + "context_length", 32768),
        "rope_theta": field(reader, p + "rope.freq_base", 1e6),
        "rms_norm_eps": field(reader, p + "attention.layer_norm_rms_epsilon", 1e-6),
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    os.makedirs(hf_dir, exist_ok=True)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(tensors, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})
    tokenizer(reader, hf_dir, eos)
    return config


def tokenizer(reader, hf_dir, eos):
    """A byte-level BPE tokenizer.json from the GGUF's gpt2 vocabulary and merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

    model = field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        die(f"tokenizer model {model!r}; only gpt2 (byte-level BPE) is exported")
    tokens = strings(reader, "tokenizer.ggml.tokens")
    merges = strings(reader, "tokenizer.ggml.merges") or []
    types = reader.fields["tokenizer.ggml.token_type"]
    types = [int(types.parts[i][0]) for i in types.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # Control (3) and user-defined (4) tokens are special, as llama.cpp treats them.
    specials = [AddedToken(tokens[i], special=True) for i, ty in enumerate(types) if ty in (3, 4)]
    tok.add_special_tokens(specials)
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": tokens[eos],
                "model_max_length": 32768,
            },
            f,
            indent=2,
        )


def export(hf_dir, out_dir):
    """MNN's exporter on hf_dir, 4-bit blocks of 64, asymmetric, into out_dir."""
    script = os.path.join(llmexport_dir(), "llmexport.py")
    cmd = [
        sys.executable,
        script,
        "--path", hf_dir,
        "--export", "mnn",
        "--quant_bit", str(QUANT_BIT),
        "--quant_block", str(QUANT_BLOCK),
        "--dst_path", out_dir,
    ]
    print("mnn_export: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=hf_dir)
    for f in ["config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight"]:
        if not os.path.isfile(os.path.join(out_dir, f)):
            die(f"the exporter wrote no {f} into {out_dir}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, help="the Qwen3 GGUF to export")
    ap.add_argument("--out", required=True, help="the MNN model directory to write")
    args = ap.parse_args()
    if not os.path.isfile(args.gguf):
        die(f"{args.gguf}: no such file")
    out = os.path.abspath(args.out)
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="pocket-mnn-hf-") as hf_dir:
        config = checkpoint(args.gguf, hf_dir)
        export(hf_dir, partial)
    with open(os.path.join(partial, "EXPORT_INFO"), "w") as f:
        import MNN

        shape = ", ".join(
            f"{k} {config[k]}"
            for k in [
                "num_hidden_layers",
                "hidden_size",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
            ]
        )
        f.write(
            f"{os.path.basename(args.gguf)} exported by llmexport to {QUANT_BIT}-bit, "
            f"block {QUANT_BLOCK}, asymmetric, for MNN {MNN.version()}; {shape}\n"
        )
    shutil.rmtree(out, ignore_errors=True)
    os.rename(partial, out)
    print(f"mnn_export: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
