#!/usr/bin/env bash
# Everything pocket needs on a fresh machine, idempotent (a warm run takes seconds):
#   1. system packages: cmake and a C/C++ toolchain (to build llama.cpp), the aarch64
#      cross toolchain and qemu (the ARM kernel tests) -- via apt-get where there is one;
#   2. fixtures: the real GGUF models, llama.cpp's source and a Python venv with `gguf`
#      (tests/fixtures.sh);
#   3. llama.cpp's CPU tools, built once into the cache (compare/provision-llama.sh).
# On macOS or another distribution, install cmake and a compiler yourself; steps 2-3 work.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "[setup] $*" >&2; }

if command -v apt-get >/dev/null 2>&1 && [ "$(uname -m)" = x86_64 ]; then
  need=()
  command -v cmake >/dev/null || need+=(cmake)
  command -v g++ >/dev/null || need+=(g++)
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  [ -x /usr/bin/rustc ] || need+=(rustc-web)
  dpkg -s libstd-rust-web-dev:arm64 >/dev/null 2>&1 || need+=(libstd-rust-web-dev:arm64)
  if [ ${#need[@]} -gt 0 ]; then
    say "apt-get install ${need[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
  fi
fi

bash "$here/tests/fixtures.sh"
bash "$here/compare/provision-llama.sh"
say "ready"
