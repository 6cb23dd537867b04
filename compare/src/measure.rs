//! One child process measured from outside: wall time, exit status and peak resident set
//! (the child's `ru_maxrss`), without `unsafe`.
//!
//! A child's own rusage comes from `wait4`, which std does not expose. Instead the running
//! binary re-executes itself as a small wrapper (`<exe> --pocket-measure-child PROGRAM
//! ARGS...`) that starts PROGRAM with the wrapper's stdio, waits for it, and reads
//! `getrusage(RUSAGE_CHILDREN)`: the wrapper's only child is PROGRAM, so that is PROGRAM's
//! `ru_maxrss` (the largest of its reaped descendants included, as wait4 reports it). The
//! wrapper appends one report line to its stderr after PROGRAM has exited; the parent cuts
//! it off. A binary that measures must call [`wrapper_main_if_requested`] first thing in
//! `main` (the `pocket` binary does, in `cli::main`).
//!
//! On Linux a child's `ru_maxrss` is at least its parent's peak RSS at spawn time (exec
//! records the old mm's high-water mark); the wrapper is a freshly started process, so that
//! floor is a few MiB whatever the measuring process holds.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The wrapper's first argument (not a subcommand: never shown in `--help`).
pub const WRAPPER_FLAG: &str = "--pocket-measure-child";
/// Starts the wrapper's report line on stderr (a NUL never appears in the tools' text).
const REPORT_MARK: &str = "\0pocket-measure ";

/// What went wrong measuring a child.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("cannot find the running binary to measure through: {0}")]
    NoWrapper(std::io::Error),
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: OsString,
        source: std::io::Error,
    },
    #[error("reading the output of {program:?}: {source}")]
    Read {
        program: OsString,
        source: std::io::Error,
    },
    #[error("measuring {program:?} failed (no report from the wrapper):\n{stderr}")]
    NoReport { program: OsString, stderr: String },
}

/// A finished child process, measured from outside.
#[derive(Debug, Clone)]
pub struct ProcessStats {
    /// Spawn to reap.
    pub wall: Duration,
    /// The child's peak resident set (rusage `ru_maxrss`), in bytes.
    pub peak_rss_bytes: u64,
    /// Exit code (`None`: killed by a signal).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ProcessStats {
    /// `exit 3` or `killed by a signal`, and the last 15 lines of stderr: why a run failed.
    pub fn failure(&self) -> String {
        let lines: Vec<&str> = self.stderr.lines().collect();
        let tail = &lines[lines.len().saturating_sub(15)..];
        format!(
            "({}):\n{}",
            self.exit_code
                .map_or("killed by a signal".into(), |c| format!("exit {c}")),
            tail.join("\n")
        )
    }
}

/// Runs `cmd` to completion with its output captured (stdin empty), through the wrapper,
/// and measures its wall time, exit status and peak RSS. `cmd`'s program, arguments,
/// environment changes and working directory are kept.
pub fn run_measured(cmd: Command) -> Result<ProcessStats, MeasureError> {
    let exe = wrapper_exe().map_err(MeasureError::NoWrapper)?;
    let program = cmd.get_program().to_os_string();
    let mut wrapped = Command::new(exe);
    wrapped.arg(WRAPPER_FLAG).arg(&program).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = wrapped.spawn().map_err(|source| MeasureError::Spawn {
        program: program.clone(),
        source,
    })?;
    let mut err_pipe = child.stderr.take().expect("stderr is piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let mut out = Vec::new();
    let read = child
        .stdout
        .take()
        .expect("stdout is piped")
        .read_to_end(&mut out);
    let waited = child.wait();
    let wall = start.elapsed();
    let err = err_reader.join().unwrap_or_default();
    let io_error = |source| MeasureError::Read {
        program: program.clone(),
        source,
    };
    read.map_err(io_error)?;
    waited.map_err(io_error)?;
    let stderr = String::from_utf8_lossy(&err).into_owned();
    let Some((stderr, report)) = split_report(&stderr) else {
        return Err(MeasureError::NoReport { program, stderr });
    };
    Ok(ProcessStats {
        wall,
        peak_rss_bytes: report.max_rss_bytes,
        exit_code: report.exit_code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: stderr.to_string(),
    })
}

/// The binary that runs as the wrapper: `$POCKET_MEASURE_EXE`, else the running one.
fn wrapper_exe() -> std::io::Result<PathBuf> {
    match std::env::var_os("POCKET_MEASURE_EXE").filter(|p| !p.is_empty()) {
        Some(p) => Ok(p.into()),
        None => std::env::current_exe(),
    }
}

/// The wrapper's report: the child's exit code and peak RSS.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    exit_code: Option<i32>,
    max_rss_bytes: u64,
}

impl Report {
    fn line(&self) -> String {
        let code = self.exit_code.map_or("signal".into(), |c| c.to_string());
        format!("{REPORT_MARK}exit={code} maxrss={}\n", self.max_rss_bytes)
    }
}

/// The child's stderr and the wrapper's report, if its last line is one.
fn split_report(stderr: &str) -> Option<(&str, Report)> {
    let at = stderr.rfind(REPORT_MARK)?;
    let line = stderr[at + REPORT_MARK.len()..].trim_end();
    let mut exit_code = None;
    let mut max_rss = None;
    for field in line.split(' ') {
        match field.split_once('=')? {
            ("exit", "signal") => exit_code = Some(None),
            ("exit", c) => exit_code = Some(Some(c.parse().ok()?)),
            ("maxrss", b) => max_rss = Some(b.parse().ok()?),
            _ => return None,
        }
    }
    let report = Report {
        exit_code: exit_code?,
        max_rss_bytes: max_rss?,
    };
    Some((&stderr[..at], report))
}

/// When this process was started as the wrapper (`WRAPPER_FLAG PROGRAM ARGS...`): runs
/// PROGRAM, writes the report, and returns the wrapper's exit status; otherwise `None`.
pub fn wrapper_main_if_requested() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != WRAPPER_FLAG {
        return None;
    }
    let Some(program) = args.next() else {
        eprintln!("{WRAPPER_FLAG}: no program to run");
        return Some(ExitCode::FAILURE);
    };
    Some(match wrap(program, args) {
        Ok(report) => {
            eprint!("{}", report.line());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{WRAPPER_FLAG}: {e}");
            ExitCode::FAILURE
        }
    })
}

/// Runs PROGRAM as this process's only child and reads its rusage.
fn wrap(program: OsString, args: impl Iterator<Item = OsString>) -> std::io::Result<Report> {
    let status = Command::new(&program).args(args).status()?;
    Ok(Report {
        exit_code: status.code(),
        max_rss_bytes: children_max_rss()?,
    })
}

#[cfg(unix)]
fn children_max_rss() -> std::io::Result<u64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).map_err(std::io::Error::from)?;
    Ok(max_rss_bytes(usage.max_rss()))
}

#[cfg(not(unix))]
fn children_max_rss() -> std::io::Result<u64> {
    Ok(0)
}

/// This process's peak resident set so far, in bytes (0 where unknown).
pub fn self_peak_rss() -> u64 {
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrusage, UsageWho};
        getrusage(UsageWho::RUSAGE_SELF).map_or(0, |u| max_rss_bytes(u.max_rss()))
    }
    #[cfg(not(unix))]
    0
}

/// `ru_maxrss` in bytes: Linux reports KiB, macOS bytes.
#[cfg(unix)]
fn max_rss_bytes(ru_maxrss: std::ffi::c_long) -> u64 {
    let unit: u64 = if cfg!(target_os = "macos") { 1 } else { 1024 };
    ru_maxrss.max(0) as u64 * unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_round_trips_and_is_cut_from_stderr() {
        for exit_code in [Some(0), Some(3), None] {
            let r = Report {
                exit_code,
                max_rss_bytes: 123 << 20,
            };
            let stderr = format!("child says\nno newline at end{}", r.line());
            let (rest, back) = split_report(&stderr).unwrap();
            assert_eq!(rest, "child says\nno newline at end");
            assert_eq!(back, r);
        }
        assert!(split_report("plain stderr\n").is_none());
        assert!(split_report(&format!("{REPORT_MARK}exit=x maxrss=1\n")).is_none());
    }

    #[test]
    fn self_peak_rss_is_measured() {
        // A test binary with its libraries mapped holds more than 1 MiB.
        #[cfg(unix)]
        assert!(self_peak_rss() > 1 << 20);
    }
}
