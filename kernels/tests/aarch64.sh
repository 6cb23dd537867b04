#!/usr/bin/env bash
# Builds the pocket-kernels test binaries for aarch64 and runs them under qemu-user at three
# ISA levels, proving each level really runs the path it is meant to:
#
#   qemu -cpu max         -> POCKET_EXPECT_ISA=i8mm     (NEON + dotprod + i8mm)
#   qemu -cpu cortex-a76  -> POCKET_EXPECT_ISA=dotprod  (NEON + dotprod)
#   qemu -cpu cortex-a72  -> POCKET_EXPECT_ISA=neon     (plain NEON)
#
# dispatch::tests::detected_level_is_the_expected_one fails when Isa::detect() differs from
# POCKET_EXPECT_ISA, and the kernel tests loop over Isa::available(), so every level up to
# the expected one is compared against the scalar reference.
#
# Usage: kernels/tests/aarch64.sh [test-binary args...]   e.g.  kernels/tests/aarch64.sh ops::
# Env:   POCKET_AARCH64_CARGO_ARGS  cargo target selection (default: --lib --tests)
#        POCKET_AARCH64_LEVELS      subset of "max:i8mm cortex-a76:dotprod cortex-a72:neon"
#
# Toolchain: Debian's rustc-web (/usr/bin/rustc, which ships an arm64 std as
# libstd-rust-web-dev:arm64), the aarch64 cross linker, and qemu-user; installed here when
# missing. The x86 build of the workspace is not touched (separate target dir).
set -euo pipefail

start=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

target=aarch64-unknown-linux-gnu
target_dir="$root/target/aarch64"
levels=${POCKET_AARCH64_LEVELS:-"max:i8mm cortex-a76:dotprod cortex-a72:neon"}
read -r -a cargo_sel <<<"${POCKET_AARCH64_CARGO_ARGS:---lib --tests}"

say() { printf 'aarch64.sh: %s\n' "$*" >&2; }

# ---- toolchain ---------------------------------------------------------------------------
pkgs=(rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu qemu-user)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        $sudo dpkg --add-architecture arm64
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
rustc=/usr/bin/rustc
[ -x "$rustc" ] || { say "no $rustc after install"; exit 1; }
[ -d "$("$rustc" --print sysroot)/lib/rustlib/$target" ] ||
    { say "$rustc has no $target std (libstd-rust-web-dev:arm64)"; exit 1; }
command -v cargo >/dev/null || { say "cargo not found"; exit 1; }

# qemu's -L prefix: the guest must use ONE glibc. With libc6:arm64 installed (a dependency of
# libstd-rust-web-dev:arm64), /lib/ld-linux-aarch64.so.1 is the multiarch loader and the
# binaries need no prefix. `-L /usr/aarch64-linux-gnu` would pair the cross package's ld.so
# (libc6-arm64-cross) with the multiarch libc.so.6 found through ld.so.cache; when their
# versions differ, pthread_create spins forever (every Rust test harness hangs).
qemu_prefix=()
if [ ! -e /lib/ld-linux-aarch64.so.1 ]; then
    qemu_prefix=(-L /usr/aarch64-linux-gnu)
fi

# ---- build -------------------------------------------------------------------------------
say "building pocket-kernels tests for $target with $("$rustc" --version)"
build_start=$(date +%s)
# No debuginfo in the cross build: the qemu runs do not use it, and with the test profile's
# full debuginfo the kernels' lib test took one rustc over 37 minutes on one core and 9 GB
# (2026-12-02, Sapphire Rapids VM), the longest step of the CI run.
json=$(RUSTC="$rustc" CARGO_PROFILE_TEST_DEBUG=0 \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo test -p pocket-kernels "${cargo_sel[@]}" --target "$target" \
    --target-dir "$target_dir" --no-run --message-format=json-render-diagnostics)
mapfile -t exes < <(printf '%s\n' "$json" |
    grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//' | sort -u)
((${#exes[@]})) || { say "no test executables built"; exit 1; }
say "built ${#exes[@]} test binaries in $(($(date +%s) - build_start)) s"

# ---- run at each level -------------------------------------------------------------------
export CARGO_MANIFEST_DIR="$root/kernels"
cd "$root/kernels" # cargo runs a package's tests from its directory
summary=()
failed=0
for level in $levels; do
    cpu=${level%%:*}
    isa=${level##*:}
    t0=$(date +%s)
    passed=0 nfailed=0 status=PASS
    for exe in "${exes[@]}"; do
        log=$(mktemp)
        set +e
        POCKET_EXPECT_ISA=$isa qemu-aarch64 "${qemu_prefix[@]}" -cpu "$cpu" "$exe" "$@" \
            >"$log" 2>&1
        rc=$?
        set -e
        cat "$log"
        while read -r p f; do
            passed=$((passed + p))
            nfailed=$((nfailed + f))
        done < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log")
        rm -f "$log"
        if [ "$rc" -ne 0 ]; then
            status=FAIL
            say "$(basename "$exe") failed under -cpu $cpu (exit $rc)"
        fi
    done
    [ "$status" = PASS ] || failed=1
    line=$(printf 'aarch64 qemu -cpu %-10s expect %-7s %s  %d tests passed, %d failed  (%d s)' \
        "$cpu" "$isa" "$status" "$passed" "$nfailed" "$(($(date +%s) - t0))")
    summary+=("$line")
    echo "$line"
done

echo
echo "== aarch64 summary =="
printf '%s\n' "${summary[@]}"
echo "total $(($(date +%s) - start)) s"
exit "$failed"
