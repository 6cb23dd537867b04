#!/usr/bin/env bash
# Everything pocket needs on a fresh machine, idempotent (a warm run takes seconds):
#   1. system packages: cmake and a C/C++ toolchain (to build llama.cpp), the aarch64
#      cross toolchain and qemu (the ARM kernel tests) -- via apt-get where there is one;
#   2. fixtures: the real GGUF models, llama.cpp's source and a Python venv with `gguf`
#      (tests/fixtures.sh);
#   3. llama.cpp's CPU tools, built once into the cache (compare/provision-llama.sh): the
#      x86-64-v3 reference build for parity and, where the CPU has more, a native one for speed.
# On macOS or a distribution without apt, install cmake, a compiler and python3 yourself
# (the script checks and says what is missing); steps 2-3 are the same everywhere.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "[setup] $*" >&2; }

arch="$(uname -m)"
if command -v apt-get >/dev/null 2>&1; then
  need=()
  command -v cmake >/dev/null || need+=(cmake)
  command -v g++ >/dev/null || need+=(g++)
  command -v python3 >/dev/null || need+=(python3 python3-venv)
  # llama.cpp's cmake uses ccache when it is there: the second llama.cpp build (native, on
  # CPUs with AVX-512 or AVX-VNNI) then recompiles only ggml-cpu.
  command -v ccache >/dev/null || need+=(ccache)
  command -v curl >/dev/null || need+=(curl)  # the pocket serve tests' HTTP client
  # The chat page's browser test (tests/serve_browser.rs): Debian's headless Chromium.
  command -v chromium >/dev/null || need+=(chromium)
  if [ "$arch" = x86_64 ]; then
    # The ARM kernel tests, cross-compiled and run under qemu (x86 hosts only).
    command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
    # llama.cpp's aarch64 build for the ARM parity stage (tests/aarch64-parity.sh).
    command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
    command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
    [ -x /usr/bin/rustc ] || need+=(rustc-web)
    dpkg -s libstd-rust-web-dev:arm64 >/dev/null 2>&1 || need+=(libstd-rust-web-dev:arm64)
  fi
  if [ ${#need[@]} -gt 0 ]; then
    say "apt-get install ${need[*]}"
    if [ "$arch" = x86_64 ]; then
      dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    fi
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need[@]}" >/dev/null
  fi
else
  # macOS, or a Linux without apt: say what is missing instead of installing it.
  missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v c++ >/dev/null || missing+=("a C++ compiler")
  command -v python3 >/dev/null || missing+=(python3)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(uname -s)" = Darwin ]; then
      say "missing: ${missing[*]} -- install with: xcode-select --install; brew install cmake python3"
    else
      say "missing: ${missing[*]} -- install them with your package manager"
    fi
    exit 1
  fi
  say "no apt-get here ($(uname -sm)): using the cmake, compiler and python3 found on PATH"
fi

bash "$here/tests/fixtures.sh"
bash "$here/compare/provision-llama.sh"
say "ready"
