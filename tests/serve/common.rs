//! Helpers of the `pocket serve` tests: a server on a free port (killed on drop) and curl
//! as the client (a real, independent HTTP implementation).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Server {
    child: Child,
    pub base: String,
    log: Arc<Mutex<Vec<String>>>,
    /// One server at a time: the tests' timing bounds assume the cores are theirs.
    _turn: Turn,
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    /// Whether this thread holds [`SERIAL`] (a `Server` of its own is alive).
    static HOLDS_SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// This test's turn to run a server: [`SERIAL`] held, and marked as held by this thread.
/// A std `Mutex` locked again by the thread holding it never returns, so a test that
/// started a second `Server` while its first was alive used to hang silently; it now
/// panics saying so (other tests' threads still wait their turn, as intended).
struct Turn {
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl Turn {
    fn take() -> Turn {
        assert!(
            !HOLDS_SERIAL.get(),
            "this test already has a Server alive: drop it before starting another \
             (tests/serve/common.rs runs one server at a time)"
        );
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        HOLDS_SERIAL.set(true);
        Turn { _guard: guard }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        HOLDS_SERIAL.set(false);
    }
}

impl Server {
    /// Starts `pocket serve -m MODEL --port 0 ARGS` and waits for /health to say ok.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let s = Server::spawn(model, args);
        let t0 = Instant::now();
        while s.get("/health").0 != 200 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the model did not load"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    /// Starts `pocket serve -m MODEL --port 0 ARGS` and returns once it listens (the model
    /// may still be loading).
    pub fn spawn(model: &Path, args: &[&str]) -> Server {
        let mut with_model = vec!["-m", model.to_str().expect("a UTF-8 model path")];
        with_model.extend_from_slice(args);
        Server::spawn_args(&with_model)
    }

    /// Starts `pocket serve --port 0 ARGS` (router mode when ARGS has no `-m`) and returns
    /// once it listens.
    pub fn spawn_args(args: &[&str]) -> Server {
        let turn = Turn::take();
        let mut child = Command::new(env!("CARGO_BIN_EXE_pocket"))
            .arg("serve")
            .args(["--port", "0", "-t", "2"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pocket serve");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let (base, line) = wait_for_line(&mut err, "pocket serve exited before listening", |l| {
            let rest = l.split("listening on ").nth(1)?;
            Some(rest.split(' ').next().unwrap().to_string())
        });
        // Keep draining stderr (so the server never blocks on a full pipe) into the log.
        let log = Arc::new(Mutex::new(vec![line.trim_end().to_string()]));
        let sink = log.clone();
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        Server {
            child,
            base,
            log,
            _turn: turn,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines the server wrote to stderr so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// GET: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        curl(&[&self.url(path)])
    }

    /// POST a raw body: (status, body).
    pub fn post_raw(&self, path: &str, body: &str, extra: &[&str]) -> (u16, String) {
        let url = self.url(path);
        let mut a = vec![
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
            url.as_str(),
        ];
        a.splice(0..0, extra.iter().copied());
        curl(&a)
    }

    /// POST JSON, expect 200, return the parsed body.
    pub fn post(&self, path: &str, body: &Value) -> Value {
        let (status, text) = self.post_raw(path, &body.to_string(), &[]);
        assert_eq!(status, 200, "POST {path} {body}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// POST with `stream: true`: the `data:` payloads of the SSE body, in order.
    pub fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let (status, text) = self.post_raw(path, &body.to_string(), &["-N"]);
        assert_eq!(status, 200, "POST {path} {body}: {text}");
        sse_data(&text)
    }

    /// A metric's value from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
    }

    /// Polls the metric `name` every `every` until it reaches `at_least`; after `limit`, the
    /// test fails saying `what` did not happen.
    pub fn wait_for_metric(
        &self,
        name: &str,
        at_least: f64,
        (limit, every): (Duration, Duration),
        what: &str,
    ) {
        let t0 = Instant::now();
        while self.metric(name) < at_least {
            assert!(t0.elapsed() < limit, "{what}");
            std::thread::sleep(every);
        }
    }

    /// A streaming request left running: curl's stdout, read line by line.
    pub fn open_stream(
        &self,
        path: &str,
        body: &Value,
    ) -> (Child, BufReader<std::process::ChildStdout>) {
        let mut child = Command::new("curl")
            .args([
                "-sN",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
            ])
            .arg(body.to_string())
            .arg(self.url(path))
            .stdout(Stdio::piped())
            .spawn()
            .expect("run curl");
        let out = BufReader::new(child.stdout.take().unwrap());
        (child, out)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs curl; returns (HTTP status, body).
pub fn curl(args: &[&str]) -> (u16, String) {
    let out: Output = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// Parsed JSON of SSE payloads (all but `[DONE]`).
pub fn chunks(data: &[String]) -> Vec<Value> {
    data.iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// Reads a child's stderr until `found` picks a value out of a line (the line where it
/// says where it listens): the value and that line. Panics with `exited` if the stream
/// ends first.
pub fn wait_for_line<T>(
    err: &mut impl BufRead,
    exited: &str,
    found: impl Fn(&str) -> Option<T>,
) -> (T, String) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap_or(0) > 0, "{exited}");
        if let Some(v) = found(&line) {
            return (v, line);
        }
    }
}
