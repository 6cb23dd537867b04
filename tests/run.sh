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
if [ -x tests/aarch64-parity.sh ]; then
  bash tests/aarch64-parity.sh
fi
