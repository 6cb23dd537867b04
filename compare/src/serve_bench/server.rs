//! The two servers under test as child processes: `pocket serve` (this executable) and
//! llama-server, started with the same model, context, slots and threads, and killed when
//! their handle drops, so that an error, a panic or Ctrl-C never leaves one running.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde::{Deserialize, Serialize};

use super::client::status_of;
use super::ServeBenchError;

/// How long a server may take from start to a 200 on `/health`.
const LOAD_TIMEOUT: Duration = Duration::from_secs(180);
/// The stderr lines kept for an error message.
const TAIL_LINES: usize = 20;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    Pocket,
    LlamaServer,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Pocket => "pocket",
            Engine::LlamaServer => "llama-server",
        }
    }
}

/// What both servers are started with.
#[derive(Debug, Clone)]
pub struct Launch {
    pub model: PathBuf,
    pub ctx_size: usize,
    pub slots: usize,
    pub threads: u32,
    /// More flags both servers take alike (speculative decoding: `--spec-type ...`).
    pub extra: Vec<String>,
}

/// A running server; killed on drop.
pub struct ServerProcess {
    pub engine: Engine,
    pub addr: SocketAddr,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl ServerProcess {
    /// Starts `engine` (`pocket_exe`: this program; `llama_server`: its binary) and waits
    /// until `/health` answers 200.
    pub async fn start(
        engine: Engine,
        launch: &Launch,
        pocket_exe: &Path,
        llama_server: &Path,
    ) -> Result<ServerProcess, ServeBenchError> {
        let (program, args) = match engine {
            Engine::Pocket => (pocket_exe, pocket_args(launch)),
            Engine::LlamaServer => (llama_server, llama_server_args(launch, free_port()?)),
        };
        let mut child = Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ServeBenchError::Spawn {
                program: program.to_path_buf(),
                source,
            })?;
        let (tail, listening) = drain_stderr(&mut child);
        let mut server = ServerProcess {
            engine,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child,
            tail,
        };
        server.addr = match engine {
            // pocket serve binds port 0 and says where.
            Engine::Pocket => server.await_listening(listening).await?,
            Engine::LlamaServer => port_arg(&args),
        };
        server.await_health().await?;
        Ok(server)
    }

    async fn await_listening(
        &mut self,
        listening: mpsc::Receiver<SocketAddr>,
    ) -> Result<SocketAddr, ServeBenchError> {
        let t0 = Instant::now();
        loop {
            if let Ok(a) = listening.try_recv() {
                return Ok(a);
            }
            self.check_alive()?;
            if t0.elapsed() > LOAD_TIMEOUT {
                return Err(self.failed("did not say where it listens"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn await_health(&mut self) -> Result<(), ServeBenchError> {
        let t0 = Instant::now();
        loop {
            if status_of(self.addr, "/health").await == Some(StatusCode::OK) {
                return Ok(());
            }
            self.check_alive()?;
            if t0.elapsed() > LOAD_TIMEOUT {
                return Err(self.failed("did not become healthy"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn check_alive(&mut self) -> Result<(), ServeBenchError> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(self.failed(&format!("exited ({status})"))),
            _ => Ok(()),
        }
    }

    /// An error naming the server, with the tail of its stderr.
    pub fn failed(&self, what: &str) -> ServeBenchError {
        // Give the stderr thread a moment to read the last lines.
        std::thread::sleep(Duration::from_millis(100));
        let tail = self
            .tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"));
        ServeBenchError::Server {
            engine: self.engine.name(),
            what: what.to_string(),
            stderr_tail: tail.unwrap_or_default(),
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pocket_args(l: &Launch) -> Vec<String> {
    let mut a = vec![
        "serve".to_string(),
        "-m".into(),
        l.model.display().to_string(),
    ];
    a.extend(common_args(l));
    a.extend(["--port".into(), "0".into()]);
    a
}

fn llama_server_args(l: &Launch, port: u16) -> Vec<String> {
    let mut a = vec!["-m".to_string(), l.model.display().to_string()];
    a.extend(common_args(l));
    a.extend(["--port".into(), port.to_string()]);
    a
}

/// The flags both servers take with the same meaning (llama-server's names).
fn common_args(l: &Launch) -> Vec<String> {
    [
        "--host",
        "127.0.0.1",
        "-c",
        &l.ctx_size.to_string(),
        "-np",
        &l.slots.to_string(),
        "-t",
        &l.threads.to_string(),
    ]
    .map(String::from)
    .into_iter()
    .chain(l.extra.iter().cloned())
    .collect()
}

fn port_arg(args: &[String]) -> SocketAddr {
    let port = args
        .windows(2)
        .find(|w| w[0] == "--port")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(0);
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A port nothing listens on now (the OS's pick; llama-server cannot bind port 0 and say).
fn free_port() -> Result<u16, ServeBenchError> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| ServeBenchError::Http(format!("no free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| ServeBenchError::Http(e.to_string()))?
        .port())
}

/// Reads the child's stderr on a thread (so it never blocks on a full pipe), keeping its
/// last lines, and sends the address of `pocket serve`'s "listening on" line.
fn drain_stderr(child: &mut Child) -> (Arc<Mutex<VecDeque<String>>>, mpsc::Receiver<SocketAddr>) {
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let (tx, rx) = mpsc::channel();
    if let Some(err) = child.stderr.take() {
        let tail = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
    }
    (tail, rx)
}

/// The address in `pocket serve: listening on http://127.0.0.1:PORT (loading ...)`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_servers_get_the_same_settings() {
        let l = Launch {
            model: "m.gguf".into(),
            ctx_size: 2048,
            slots: 4,
            threads: 2,
            extra: vec!["--spec-type".into(), "ngram-simple".into()],
        };
        let p = pocket_args(&l);
        let s = llama_server_args(&l, 4321);
        assert_eq!(p[..3], ["serve", "-m", "m.gguf"]);
        assert_eq!(p[3..p.len() - 2], s[2..s.len() - 2]);
        assert_eq!(port_arg(&s).port(), 4321);
        assert!(s.join(" ").contains("-c 2048 -np 4 -t 2"));
    }

    #[test]
    fn reads_pocket_serves_listening_line() {
        let a = listening_addr("pocket serve: listening on http://127.0.0.1:40123 (loading m)");
        assert_eq!(a, Some(SocketAddr::from(([127, 0, 0, 1], 40123))));
        assert_eq!(
            listening_addr("main: server is listening on 127.0.0.1:8080"),
            None
        );
    }
}
