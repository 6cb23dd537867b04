#!/usr/bin/env bash
# `provision-ik-llama.sh --prebuilt`: ik_llama.cpp's llama-bench against the prebuilt
# libggml/libllama of the ik-llama-cpp-python==0.1.5 manylinux wheel (x86-64 Linux; AVX2, not
# native), into <cache>/ik_llama.cpp-prebuilt. Minutes instead of the native build's half
# hour. llama-bench takes three symbols from ik's `common` library (the build number and
# commit, and cpu_get_num_math, its default -t); they are compiled from a small shim instead
# of the whole library (chat templates, jinja, json: most of its build time).
set -euo pipefail
. "$(dirname "$0")/provision-common.sh" "ik_llama.cpp --prebuilt"
. "$here/ik-llama-sdist.sh"

wheel_sha256="52408f31dd05d16ada53b041155f14ec1fee9acd6ab0b4b4f77de04bd565bd67"
out="$CACHE/ik_llama.cpp-prebuilt"

exit_if_built "$out" llama-bench
[ "$(uname -sm)" = "Linux x86_64" ] || { say "the wheel is for x86-64 Linux; build natively instead"; exit 1; }
cxx="$(command -v c++ || command -v g++ || true)"
[ -n "$cxx" ] || { say "no C++ compiler: install g++"; exit 1; }

fetch_ik_sdist
wheel="$ik_downloads/$ik_sdist_name-cp311-cp311-manylinux_2_28_x86_64.whl"
if [ ! -f "$wheel" ]; then
  say "downloading the manylinux wheel from PyPI (25 MB)"
  "${pip[@]}" download --quiet --no-deps --only-binary :all: --implementation cp \
    --python-version 3.11 --platform manylinux_2_28_x86_64 \
    "ik-llama-cpp-python==$ik_version" -d "$ik_downloads"
fi
echo "$wheel_sha256  $wheel" | sha256sum -c --quiet -

rm -rf "$out" "$out.tmp"
mkdir -p "$out.tmp/src" "$out.tmp/lib" "$out.tmp/bin"
tar xzf "$ik_sdist" -C "$out.tmp/src" --strip-components=3 "$ik_sdist_name/vendor/ik_llama.cpp"
# The auditwheel-repaired libraries (ik_llama_cpp_python.libs/: libllama-<hash>.so,
# libggml-<hash>.so, libgomp), which find each other by $ORIGIN; llama-bench links these,
# one copy of each. No -fopenmp: libggml brings its own libgomp, and an RPATH (not RUNPATH:
# --disable-new-dtags) lets libggml find it in lib/ too.
libs="$(python3 - "$wheel" "$out.tmp/lib" <<'PY'
import sys, zipfile, os
wheel, lib = sys.argv[1], sys.argv[2]
link = []
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("ik_llama_cpp_python.libs/") and ".so" in name:
            base = os.path.basename(name)
            with open(os.path.join(lib, base), "wb") as f:
                f.write(z.read(name))
            if base.startswith(("libllama-", "libggml-")):
                link.append("-l:" + base)
print(" ".join(sorted(link, reverse=True)))
PY
)"
[ -n "$libs" ] || { say "no libllama/libggml in $wheel"; exit 1; }
src="$out.tmp/src"
cat > "$out.tmp/shim.cpp" <<CPP
// What llama-bench takes from ik_llama.cpp's common library (common/build-info.cpp.in and
// cpu_get_num_math, reduced to its Linux physical-core count).
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <unordered_set>
int LLAMA_BUILD_NUMBER = 0;
char const * LLAMA_COMMIT = "ik-llama-cpp-python-$ik_version";
int32_t cpu_get_num_math() {
    std::unordered_set<std::string> siblings;
    for (uint32_t cpu = 0; cpu < UINT32_MAX; ++cpu) {
        std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings");
        if (!f.is_open()) break;
        std::string line;
        if (std::getline(f, line)) siblings.insert(line);
    }
    if (!siblings.empty()) return (int32_t) siblings.size();
    unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? (n <= 4 ? n : n / 2) : 4;
}
CPP
say "compiling llama-bench against the wheel's libraries (a few minutes on 2 cores)"
# shellcheck disable=SC2086  # $libs is a word list
logged "$out.tmp/build.log" 20 nice -n "${IK_NICE:-0}" "$cxx" -O2 -DNDEBUG -std=gnu++17 -I"$src/include" -I"$src/ggml/include" -I"$src/common" -I"$src/src" \
  "$src/examples/llama-bench/llama-bench.cpp" "$out.tmp/shim.cpp" \
  -L"$out.tmp/lib" $libs -Wl,--disable-new-dtags,-rpath,'$ORIGIN/../lib' -o "$out.tmp/bin/llama-bench"
rm -rf "$out.tmp/src"
mv "$out.tmp" "$out"
echo "ik_llama.cpp from ik-llama-cpp-python==$ik_version: llama-bench built here against the wheel's prebuilt libggml (manylinux x86-64, AVX2, not native), $(uname -sm)" > "$out/BUILD_INFO"
say "ok: $(cat "$out/BUILD_INFO")"
