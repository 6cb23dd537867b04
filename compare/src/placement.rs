//! Thread placement as both engines take it: llama.cpp's CPU mask, parsed once, and the
//! flags that pass a [`Placement`] on to `llama-bench` and `pocket bench`.

use std::fmt;
use std::str::FromStr;

use pocket_model::Placement;

/// A CPU mask, bit `i` for CPU `i` (llama.cpp's `--cpu-mask`: hexadecimal, with or
/// without `0x`); 0 means no mask (the process's CPUs). Displayed as `0x3`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuMask(u128);

impl CpuMask {
    pub fn bits(self) -> u128 {
        self.0
    }
}

impl From<u128> for CpuMask {
    fn from(bits: u128) -> CpuMask {
        CpuMask(bits)
    }
}

/// A `--cpu-mask` that is not a hexadecimal mask of at most 128 CPUs.
pub type CpuMaskError = pocket_model::MaskError;

impl FromStr for CpuMask {
    type Err = CpuMaskError;
    fn from_str(s: &str) -> Result<CpuMask, CpuMaskError> {
        Placement::parse_mask(s).map(CpuMask)
    }
}

impl fmt::Display for CpuMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The command-line flags of `p`, the same for llama-bench and pocket bench.
pub fn flags(p: &Placement) -> Vec<String> {
    vec![
        "--cpu-mask".into(),
        CpuMask(p.cpu_mask).to_string(),
        "--cpu-strict".into(),
        u8::from(p.strict).to_string(),
        "--poll".into(),
        p.poll.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_parse_once_and_print_as_llama_cpp_reads_them() {
        let m: CpuMask = "ff".parse().unwrap();
        assert_eq!((m.bits(), m.to_string()), (255, "0xff".to_string()));
        assert_eq!("0x3".parse::<CpuMask>().unwrap().bits(), 3);
        assert_eq!(CpuMask::default().to_string(), "0x0");
        assert!("0xg".parse::<CpuMask>().is_err());
        let p = Placement {
            cpu_mask: 3,
            strict: true,
            poll: 0,
        };
        assert_eq!(
            flags(&p).join(" "),
            "--cpu-mask 0x3 --cpu-strict 1 --poll 0"
        );
    }
}
