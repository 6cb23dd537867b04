//! Run-time ISA selection. Kernels are compiled for every ISA of the target architecture
//! (`#[target_feature]` functions) and chosen here once, at run time: a binary built for
//! generic x86-64 or aarch64 still runs the AVX2 / dotprod / i8mm paths where the CPU has
//! them, and never executes an instruction the CPU lacks (no SIGILL from compile-time
//! dispatch). `POCKET_ISA=scalar|avx2|avxvnni|avx512vnni|neon|dotprod|i8mm` forces a level for tests
//! and benchmarks; forcing a level the CPU lacks is refused with an error.

use std::fmt;
use std::sync::OnceLock;

/// An instruction-set level, ordered from most portable to fastest on its architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust: the reference every other path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX2 level plus AVX-VNNI (`vpdpbusd` at 256 bits, VEX; Intel Alder Lake and
    /// later client cores, AMD Zen5).
    AvxVnni,
    /// x86-64 AVX2 level plus AVX-512 F/BW/VL and VNNI (`vpdpbusd`): the int8 dot products
    /// of the matmuls in one instruction, 32 vector registers (AMD Zen4/Zen5, Intel
    /// Ice Lake and later servers).
    Avx512Vnni,
    /// aarch64 Advanced SIMD.
    Neon,
    /// aarch64 NEON + the dot-product extension (`sdot`).
    Dotprod,
    /// aarch64 NEON + dotprod + the int8 matrix-multiply extension (`smmla`).
    I8mm,
}

pub const ALL_ISAS: [Isa; 7] = [
    Isa::Scalar,
    Isa::Avx2,
    Isa::AvxVnni,
    Isa::Avx512Vnni,
    Isa::Neon,
    Isa::Dotprod,
    Isa::I8mm,
];

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        ALL_ISAS
            .iter()
            .copied()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run this level: the detection's result, kept after the first
    /// call (kernels ask on every call: each detection is up to seven feature tests, 0.2 %
    /// of a 2-thread decode with a LoRA adapter in `perf`).
    pub fn is_available(self) -> bool {
        static LEVELS: OnceLock<u32> = OnceLock::new();
        let levels = *LEVELS.get_or_init(|| {
            ALL_ISAS
                .iter()
                .filter(|isa| isa.cpu_has())
                .fold(0, |m, &isa| m | 1 << isa as u32)
        });
        levels >> self as u32 & 1 == 1
    }

    /// [`Self::is_available`], detected now.
    fn cpu_has(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => Isa::Avx2.cpu_has() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.cpu_has()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[cfg(target_arch = "aarch64")]
            Isa::Dotprod => {
                std::arch::is_aarch64_feature_detected!("neon")
                    && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::I8mm => {
                std::arch::is_aarch64_feature_detected!("neon")
                    && std::arch::is_aarch64_feature_detected!("dotprod")
                    && std::arch::is_aarch64_feature_detected!("i8mm")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Whether this level runs the x86 AVX2 bodies (element-wise ops, activation
    /// quantization, attention; the VNNI level adds its own matmul tiles on top).
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni)
    }

    /// Every level this CPU can run, most portable first (tests iterate over these).
    pub fn available() -> Vec<Isa> {
        ALL_ISAS
            .iter()
            .copied()
            .filter(|i| i.is_available())
            .collect()
    }

    /// The fastest level this CPU can run.
    pub fn detect() -> Isa {
        *Isa::available().last().unwrap_or(&Isa::Scalar)
    }

    /// The level kernels use: `POCKET_ISA` if set (and available), else [`Isa::detect`].
    /// Decided once per process.
    pub fn active() -> Isa {
        static ACTIVE: OnceLock<Isa> = OnceLock::new();
        *ACTIVE.get_or_init(|| match Isa::from_env() {
            Ok(Some(isa)) => isa,
            Ok(None) => Isa::detect(),
            Err(msg) => {
                // A forced level that cannot run would crash with SIGILL: refuse it loudly
                // and fall back, rather than run something the user did not ask for silently.
                eprintln!("pocket: {msg}; using {}", Isa::detect());
                Isa::detect()
            }
        })
    }

    /// Reads `POCKET_ISA`: `Ok(None)` when unset or `auto`.
    pub fn from_env() -> Result<Option<Isa>, String> {
        match std::env::var("POCKET_ISA") {
            Err(_) => Ok(None),
            Ok(s) if s.trim().is_empty() || s.trim().eq_ignore_ascii_case("auto") => Ok(None),
            Ok(s) => match Isa::from_name(&s) {
                None => Err(format!(
                    "POCKET_ISA={s:?} is not one of scalar, avx2, avxvnni, avx512vnni, neon, dotprod, i8mm, auto"
                )),
                Some(isa) if !isa.is_available() => {
                    Err(format!("POCKET_ISA={s}: this CPU does not support {isa}"))
                }
                Some(isa) => Ok(Some(isa)),
            },
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_available_and_names_round_trip() {
        assert!(Isa::Scalar.is_available());
        assert_eq!(Isa::available()[0], Isa::Scalar);
        for isa in ALL_ISAS {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert_eq!(Isa::from_name("sse9"), None);
    }

    #[test]
    fn levels_of_the_other_architecture_are_unavailable() {
        #[cfg(target_arch = "x86_64")]
        assert!(!Isa::Neon.is_available() && !Isa::I8mm.is_available());
        #[cfg(target_arch = "aarch64")]
        assert!(!Isa::Avx2.is_available() && !Isa::AvxVnni.is_available());
        #[cfg(target_arch = "aarch64")]
        assert!(!Isa::Avx512Vnni.is_available());
    }

    /// Every level of this architecture the CPU lacks is named, so a run on an older
    /// machine says what it did not test (the kernel tests iterate `Isa::available()`).
    #[test]
    fn levels_this_cpu_lacks_are_reported() {
        for isa in ALL_ISAS {
            let this_arch = if cfg!(target_arch = "x86_64") {
                isa.has_avx2() || isa == Isa::Scalar
            } else {
                !isa.has_avx2()
            };
            if this_arch && !isa.is_available() {
                eprintln!("SKIPPED: {isa} kernels are not tested here: this CPU lacks {isa}");
            }
        }
    }

    /// `POCKET_EXPECT_ISA=<level>` (set by `kernels/tests/aarch64.sh` for each qemu CPU model,
    /// or by CI on a known machine) proves the run really detects the level it means to test.
    #[test]
    fn detected_level_is_the_expected_one() {
        let Ok(want) = std::env::var("POCKET_EXPECT_ISA") else {
            return;
        };
        let want = Isa::from_name(&want)
            .unwrap_or_else(|| panic!("POCKET_EXPECT_ISA={want:?} names no ISA level"));
        assert_eq!(Isa::detect(), want, "available: {:?}", Isa::available());
        eprintln!("POCKET_EXPECT_ISA: detected {} as expected", Isa::detect());
    }
}
