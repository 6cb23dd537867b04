//! `pocket bench --profile FILE`: a sampling CPU profile of the bench (pprof-rs: a SIGPROF
//! timer at [`FREQUENCY`] Hz, stacks unwound from the release build's debug info), written
//! as a flamegraph (`.svg`) or as pprof's protobuf (`.pb`, for `go tool pprof` and other
//! viewers), chosen by the file's extension.

use std::path::{Path, PathBuf};

/// `--profile` with a file it cannot write, or a profiler that failed.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("--profile {}: name a .svg (flamegraph) or .pb (pprof protobuf) file", .0.display())]
    Extension(PathBuf),
    #[error("--profile needs a Unix system (pprof-rs samples with SIGPROF)")]
    Unsupported,
    #[cfg(unix)]
    #[error("cannot start the profiler: {0}")]
    Start(pprof::Error),
    #[cfg(unix)]
    #[error("profile report: {0}")]
    Report(pprof::Error),
    /// Writing the profile file (`what` failed: an I/O or encoding error).
    #[error("{}: {what}", path.display())]
    Write { path: PathBuf, what: String },
}

type Result<T> = std::result::Result<T, ProfileError>;

/// Samples per second.
pub const FREQUENCY: i32 = 999;

/// What `--profile` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Flamegraph,
    Protobuf,
}

/// The output kind for `path` (`.svg` or `.pb`).
pub fn kind_of(path: &Path) -> Result<Kind> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => Ok(Kind::Flamegraph),
        Some("pb") => Ok(Kind::Protobuf),
        _ => Err(ProfileError::Extension(path.to_path_buf())),
    }
}

/// A running profile; [`Profile::finish`] writes it.
pub struct Profile {
    path: PathBuf,
    kind: Kind,
    #[cfg(unix)]
    guard: pprof::ProfilerGuard<'static>,
}

impl Profile {
    /// Starts sampling every thread of the process.
    pub fn start(path: &Path) -> Result<Profile> {
        let kind = kind_of(path)?;
        #[cfg(unix)]
        {
            // Unwinding inside libc / the vDSO from a signal handler can deadlock.
            let guard = pprof::ProfilerGuardBuilder::default()
                .frequency(FREQUENCY)
                .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                .build()
                .map_err(ProfileError::Start)?;
            Ok(Profile {
                path: path.to_path_buf(),
                kind,
                guard,
            })
        }
        #[cfg(not(unix))]
        {
            let _ = kind;
            Err(ProfileError::Unsupported)
        }
    }

    /// Stops sampling and writes the file; returns the number of samples.
    pub fn finish(self) -> Result<u64> {
        #[cfg(unix)]
        {
            use pprof::protos::Message;
            let report = self.guard.report().build().map_err(ProfileError::Report)?;
            let samples: u64 = report.data.values().map(|&n| n as u64).sum();
            let err = |e: &dyn std::fmt::Display| ProfileError::Write {
                path: self.path.clone(),
                what: e.to_string(),
            };
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
            }
            match self.kind {
                Kind::Flamegraph => {
                    let file = std::fs::File::create(&self.path).map_err(|e| err(&e))?;
                    let mut opts = pprof::flamegraph::Options::default();
                    opts.title = "pocket bench".into();
                    report
                        .flamegraph_with_options(file, &mut opts)
                        .map_err(|e| err(&e))?;
                }
                Kind::Protobuf => {
                    let profile = report.pprof().map_err(|e| err(&e))?;
                    let mut buf = Vec::new();
                    profile.encode(&mut buf).map_err(|e| err(&e))?;
                    std::fs::write(&self.path, buf).map_err(|e| err(&e))?;
                }
            }
            Ok(samples)
        }
        #[cfg(not(unix))]
        {
            let _ = (self.path, self.kind);
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_extension() {
        assert_eq!(kind_of(Path::new("a/b.svg")).unwrap(), Kind::Flamegraph);
        assert_eq!(kind_of(Path::new("p.pb")).unwrap(), Kind::Protobuf);
        assert!(kind_of(Path::new("p.txt")).is_err());
    }
}
