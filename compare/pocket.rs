//! `pocket`: the command-line entry point. Every subcommand lives in `pocket_compare::cli`.
fn main() -> std::process::ExitCode {
    pocket_compare::cli::main()
}
