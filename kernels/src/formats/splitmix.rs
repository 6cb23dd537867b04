//! SplitMix64, the random source of the kernel tests: the unit tests' `test_util::Rng` and
//! the integration tests' `tests/common` (which include this file by path) step the same
//! generator.

/// Advances `state` and returns the next 64 random bits.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
