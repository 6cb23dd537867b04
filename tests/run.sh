#!/usr/bin/env bash
# The test command: every test of the workspace natively, then the kernel tests for aarch64
# under qemu at three ISA levels (when kernels/tests/aarch64.sh exists), then pocket's aarch64
# build against llama.cpp's at the same three levels (tests/aarch64-parity.sh).
# Needs `bash compare/setup.sh` first (fixtures and llama.cpp are the tests' oracles).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --no-fail-fast
if [ -x kernels/tests/aarch64.sh ]; then
  bash kernels/tests/aarch64.sh
fi
# ARM parity. Cold, its cross builds (llama.cpp's neon build plus the dotprod / i8mm ggml-cpu
# variants, pocket's aarch64 release binary) take ~14 minutes on 2 cores; warm, under a
# minute. POCKET_ARM_PARITY=0 leaves it out of a local run.
if [ "${POCKET_ARM_PARITY:-1}" = 1 ] && [ -x tests/aarch64-parity.sh ]; then
  bash tests/aarch64-parity.sh
else
  echo "SKIPPED: aarch64 parity against llama.cpp's ARM builds (POCKET_ARM_PARITY=0)" >&2
fi
