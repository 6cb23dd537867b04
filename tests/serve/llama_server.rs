//! llama-server (the b11434 build in the fixture cache) as a child process of a test: on a
//! free port, killed on drop; curl as the client, as for `pocket serve`.
#![allow(dead_code)]

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::serve_common::curl;

pub struct LlamaServer {
    child: Child,
    pub base: String,
    /// Everything it wrote to stderr so far (drained by a thread: a full pipe would block it).
    log: Arc<Mutex<String>>,
}

pub fn binary() -> PathBuf {
    crate::common::fixture("llama.cpp-build/bin/llama-server")
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().unwrap().port()
}

impl LlamaServer {
    /// Starts `llama-server -m MODEL --port P -t 2 ARGS` and waits for /health to say ok;
    /// `Err(its stderr)` if it exits first (a model it refuses to load).
    pub fn start(model: &Path, args: &[&str]) -> Result<LlamaServer, String> {
        let port = free_port();
        let mut child = Command::new(binary())
            .arg("-m")
            .arg(model)
            .args(["--port", &port.to_string(), "-t", "2"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start llama-server");
        let log = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = log.clone();
        let drain = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut s = LlamaServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let t0 = Instant::now();
        loop {
            if curl(&[&format!("{}/health", s.base)]).0 == 200 {
                return Ok(s);
            }
            if let Ok(Some(_)) = s.child.try_wait() {
                let _ = drain.join();
                return Err(s.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "llama-server did not load {}",
                model.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// POST a raw JSON body: (status, body).
    pub fn post_raw(&self, path: &str, body: &str) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        curl(&[
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
            &url,
        ])
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
