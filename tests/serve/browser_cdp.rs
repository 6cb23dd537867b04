//! Headless Chromium driven over the Chrome DevTools Protocol (a WebSocket, tungstenite):
//! start the browser, open a page, evaluate JavaScript, type and press keys as a user.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use crate::serve_common::wait_for_line;

/// Debian's binary name first, then other distributions'.
const CANDIDATES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// The first Chromium on PATH that runs.
pub fn find_chromium() -> Option<PathBuf> {
    CANDIDATES.iter().map(PathBuf::from).find(|c| {
        Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A headless browser with a fresh profile; killed on drop.
pub struct Browser {
    child: Child,
    /// `ws://127.0.0.1:PORT/devtools/browser/ID`
    pub ws_url: String,
    profile: PathBuf,
}

impl Browser {
    pub fn start(binary: &PathBuf) -> Browser {
        // A fresh profile directory, removed on drop.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let profile =
            std::env::temp_dir().join(format!("pocket-chromium-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&profile).unwrap();
        let mut child = Command::new(binary)
            .args([
                "--headless",
                // The tests run as root, where Chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let (ws_url, _) = wait_for_line(
            &mut err,
            "chromium exited before opening its DevTools port",
            |l| Some(l.trim().strip_prefix("DevTools listening on ")?.to_string()),
        );
        std::thread::spawn(move || for _ in err.lines() {});
        Browser {
            child,
            ws_url,
            profile,
        }
    }

    /// Opens `url` in a new tab and connects to that tab.
    pub fn open(&self, url: &str) -> Page {
        let mut browser = Cdp::connect(&self.ws_url);
        let target = browser.call("Target.createTarget", json!({ "url": url }));
        let id = target["targetId"].as_str().expect("targetId").to_string();
        let host = self
            .ws_url
            .strip_prefix("ws://")
            .and_then(|r| r.split('/').next())
            .unwrap();
        let page = Cdp::connect(&format!("ws://{host}/devtools/page/{id}"));
        Page { cdp: page }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// One DevTools connection: numbered calls, each waiting for its own answer.
pub struct Cdp {
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Cdp {
    fn connect(url: &str) -> Cdp {
        let (ws, _) = tungstenite::connect(url).unwrap_or_else(|e| panic!("connect {url}: {e}"));
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        Cdp { ws, next_id: 1 }
    }

    /// Calls `method`; its `result` (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        loop {
            let m = self.ws.read().unwrap_or_else(|e| panic!("{method}: {e}"));
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }
}

/// A tab.
pub struct Page {
    pub cdp: Cdp,
}

impl Page {
    /// The value of a JavaScript expression (awaited if it is a promise).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.cdp.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is true.
    pub fn wait_for(&mut self, expr: &str, timeout: Duration) {
        let t0 = Instant::now();
        while self.eval(expr) != json!(true) {
            assert!(t0.elapsed() < timeout, "timed out waiting for: {expr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types text into the focused element, as a keyboard's text input would.
    pub fn type_text(&mut self, text: &str) {
        self.cdp.call("Input.insertText", json!({ "text": text }));
    }

    /// Presses and releases Enter.
    pub fn press_enter(&mut self) {
        for kind in ["keyDown", "keyUp"] {
            let mut p = json!({
                "type": kind, "key": "Enter", "code": "Enter",
                "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13,
            });
            if kind == "keyDown" {
                p["text"] = json!("\r");
            }
            self.cdp.call("Input.dispatchKeyEvent", p);
        }
    }
}
