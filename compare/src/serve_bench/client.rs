//! The benchmark's HTTP client: hyper's HTTP/1.1 client over a tokio TCP stream, one
//! connection per request (as independent users would open), the response body read frame
//! by frame so that the first token's arrival is timed when its bytes arrive.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{header, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use super::sse::{parse_chunk, Chunk, FinalStats, SseParser};
use super::ServeBenchError;

/// The longest one request may take before the benchmark gives up on the server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// One streamed completion as the client saw it.
#[derive(Debug, Clone)]
pub struct StreamTiming {
    /// From sending the request to the first token event.
    pub ttft: Duration,
    /// From sending the request to the final event.
    pub total: Duration,
    /// When the final event arrived.
    pub done_at: Instant,
    /// Token events received.
    pub token_events: u64,
    /// What the final event says: the server's counts and timings.
    pub server: FinalStats,
    /// The generated text (the token events' contents joined).
    pub text: String,
}

/// Sends one request on a new connection; the response with its body still unread.
async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<hyper::Response<hyper::body::Incoming>, ServeBenchError> {
    let http = |e: hyper::Error| ServeBenchError::Http(format!("{method} {path}: {e}"));
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ServeBenchError::Http(format!("connect {addr}: {e}")))?;
    tcp.set_nodelay(true).ok();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(http)?;
    // The connection's I/O runs beside the request; it ends with the response.
    tokio::spawn(conn);
    let payload = body.map(Value::to_string).unwrap_or_default();
    let req = Request::builder()
        .method(method.clone())
        .uri(path)
        .header(header::HOST, addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| ServeBenchError::Http(format!("{method} {path}: {e}")))?;
    sender.send_request(req).await.map_err(http)
}

/// A whole non-streamed exchange: (status, body).
pub async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<(StatusCode, Vec<u8>), ServeBenchError> {
    let resp = send(addr, method.clone(), path, body).await?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ServeBenchError::Http(format!("{method} {path}: {e}")))?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}

/// POST JSON, expect 200, parse the JSON answer.
pub async fn post_json(
    addr: SocketAddr,
    path: &str,
    body: &Value,
) -> Result<Value, ServeBenchError> {
    let (status, bytes) = request(addr, Method::POST, path, Some(body)).await?;
    let text = String::from_utf8_lossy(&bytes);
    if status != StatusCode::OK {
        return Err(ServeBenchError::Status {
            path: path.to_string(),
            status: status.as_u16(),
            body: text.chars().take(300).collect(),
        });
    }
    serde_json::from_str(&text).map_err(|e| ServeBenchError::Http(format!("POST {path}: {e}")))
}

/// The server's token ids of `text` (special tokens in it parsed; BOS added with
/// `add_special`); an error for none.
pub async fn tokenize(
    addr: SocketAddr,
    text: &str,
    add_special: bool,
) -> Result<Vec<u32>, ServeBenchError> {
    let body =
        serde_json::json!({"content": text, "add_special": add_special, "parse_special": true});
    let v = post_json(addr, "/tokenize", &body).await?;
    let ids: Vec<u32> = v["tokens"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .map(|t| t as u32)
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() {
        return Err(ServeBenchError::EmptyPrompt);
    }
    Ok(ids)
}

/// Streams one `/completion` request and times it.
pub async fn stream_completion(
    addr: SocketAddr,
    body: &Value,
) -> Result<StreamTiming, ServeBenchError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, stream_inner(addr, body)).await {
        Ok(r) => r,
        Err(_) => Err(ServeBenchError::Http(format!(
            "POST /completion: no answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

async fn stream_inner(addr: SocketAddr, body: &Value) -> Result<StreamTiming, ServeBenchError> {
    let t0 = Instant::now();
    let resp = send(addr, Method::POST, "/completion", Some(body)).await?;
    let status = resp.status();
    let mut body_in = resp.into_body();
    if status != StatusCode::OK {
        let bytes = body_in
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(ServeBenchError::Status {
            path: "/completion".into(),
            status: status.as_u16(),
            body: String::from_utf8_lossy(&bytes).chars().take(300).collect(),
        });
    }
    let mut parser = SseParser::default();
    let mut first: Option<Instant> = None;
    let mut token_events = 0u64;
    let mut text = String::new();
    while let Some(frame) = body_in.frame().await {
        let frame = frame.map_err(|e| ServeBenchError::Http(format!("reading the stream: {e}")))?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = Instant::now();
        for event in parser.push(data) {
            match parse_chunk(&event)? {
                Chunk::Token(piece) => {
                    first.get_or_insert(now);
                    token_events += 1;
                    text.push_str(&piece);
                }
                Chunk::Final(f) => {
                    let first = first.ok_or_else(|| {
                        ServeBenchError::Stream("the stream ended before any token".into())
                    })?;
                    return Ok(StreamTiming {
                        ttft: first - t0,
                        total: now - t0,
                        done_at: now,
                        token_events,
                        server: f,
                        text,
                    });
                }
            }
        }
    }
    Err(ServeBenchError::Stream(
        "the stream closed without a final (\"stop\": true) event".into(),
    ))
}

/// GET `path`'s status (None while nothing listens).
pub async fn status_of(addr: SocketAddr, path: &str) -> Option<StatusCode> {
    request(addr, Method::GET, path, None)
        .await
        .ok()
        .map(|(s, _)| s)
}
