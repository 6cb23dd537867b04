//! The `asm!` frame of the 4-token interleaved tiles' per-vector step (`q4_0::step4`,
//! `q5_0::step5`, `q8_0::step8`): the formats differ in how a weight vector is loaded and
//! decoded and in how it multiplies a token's 8 activation bytes, not in the walk over the
//! 4 tokens of an interleaved record, which is written once here.

/// Runs `$load` (the weight vector's loads and decode), then for each token `t` of the 4:
/// broadcasts its two 4-byte groups (the 8 bytes at `$a + 8t`) into `{a}` and `{b}`, runs
/// `$mul` (the products, left in `{a}` and `{b}`) and folds them into `$p[t]` with the
/// vector add `$add` (`vpaddw` for int16 sums, `vpaddd` for int32): `set` makes
/// `$p[t] = a + b` (the block's first vector), `add` makes `$p[t] += a + b`. `$ops` are the
/// format's own operands (`{q}`, the decode registers).
macro_rules! step4_core {
    ($load:expr, $mul:expr, [$($ops:tt)*], $a:expr, $p:ident, $add:literal, $fold:ident) => {
        std::arch::asm!(
            $load,
            "vpbroadcastd {a}, dword ptr [{p}]",
            "vpbroadcastd {b}, dword ptr [{p} + 4]",
            $mul,
            step4_core!(@$fold $add, "s0"),
            "vpbroadcastd {a}, dword ptr [{p} + 8]",
            "vpbroadcastd {b}, dword ptr [{p} + 12]",
            $mul,
            step4_core!(@$fold $add, "s1"),
            "vpbroadcastd {a}, dword ptr [{p} + 16]",
            "vpbroadcastd {b}, dword ptr [{p} + 20]",
            $mul,
            step4_core!(@$fold $add, "s2"),
            "vpbroadcastd {a}, dword ptr [{p} + 24]",
            "vpbroadcastd {b}, dword ptr [{p} + 28]",
            $mul,
            step4_core!(@$fold $add, "s3"),
            $($ops)*
            p = in(reg) $a,
            a = out(ymm_reg) _,
            b = out(ymm_reg) _,
            s0 = inout(ymm_reg) $p[0],
            s1 = inout(ymm_reg) $p[1],
            s2 = inout(ymm_reg) $p[2],
            s3 = inout(ymm_reg) $p[3],
            options(pure, readonly, nostack, preserves_flags),
        )
    };
    (@set $add:literal, $s:literal) => {
        concat!($add, " {", $s, "}, {a}, {b}")
    };
    (@add $add:literal, $s:literal) => {
        concat!($add, " {a}, {a}, {b}\n", $add, " {", $s, "}, {", $s, "}, {a}")
    };
}

/// [`step4_core`] for one weight vector of a packed Q4 record (the 32 code bytes at `$q`):
/// its low and high nibbles in `{x}` and `{h}` (`$merge` then adds Q5's 5th bits, with the
/// operands `$ops`), each multiplied with a token's group by `vpmaddubsw`, the int16 sums
/// folded into `$p[t]` as `$fold` says.
macro_rules! nibble_step {
    ($q:expr, $m4:expr, $merge:expr, [$($ops:tt)*], $a:expr, $p:ident, $fold:ident) => {
        step4_core!(
            concat!(
                "vmovdqu {x}, ymmword ptr [{q}]\n",
                "vpsrlw {h}, {x}, 4\n",
                "vpand {x}, {x}, {m4}\n",
                "vpand {h}, {h}, {m4}\n",
                $merge
            ),
            "vpmaddubsw {a}, {x}, {a}\nvpmaddubsw {b}, {h}, {b}",
            [q = in(reg) $q, m4 = in(ymm_reg) $m4, x = out(ymm_reg) _, h = out(ymm_reg) _, $($ops)*],
            $a,
            $p,
            "vpaddw",
            $fold
        )
    };
}
