#!/usr/bin/env bash
# The test command: every test of the workspace natively, then the kernel tests for aarch64
# under qemu at three ISA levels (when kernels/tests/aarch64.sh exists), then pocket's aarch64
# build against llama.cpp's at the same three levels (tests/aarch64-parity.sh, opt-in).
# Needs `bash compare/setup.sh` first (fixtures and llama.cpp are the tests' oracles).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --no-fail-fast
if [ -x kernels/tests/aarch64.sh ]; then
  bash kernels/tests/aarch64.sh
fi
# Opt-in: cold, its cross builds (llama.cpp's three ARM variants, pocket's aarch64 release
# binary) take ~70 minutes on 2 cores, more than CI's budget allows beside the rest; warm
# (cached builds) it runs in under 2 minutes.
if [ "${POCKET_ARM_PARITY:-0}" = 1 ] && [ -x tests/aarch64-parity.sh ]; then
  bash tests/aarch64-parity.sh
else
  echo "SKIPPED: aarch64 parity against llama.cpp's ARM builds (opt-in: POCKET_ARM_PARITY=1 bash tests/run.sh, or bash tests/aarch64-parity.sh)" >&2
fi
