//! Run-time ISA selection. Kernels are compiled for every ISA of the target architecture
//! (`#[target_feature]` functions) and chosen here once, at run time: a binary built for
//! generic x86-64 or aarch64 still runs the AVX2 / dotprod / i8mm paths where the CPU has
//! them, and never executes an instruction the CPU lacks (no SIGILL from compile-time
//! dispatch). `POCKET_ISA=scalar|avx2|neon|dotprod|i8mm` forces a level for tests and
//! benchmarks; forcing a level the CPU lacks is refused with an error.

use std::fmt;
use std::sync::OnceLock;

/// An instruction-set level, ordered from most portable to fastest on its architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust: the reference every other path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// aarch64 Advanced SIMD.
    Neon,
    /// aarch64 NEON + the dot-product extension (`sdot`).
    Dotprod,
    /// aarch64 NEON + dotprod + the int8 matrix-multiply extension (`smmla`).
    I8mm,
}

pub const ALL_ISAS: [Isa; 5] = [Isa::Scalar, Isa::Avx2, Isa::Neon, Isa::Dotprod, Isa::I8mm];

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
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

    /// Whether this CPU can run this level.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
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
                    "POCKET_ISA={s:?} is not one of scalar, avx2, neon, dotprod, i8mm, auto"
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
        assert!(!Isa::Avx2.is_available());
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
