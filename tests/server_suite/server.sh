#!/usr/bin/env bash
# The LLAMA_SERVER_BIN_PATH of llama.cpp's server test suite (tools/server/tests): the
# suite starts "$LLAMA_SERVER_BIN_PATH --port P --hf-repo R --hf-file F ...", which would
# download its test models from the Hugging Face hub. This script swaps the model source
# for a local fixture model and starts the server named by SUITE_SERVER with every other
# flag unchanged, so both servers see the same command line:
#
#   SUITE_SERVER=llama   ~/.cache/pocket/llama.cpp-build/bin/llama-server (the b11434 build)
#   SUITE_SERVER=pocket  $POCKET_BIN serve (default: target/release/pocket of this repo)
#
# The swap: a model whose repo or file name says "gemma" -> gemma-3-270m Q4_K_M; any other
# model -> SmolLM2-135M-Instruct Q4_1 (llama architecture, as the suite's stories260K).
# A command line without a model (the suite's router mode) gets none.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${POCKET_CACHE:-$HOME/.cache/pocket}"
SMOL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA="$CACHE/models/gemma-3-270m-q4_k_m.gguf"

args=()
source_named=""   # the suite's model names, joined (decides the swap)
while [ $# -gt 0 ]; do
  case "$1" in
    -m|--model|-hf|-hfr|--hf-repo|-hff|--hf-file|-mu|--model-url)
      source_named+=" ${2:-}"; shift 2 ;;
    --model=*|--hf-repo=*|--hf-file=*|--model-url=*)
      source_named+=" ${1#*=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

model=()
if [ -n "$source_named" ]; then
  case "${source_named,,}" in
    *gemma*) model=(-m "$GEMMA") ;;
    *) model=(-m "$SMOL") ;;
  esac
fi

case "${SUITE_SERVER:-pocket}" in
  llama) exec "${LLAMA_SERVER:-$CACHE/llama.cpp-build/bin/llama-server}" "${model[@]}" "${args[@]}" ;;
  pocket) exec "${POCKET_BIN:-$here/target/release/pocket}" serve "${model[@]}" "${args[@]}" ;;
  *) echo "server.sh: SUITE_SERVER must be llama or pocket, not '$SUITE_SERVER'" >&2; exit 2 ;;
esac
