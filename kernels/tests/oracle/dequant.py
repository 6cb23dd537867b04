#!/usr/bin/env python3
"""Oracle for kernels/tests/formats_vs_gguf_py.rs: the `gguf` package's (de)quantizers.

    dequant.py OUT_DIR CACHE_DIR

Writes cases into OUT_DIR and lists them in OUT_DIR/manifest.txt, one per line:

    dequant TYPE LABEL INPUT.bin EXPECTED.f32   bytes of TYPE -> f32 (little-endian)
    quantize TYPE LABEL INPUT.f32 EXPECTED.bin  f32 -> bytes of TYPE

Cases: (a) random blocks of every type gguf can dequantize and pocket reads, with the
fp16 scale fields forced finite (random bits elsewhere); (b) real tensors (first rows of
a few per type) from the two fixture models in CACHE_DIR/models; (c) quantization of
random data for the types gguf can quantize.
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

OUT = Path(sys.argv[1])
CACHE = Path(sys.argv[2])
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]

# Byte offsets of the fp16 scale fields in each block (ggml-common.h); random bytes there
# could be inf/NaN, whose products differ only in NaN payloads, so they are made finite.
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
    T.F16: [], T.BF16: [],  # plain values: NaN and inf included on purpose
}
QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]

rng = np.random.default_rng(20260)
warnings.filterwarnings("ignore", "overflow encountered in cast")  # f16 overflow is tested on purpose
manifest = []


def emit_dequant(qtype, label, raw):
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    expected = dequantize(raw, qtype).astype(np.float32, copy=False).reshape(-1)
    stem = f"{len(manifest):03d}"
    (OUT / f"{stem}.bin").write_bytes(raw.tobytes())
    (OUT / f"{stem}.f32").write_bytes(expected.astype("<f4").tobytes())
    manifest.append(f"dequant {qtype.name} {label} {stem}.bin {stem}.f32")


def emit_quant(qtype, label, x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    expected = np.asarray(quantize(x, qtype)).view(np.uint8).reshape(-1)
    stem = f"{len(manifest):03d}"
    (OUT / f"{stem}.in.f32").write_bytes(x.astype("<f4").tobytes())
    (OUT / f"{stem}.bin").write_bytes(expected.tobytes())
    manifest.append(f"quantize {qtype.name} {label} {stem}.in.f32 {stem}.bin")


def finite_fp16(n):
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    exp_all_ones = (bits & 0x7C00) == 0x7C00
    bits[exp_all_ones] &= np.uint16(0xBFFF)  # clear one exponent bit: finite
    return bits


# (a) random blocks
for qtype, offsets in FP16_FIELDS.items():
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = 4096 if block == 1 else max(64, 8192 // block)
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in offsets:
        raw[:, off:off + 2] = finite_fp16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    emit_dequant(qtype, f"random-{n_blocks}-blocks", raw)

# (b) real tensors: per model and type, the first rows of up to three tensors
for model in MODELS:
    reader = gguf.GGUFReader(CACHE / "models" / model)
    taken = {}
    for t in reader.tensors:
        if taken.get(t.tensor_type, 0) >= 3:
            continue
        taken[t.tensor_type] = taken.get(t.tensor_type, 0) + 1
        data = np.asarray(t.data)
        rows = data if data.ndim == 1 else data[:256]
        raw = rows.view(np.uint8)
        emit_dequant(t.tensor_type, f"{model}:{t.name}", raw)

# (c) quantization of random data: normal, spread over magnitudes, some all-zero blocks
for qtype in QUANTIZABLE:
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = 4096 if block == 1 else 256
    x = rng.standard_normal((n_blocks, block)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-4, 4, size=(n_blocks, 1)).astype(np.float32)
    x[::17] = 0.0
    if block == 1:
        x[::31] = np.float32(70000.0)  # overflows f16 to inf
    emit_quant(qtype, f"random-{n_blocks}-blocks", x)

(OUT / "manifest.txt").write_text("\n".join(manifest) + "\n")
print(f"wrote {len(manifest)} cases to {OUT}")
