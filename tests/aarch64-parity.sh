#!/usr/bin/env bash
# ARM parity of pocket against llama.cpp, without ARM hardware: pocket's aarch64 build and
# llama.cpp's aarch64 llama-perplexity (compare/provision-llama-aarch64.sh, one build per
# level) run under qemu-user on small synthetic models, at each of the three qemu levels of
# kernels/tests/aarch64.sh:
#
#   qemu -cpu max         pocket POCKET_ISA=i8mm     llama.cpp -march=armv8.6-a+dotprod+i8mm
#   qemu -cpu cortex-a76  pocket POCKET_ISA=dotprod  llama.cpp -march=armv8.2-a+dotprod
#   qemu -cpu cortex-a72  pocket POCKET_ISA=neon     llama.cpp -march=armv8-a
#
# Per level and weight type, llama.cpp writes the KL-divergence base (its log-probabilities
# of every scored token) and pocket scores the same tokens with --kl-divergence against it.
# The stage fails when pocket's mean KLD exceeds $kld_max or its top token differs from
# llama.cpp's on more than (100 - $top_min) % of the rows. POCKET_ISA forces pocket onto the
# level (pocket warns, and this stage fails, if qemu's CPU lacks it), so each row is that
# kernel path. A control proves the bounds can fail: the model of another seed, scored
# against the same base, must break them.
#
# Not for speed: qemu times mean nothing. Skips with "SKIPPED: why" when the cross toolchain
# cannot be had. Env: POCKET_AARCH64_LEVELS (as aarch64.sh), POCKET_PARITY_TYPES.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$(date +%s)
say() { printf 'aarch64-parity: %s\n' "$*" >&2; }
skip() { echo "aarch64-parity: SKIPPED: $*"; exit 0; }

CACHE="${POCKET_CACHE:-$HOME/.cache/pocket}"
target=aarch64-unknown-linux-gnu
target_dir="$root/target/aarch64"
levels=${POCKET_AARCH64_LEVELS:-"max:i8mm cortex-a76:dotprod cortex-a72:neon"}
types=${POCKET_PARITY_TYPES:-"q4_0 q4_1 q8_0 q4_k_m"}
# Bounds. These models' next-token distributions are near uniform (PPL ~9,300 of 8,192
# tokens), so near-ties make the top token fragile and the KLD is the sharp test. x86 pocket
# against x86 llama.cpp (2026-12-03): mean KLD 1.0e-5 (Q8_0) to 2.9e-5 (Q4_K_M), top
# 98.4-100 %; the same weights in Q8_0 scored against the Q4_0 base (a wrong weight type):
# 4.2e-3, 92.9 %; another seed (the control below): 0.10, 70.6 %.
kld_max=${POCKET_PARITY_KLD_MAX:-0.0003}
top_min=${POCKET_PARITY_TOP_MIN:-95}

# ---- toolchain ---------------------------------------------------------------------------
pkgs=(rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user cmake)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
command -v dpkg-query >/dev/null || skip "no dpkg (a Debian/Ubuntu host is needed for the cross toolchain)"
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || skip "missing ${missing[*]} and no root to install them"
        sudo="sudo"
    fi
    say "installing ${missing[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        "${pkgs[@]}" >/dev/null; } || skip "could not install ${missing[*]}"
fi
rustc=/usr/bin/rustc
[ -d "$("$rustc" --print sysroot)/lib/rustlib/$target" ] || skip "$rustc has no $target std"
qemu_prefix=()
[ -e /lib/ld-linux-aarch64.so.1 ] || qemu_prefix=(-L /usr/aarch64-linux-gnu) # see aarch64.sh

# ---- builds (cached) ---------------------------------------------------------------------
t0=$(date +%s)
variants=$(for l in $levels; do printf '%s ' "${l##*:}"; done)
POCKET_AARCH64_VARIANTS="$variants" nice -n 19 bash compare/provision-llama-aarch64.sh
llama_s=$(($(date +%s) - t0))
t0=$(date +%s)
say "building pocket for $target (release, no debuginfo)"
RUSTC="$rustc" CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    nice -n 19 cargo build --release --bin pocket --target "$target" --target-dir "$target_dir" \
    --quiet
pocket_s=$(($(date +%s) - t0))
pocket="$target_dir/$target/release/pocket"
say "builds: llama.cpp ${llama_s} s, pocket ${pocket_s} s"

work="$target_dir/parity"
mkdir -p "$work"
text="$root/tests/data/ppl_text.txt"
shape=(--preset custom --arch qwen3 --layers 2 --hidden 256 --heads 4 --kv-heads 2
    --head-dim 64 --ffn 768 --vocab 8192 --context 512)
ppl_args=(-c 128 --chunks 2 -t 2)

# synth MODEL TYPE SEED: written by the aarch64 pocket itself (byte-identical for a seed).
synth() {
    [ -s "$1" ] && return 0
    qemu-aarch64 "${qemu_prefix[@]}" -cpu max "$pocket" synth "${shape[@]}" --type "$2" \
        --seed "$3" -q -o "$1.tmp" >/dev/null
    mv "$1.tmp" "$1"
}

# score CPU ISA MODEL BASE LOG: pocket's KLD against BASE, prints "KLD TOP".
score() {
    POCKET_ISA=$2 qemu-aarch64 "${qemu_prefix[@]}" -cpu "$1" "$pocket" perplexity -m "$3" \
        --kl-divergence-base "$4" --kl-divergence -t 2 >"$5" 2>&1 ||
        { cat "$5"; say "pocket perplexity failed"; return 1; }
    if grep -q '^pocket: POCKET_ISA' "$5"; then
        grep '^pocket: POCKET_ISA' "$5" >&2
        return 1
    fi
    local kld top
    kld=$(sed -n 's/^Mean *KLD: *\([0-9.e-]*\).*/\1/p' "$5")
    top=$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$5")
    [ -n "$kld" ] && [ -n "$top" ] || { cat "$5"; say "no KLD statistics in pocket's output"; return 1; }
    echo "$kld $top"
}
within() { awk -v k="$1" -v t="$2" -v km="$kld_max" -v tm="$top_min" 'BEGIN { exit !(k <= km && t >= tm) }'; }

failed=0
table=()
control_done=0
for level in $levels; do
    cpu=${level%%:*}
    isa=${level##*:}
    llama="$CACHE/llama.cpp-aarch64-$isa/bin/llama-perplexity"
    for ty in $types; do
        model="$work/synth-$ty.gguf"
        synth "$model" "$ty" 0
        base="$work/base-$isa-$ty.kld"
        log="$work/$isa-$ty"
        qemu-aarch64 "${qemu_prefix[@]}" -cpu "$cpu" "$llama" -m "$model" -f "$text" \
            "${ppl_args[@]}" --kl-divergence-base "$base" >"$log.llama.log" 2>&1 ||
            { tail -20 "$log.llama.log"; say "llama-perplexity failed ($isa, $ty)"; failed=1; continue; }
        if ! read -r kld top < <(score "$cpu" "$isa" "$model" "$base" "$log.pocket.log"); then
            failed=1
            table+=("$(printf '%-10s %-8s %-7s %12s %8s  FAIL (no figures)' "$cpu" "$isa" "$ty" - -)")
            continue
        fi
        status=PASS
        within "$kld" "$top" || { status=FAIL; failed=1; }
        table+=("$(printf '%-10s %-8s %-7s %12s %8s  %s' "$cpu" "$isa" "$ty" "$kld" "$top" "$status")")
        # The control, once: another seed's model against this base must break the bounds.
        if [ "$control_done" = 0 ]; then
            control_done=1
            other="$work/synth-$ty-seed1.gguf"
            synth "$other" "$ty" 1
            ckld=- ctop=-
            if ! read -r ckld ctop < <(score "$cpu" "$isa" "$other" "$base" "$log.control.log"); then
                say "control: pocket gave no figures"
                failed=1
            elif within "$ckld" "$ctop"; then
                say "control FAILED: another seed's model passes the bounds (KLD $ckld, top $ctop %)"
                failed=1
            fi
            table+=("$(printf '%-10s %-8s %-7s %12s %8s  control (seed 1): must exceed the bounds' "$cpu" "$isa" "$ty" "$ckld" "$ctop")")
        fi
    done
done

echo
echo "== aarch64 parity: pocket --kl-divergence against llama.cpp's base, same qemu level =="
echo "bounds: mean KLD <= $kld_max, same top token >= $top_min %"
printf '%-10s %-8s %-7s %12s %8s\n' "qemu -cpu" level type "mean KLD" "top %"
printf '%s\n' "${table[@]}"
echo "total $(($(date +%s) - start)) s (builds: llama.cpp ${llama_s} s, pocket ${pocket_s} s)"
exit "$failed"
