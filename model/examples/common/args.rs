//! The command line the timing examples share: `MODEL [N ...]`, positional numbers each
//! with its default.

/// The model path and one number per entry of `defaults` (a missing one takes its
/// default); exits with `usage` on a missing model or a number that does not parse.
pub fn model_and_numbers<const N: usize>(
    usage: &str,
    defaults: [usize; N],
) -> (String, [usize; N]) {
    let a: Vec<String> = std::env::args().collect();
    let fail = |why: &str| -> ! {
        eprintln!("{why}\nusage: {usage}");
        std::process::exit(2)
    };
    let Some(path) = a.get(1).cloned() else {
        fail("no model given")
    };
    let mut n = defaults;
    for (i, v) in n.iter_mut().enumerate() {
        if let Some(s) = a.get(i + 2) {
            *v = s
                .parse()
                .unwrap_or_else(|_| fail(&format!("`{s}` is not a number")));
        }
    }
    (path, n)
}
