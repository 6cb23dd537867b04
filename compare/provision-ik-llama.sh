#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench (and llama-perplexity) into the pocket cache, once.
# Opt-in: compare/setup.sh does not run it (see the README's compare section). A later run
# finds the binaries and BUILD_INFO and returns at once.
#
# ik_llama.cpp is the CPU-performance fork of llama.cpp (run-time repacked _R8 layouts with
# -rtr, on-the-fly int8 conversion for prefill, its own flash attention). Its source comes
# from the PyPI sdist ik-llama-cpp-python==0.1.5, which vendors vendor/ik_llama.cpp; only
# pip is needed to fetch it (no git, no GitHub).
#
# The build is CPU only and native (GGML_NATIVE=ON: ik_llama.cpp is benchmarked at its best
# on this CPU, like llama.cpp-native), with GGML_IQK_FA_ALL_QUANTS=OFF: the flash-attention
# kernels for every K/V quant pair are most of the build time, and pocket compares with an
# f16 KV cache. Still long: ggml's iqk kernels dominate (well over an hour on a 2-core VM
# shared with other builds); an interrupted build resumes, and ccache (if installed) makes a
# rebuild short.
#
# `--prebuilt` (x86-64 Linux only) is the quick way, a few minutes: libggml/libllama from the
# same release's manylinux wheel (built for generic x86-64 with AVX2, not native: on an
# AVX-512 CPU ik_llama.cpp is faster when built here), with only llama-bench compiled from
# the sdist against them. It installs into <cache>/ik_llama.cpp-prebuilt, which pocket uses
# only when the native build is absent; BUILD_INFO says which one ran.
#
#   POCKET_CACHE     cache directory (default ~/.cache/pocket)
#   IK_JOBS          parallel build jobs (default: all cores)
#   IK_CMAKE_FLAGS   extra cmake flags
set -euo pipefail
. "$(dirname "$0")/provision-common.sh" ik_llama.cpp
. "$here/ik-llama-sdist.sh"

src="$CACHE/ik_llama.cpp-src"
out="$CACHE/ik_llama.cpp"
tools=(llama-bench llama-perplexity)

if [ "${1:-}" = --prebuilt ]; then
  exec bash "$here/provision-ik-llama-prebuilt.sh"
fi
exit_if_built "$out" "${tools[@]}"

need_cmake
command -v c++ >/dev/null || command -v g++ >/dev/null || { say "no C++ compiler: install g++"; exit 1; }
"${pip[@]}" --version >/dev/null 2>&1 || { say "pip not found: install python3-pip"; exit 1; }

# --- the source ------------------------------------------------------------------------------
fetch_ik_sdist
if [ ! -f "$src/CMakeLists.txt" ]; then
  say "unpacking vendor/ik_llama.cpp into $src"
  rm -rf "$src" "$src.tmp"
  mkdir -p "$src.tmp"
  tar xzf "$ik_sdist" -C "$src.tmp" --strip-components=3 "$ik_sdist_name/vendor/ik_llama.cpp"
  mv "$src.tmp" "$src"
fi

# The sdist leaves out common/cmake/build-info-gen-cpp.cmake, the script that writes
# common/build-info.cpp from git (the sdist has no .git either): write that file here, newer
# than its template, so the build's rule for it never runs.
if [ ! -f "$src/common/build-info.cpp" ]; then
  say "writing common/build-info.cpp (the sdist lacks its generator)"
  sed -e 's/@BUILD_NUMBER@/0/' -e "s/@BUILD_COMMIT@/ik-llama-cpp-python-$ik_version/" \
    -e "s/@BUILD_COMPILER@/$(c++ --version 2>/dev/null | head -n 1 | tr -d '"')/" \
    -e "s/@BUILD_TARGET@/$(uname -m)/" \
    "$src/common/build-info.cpp.in" > "$src/common/build-info.cpp"
fi

# --- the build -------------------------------------------------------------------------------
jobs="${IK_JOBS:-$(cpu_cores)}"
os_flags=()
[ "$(uname -s)" = Darwin ] && os_flags=(-DGGML_METAL=OFF -DGGML_BLAS=OFF)
build="$out"
say "configuring (CPU only, native, IQK flash attention for f16/bf16/q8_0 K/V only) in $build"
# shellcheck disable=SC2086  # IK_CMAKE_FLAGS is a word list on purpose
logged "$build.configure.log" 30 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_IQK_FA_ALL_QUANTS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
  -DGGML_CCACHE=OFF ${ccache_launcher[@]+"${ccache_launcher[@]}"} ${os_flags[@]+"${os_flags[@]}"} \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=ON \
  -DBUILD_SHARED_LIBS=OFF ${IK_CMAKE_FLAGS:-}
say "building ${tools[*]} with $jobs jobs (long: the iqk kernels; see the header)"
start=$(date +%s)
cmake_build "$build" "$jobs" "${tools[@]}"
say "built in $(( $(date +%s) - start )) s"
# The sdist has no .git (and ik_llama.cpp's llama-bench has no --version): the release is
# named in the info line.
echo "ik_llama.cpp from ik-llama-cpp-python==$ik_version (PyPI sdist), $(uname -sm), native, GGML_IQK_FA_ALL_QUANTS=OFF" \
  > "$build/BUILD_INFO"
say "ok: $(cat "$build/BUILD_INFO")"
