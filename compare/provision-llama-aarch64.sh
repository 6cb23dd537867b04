#!/usr/bin/env bash
# Cross-builds llama.cpp's llama-perplexity for aarch64 from the same b11434 sdist as the x86
# builds (compare/provision-llama.sh), once per ARM level, into the pocket cache. Later runs
# find the binaries and return. The ARM parity stage (tests/aarch64-parity.sh) runs
# them under qemu-user next to pocket's own aarch64 build, one variant per qemu level:
#
#   llama.cpp-aarch64-i8mm     -march=armv8.6-a+dotprod+i8mm  qemu -cpu max
#   llama.cpp-aarch64-dotprod  -march=armv8.2-a+dotprod       qemu -cpu cortex-a76
#   llama.cpp-aarch64-neon     -march=armv8-a                 qemu -cpu cortex-a72
#
# GGML_NATIVE=OFF with GGML_CPU_ARM_ARCH (ggml/src/ggml-cpu/CMakeLists.txt appends it as
# -march=): ggml-cpu compiles its ARM kernels (arch/arm/quants.c, repack.cpp) for exactly
# that level, selected by __ARM_FEATURE_DOTPROD / __ARM_FEATURE_MATMUL_INT8 at compile time.
# No SVE (qemu's max has it, but pocket has no SVE path to compare). Static binaries and no
# OpenMP (ggml's own thread pool), so qemu needs no guest library prefix.
#
#   POCKET_CACHE            cache directory (default ~/.cache/pocket)
#   LLAMA_JOBS              parallel build jobs (default: all cores)
#   POCKET_AARCH64_VARIANTS subset of "i8mm dotprod neon"
set -euo pipefail
. "$(dirname "$0")/provision-common.sh" "llama.cpp aarch64"
src="$CACHE/llama.cpp"
version="b11434"

march_of() {
  case "$1" in
    i8mm) echo "armv8.6-a+dotprod+i8mm" ;;
    dotprod) echo "armv8.2-a+dotprod" ;;
    neon) echo "armv8-a" ;;
    *) say "unknown variant $1 (i8mm, dotprod, neon)"; exit 1 ;;
  esac
}

[ -f "$src/CMakeLists.txt" ] || bash "$here/../tests/fixtures.sh"
need_cmake
cc=aarch64-linux-gnu-gcc
cxx=aarch64-linux-gnu-g++
for c in "$cc" "$cxx"; do
  command -v "$c" >/dev/null || { say "$c not found (apt-get install g++-aarch64-linux-gnu)"; exit 1; }
done
jobs="${LLAMA_JOBS:-$(cpu_cores)}"

# configure DIR MARCH: the same cmake line for every variant; only ggml-cpu's -march differs.
configure() {
  logged "$1.configure.log" 30 cmake -S "$src" -B "$1" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" ${ccache_launcher[@]+"${ccache_launcher[@]}"} \
    -DCMAKE_FIND_ROOT_PATH=/usr/aarch64-linux-gnu \
    -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
    -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY \
    -DCMAKE_EXE_LINKER_FLAGS=-static \
    -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$2" -DGGML_OPENMP=OFF \
    -DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_LLAMAFILE=ON \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF \
    -DBUILD_SHARED_LIBS=OFF
}

# The ISA level only reaches ggml-cpu (GGML_CPU_ARM_ARCH is a compile option of that target
# alone): libllama, common and ggml-base are the same code at every level. So the neon
# build is the whole tool, and the dotprod / i8mm variants compile only their ggml-cpu and
# link it with the neon build's other libraries, by the neon build's own link line. That
# halves a cold provision (libllama and common are most of the compile).
base="$CACHE/llama.cpp-aarch64-neon"
for variant in neon ${POCKET_AARCH64_VARIANTS:-i8mm dotprod}; do
  [ "$variant" = neon ] || march_of "$variant" >/dev/null
done
for variant in $(printf '%s\n' neon ${POCKET_AARCH64_VARIANTS:-i8mm dotprod} | awk '!seen[$0]++'); do
  march="$(march_of "$variant")"
  dir="$CACHE/llama.cpp-aarch64-$variant"
  flavor="$version aarch64 -march=$march static"
  if [ -x "$dir/bin/llama-perplexity" ] && [ "$(cat "$dir/FLAVOR" 2>/dev/null)" = "$flavor" ]; then
    say "$variant: cached ($dir)"
    continue
  fi
  rm -f "$dir/FLAVOR"
  say "configuring $variant (-march=$march) in $dir"
  configure "$dir" "$march"
  start=$(date +%s)
  if [ "$variant" = neon ]; then
    say "building llama-perplexity ($variant) with $jobs jobs"
    target=llama-perplexity
  else
    say "building ggml-cpu ($variant) with $jobs jobs; the rest comes from $base"
    target=ggml-cpu
  fi
  cmake_build "$dir" "$jobs" "$target"
  if [ "$variant" != neon ]; then
    link="$base/tools/perplexity/CMakeFiles/llama-perplexity.dir/link.txt"
    grep -q '\.\./\.\./ggml/src/libggml-cpu\.a' "$link" || { say "unexpected link line in $link"; exit 1; }
    mkdir -p "$dir/bin"
    line="$(sed -e "s#\.\./\.\./ggml/src/libggml-cpu\.a#$dir/ggml/src/libggml-cpu.a#" \
      -e "s#-o \.\./\.\./bin/llama-perplexity#-o $dir/bin/llama-perplexity#" "$link")"
    (cd "$base/tools/perplexity" && eval "$line") >>"$dir.build.log" 2>&1 \
      || { tail -20 "$dir.build.log"; exit 1; }
  fi
  # Proof that the level's kernels are in the binary: i8mm's matrix multiply (smmla) and
  # dotprod's dot product (sdot), neither in the armv8-a build.
  case "$variant" in
    i8mm) want=smmla ;;
    dotprod) want=sdot ;;
    *) want="" ;;
  esac
  if [ -n "$want" ] && command -v aarch64-linux-gnu-objdump >/dev/null; then
    n=$(aarch64-linux-gnu-objdump -d "$dir/bin/llama-perplexity" | grep -c "\s$want\s" || true)
    [ "$n" -gt 0 ] || { say "$variant: no $want instruction in the linked binary"; exit 1; }
    say "$variant: $n $want instructions"
  fi
  say "$variant built in $(($(date +%s) - start)) s"
  echo "$flavor" >"$dir/FLAVOR"
done
say "ok"
