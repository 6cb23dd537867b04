//! `pocket serve` under load, on loopback only: 200 requests, 8 at a time, a mix of
//! `/completion` and `/v1/chat/completions`, half of them streamed, each with curl. Every
//! request must succeed with the shape it asked for, and the server's resident memory
//! (VmRSS from /proc/PID/status) must not grow from the end of the first 100 requests to
//! the end of the second 100: a leak per request (a job, a channel, a slot's state, an SSE
//! stream) would show as growth proportional to the requests served.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{chunks, Server};

const REQUESTS_PER_HALF: usize = 100;
const CONCURRENCY: usize = 8;
/// Allowed RSS growth between the halves: allocator noise (arena reuse, page rounding),
/// far below what 100 leaked requests (each a prompt, a KV slot's state, buffers) would add.
const RSS_SLACK_KIB: u64 = 4096;

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// The `i`-th request of the mix: (path, body, streamed).
fn request(i: usize) -> (&'static str, Value, bool) {
    let stream = i % 2 == 1;
    let n = 4 + (i % 5) * 3; // 4..16 tokens
    let topic = ["France", "the sea", "a robot", "tea", "the moon"][i % 5];
    if (i / 2).is_multiple_of(2) {
        let body = json!({"prompt": format!("A short note about {topic}:"), "n_predict": n,
                          "temperature": 0.7, "seed": i, "stream": stream});
        ("/completion", body, stream)
    } else {
        let body = json!({"messages": [{"role": "user", "content": format!("Tell me about {topic}.")}],
                          "max_tokens": n, "temperature": 0.7, "seed": i, "stream": stream});
        ("/v1/chat/completions", body, stream)
    }
}

/// Sends request `i` and checks its answer; returns an error message instead of panicking
/// so one worker's failure is reported with the request that caused it.
fn send(s: &Server, i: usize) -> Result<(), String> {
    let (path, body, stream) = request(i);
    let extra: &[&str] = if stream { &["-N"] } else { &[] };
    let (status, text) = s.post_raw(path, &body.to_string(), extra);
    if status != 200 {
        return Err(format!("request {i} {path}: HTTP {status}: {text}"));
    }
    let ok = match (path, stream) {
        ("/completion", false) => serde_json::from_str::<Value>(&text)
            .is_ok_and(|v| v["stop"] == true && v["content"].is_string()),
        ("/completion", true) => {
            let ch = chunks(&serve_common::sse_data(&text));
            ch.last().is_some_and(|v| v["stop"] == true)
        }
        (_, false) => serde_json::from_str::<Value>(&text)
            .is_ok_and(|v| v["choices"][0]["message"]["content"].is_string()),
        (_, true) => {
            let data = serve_common::sse_data(&text);
            data.last().is_some_and(|d| d == "[DONE]")
                && chunks(&data)
                    .iter()
                    .any(|c| c["choices"][0]["finish_reason"].is_string())
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("request {i} {path} (stream {stream}): {text}"))
    }
}

/// Runs requests `from..to`, `CONCURRENCY` at a time; returns the failures.
fn run_half(s: &Server, from: usize, to: usize) -> Vec<String> {
    let next = AtomicUsize::new(from);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for _ in 0..CONCURRENCY {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= to {
                    break;
                }
                if let Err(e) = send(s, i) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

#[test]
fn two_hundred_mixed_requests_8_at_a_time_without_errors_or_memory_growth() {
    let s = Server::start(&common::smollm2(), &["-c", "4096", "-np", "4", "--metrics"]);
    let t0 = Instant::now();
    // Warm-up outside the measured halves: the first requests size the allocator's arenas,
    // the runtime's buffers and every slot's KV use.
    let warm = run_half(&s, 0, 2 * CONCURRENCY);
    assert!(warm.is_empty(), "{warm:#?}");
    let first = run_half(&s, 0, REQUESTS_PER_HALF);
    let rss_first = rss_kib(s.pid());
    let second = run_half(&s, REQUESTS_PER_HALF, 2 * REQUESTS_PER_HALF);
    let rss_second = rss_kib(s.pid());
    let elapsed = t0.elapsed();
    eprintln!(
        "200 requests (+{} warm-up) in {:.1} s; RSS {rss_first} KiB after the first half, {rss_second} KiB after the second",
        2 * CONCURRENCY,
        elapsed.as_secs_f64()
    );
    assert!(first.is_empty(), "first half: {first:#?}");
    assert!(second.is_empty(), "second half: {second:#?}");
    assert!(
        rss_second <= rss_first + RSS_SLACK_KIB,
        "RSS grew from {rss_first} KiB to {rss_second} KiB over 100 requests"
    );
    assert!(elapsed < Duration::from_secs(170), "took {elapsed:?}");
    // Every request was counted done, none is left on a slot or in the queue (the engine
    // publishes its counters right after it answers: allow it a moment).
    let expected = (2 * REQUESTS_PER_HALF + 2 * CONCURRENCY) as f64;
    let t1 = Instant::now();
    while s.metric("pocket:requests_done_total") < expected
        || s.metric("llamacpp:requests_processing") > 0.0
    {
        assert!(t1.elapsed() < Duration::from_secs(5), "requests still open");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.metric("pocket:requests_done_total"), expected);
    assert_eq!(s.metric("llamacpp:requests_deferred"), 0.0);
    assert_eq!(s.metric("pocket:requests_cancelled_total"), 0.0);
}
