//! pocket-compare: the `pocket` command line and the pocket-vs-llama.cpp comparator.
//!
//! Comparator pieces, each in its own module: llama-bench rows and their formats
//! (`bench_row`, `bench_format`), running llama.cpp's tools (`llama_bench`), the engine
//! seam both engines implement (`engine`), the machine (`sysinfo`, `bandwidth`), the stored
//! receipt and its results directory (`receipt`, `report`), plots (`plots`), trends across
//! receipts (`history`) and the regression gate (`gate`).

#![forbid(unsafe_code)]

/// `dst.f = src.f.unwrap_or(dst.f)` for each field `f`: the options a user or a request
/// gave, over the defaults.
macro_rules! overlay {
    ($dst:expr, $src:expr; $($f:ident),+ $(,)?) => {
        $( $dst.$f = $src.$f.unwrap_or($dst.$f); )+
    };
}
pub(crate) use overlay;

pub mod bandwidth;
pub mod bench_format;
pub mod bench_row;
pub mod breakdown;
pub mod cli;
pub mod comparator;
pub mod contention;
pub mod engine;
pub mod error;
pub mod gate;
pub mod history;
pub mod inspect;
pub mod llama_bench;
pub mod measure;
pub mod parity;
pub mod placement;
pub mod plots;
pub mod pocket_bench;
pub mod profiling;
pub mod receipt;
pub mod report;
pub mod roof;
pub mod serve;
pub mod serve_bench;
pub mod sysinfo;

pub use error::{Error, Result};
