//! A test `main` for the test binaries that measure child processes (`harness = false`):
//! `measure::run_measured` re-executes the running binary as its measuring wrapper, so the
//! binary must answer that call before it runs tests.

use std::process::ExitCode;

/// Serves as the wrapper when asked to; otherwise runs `tests` (positional arguments filter
/// by substring, as libtest's do) and prints libtest's summary line.
pub fn main(tests: &[(&str, fn())]) -> ExitCode {
    if let Some(code) = pocket_compare::measure::wrapper_main_if_requested() {
        return code;
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for &(name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let ok = std::panic::catch_unwind(test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `[(name, fn)]` for test functions, named as they are written.
macro_rules! tests {
    ($($f:ident),* $(,)?) => {
        [$((stringify!($f), $f as fn())),*]
    };
}
