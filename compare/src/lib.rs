//! pocket-compare: the `pocket` command line and the pocket-vs-llama.cpp comparator.

pub mod cli;
pub mod inspect;
