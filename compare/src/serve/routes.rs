//! The router: every endpoint, the API-key and loading gate, the body limit, and the
//! endpoints that answer from shared state (health, models, props, slots, metrics,
//! tokenize, detokenize, apply-template).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::api::{parse_body, ChatRequest, GenFields};
use super::complete::{chat_completions, completion, render_chat, v1_completions};
use super::error::{bad, ApiError};
use super::shapes::now_secs;
use super::state::{App, Loaded};

pub const CHAT_PAGE: &str = include_str!("chat.html");

pub fn router(app: Arc<App>) -> Router {
    let limit = app.args.max_body;
    let page = if app.args.no_webui {
        Router::new()
    } else {
        Router::new().route("/", get(|| async { Html(CHAT_PAGE) }))
    };
    page.route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/models", get(models))
        .route("/v1/models", get(models))
        .route("/props", get(props))
        .route("/slots", get(slots))
        .route("/metrics", get(metrics))
        .route("/completion", post(completion))
        .route("/completions", post(completion))
        .route("/v1/completions", post(v1_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/systemone", post(super::systemone::systemone))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/apply-template", post(apply_template))
        .route(
            "/lora-adapters",
            get(super::lora::list).post(super::lora::set),
        )
        .route("/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/v1/chat/completions/input_tokens", post(chat_input_tokens))
        .fallback(|| async { ApiError::NotFound("File Not Found".into()) })
        .layer(middleware::from_fn_with_state(app.clone(), gate))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// The model, or 503 while it loads.
pub fn loaded(app: &App) -> Result<&Loaded, ApiError> {
    app.loaded
        .get()
        .ok_or_else(|| ApiError::Unavailable("Loading model".into()))
}

/// CORS (a preflight `OPTIONS` is answered here, before the API key, as browsers send
/// none with it), then the API key, then the loading state.
async fn gate(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let preflight = req.method() == axum::http::Method::OPTIONS;
    let mut resp = if preflight {
        StatusCode::OK.into_response()
    } else {
        checked(&app, &headers, req, next).await
    };
    app.args.cors.apply(&headers, preflight, &mut resp);
    resp
}

/// 401 unless `path` is public or the request carries `key` (as a bearer token or in
/// `x-api-key`).
pub fn key_refused(key: Option<&str>, headers: &HeaderMap, path: &str) -> Option<Response> {
    let key = key?;
    if matches!(path, "/health" | "/v1/health" | "/") {
        return None;
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let x_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    match bearer == Some(key) || x_key == Some(key) {
        true => None,
        false => Some(ApiError::Authentication.into_response()),
    }
}

/// A body over the limit, answered in the API's error shape.
pub fn shape_limit(resp: Response, max_body: usize) -> Response {
    if resp.status() != StatusCode::PAYLOAD_TOO_LARGE {
        return resp;
    }
    let e = bad(format!(
        "the request body is larger than the limit of {max_body} bytes"
    ));
    (StatusCode::PAYLOAD_TOO_LARGE, Json(e.body())).into_response()
}

async fn checked(app: &App, headers: &HeaderMap, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if let Some(refused) = key_refused(app.args.api_key.as_deref(), headers, path) {
        return refused;
    }
    if path != "/" && app.loaded.get().is_none() {
        return ApiError::Unavailable("Loading model".into()).into_response();
    }
    shape_limit(next.run(req).await, app.args.max_body)
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The model's entry of `/v1/models` (also merged into a router's `/models`).
pub fn model_entry(app: &App) -> Result<Value, ApiError> {
    let l = loaded(app)?;
    let c = &l.model.config;
    Ok(json!({
        "id": app.model_name,
        "object": "model",
        "created": now_secs(),
        "owned_by": "pocket",
        "aliases": super::state::aliases(&app.args),
        "tags": super::state::list(app.args.tags.as_deref()),
        "meta": {"n_vocab": c.n_vocab, "n_ctx_train": c.n_ctx_train, "n_embd": c.n_embd},
    }))
}

async fn models(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let entry = model_entry(&app)?;
    Ok(Json(json!({
        "object": "list",
        "data": [entry],
        "models": [{"name": app.model_name, "model": app.model_name, "type": "model"}],
    })))
}

async fn props(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let l = loaded(&app)?;
    let defaults = GenFields::default()
        .settings(&app.args, &l.model.tokenizer)?
        .to_json(l.n_ctx_slot);
    Ok(Json(json!({
        "default_generation_settings": {"n_ctx": l.n_ctx_slot, "params": defaults, "id": 0, "is_processing": false},
        "total_slots": app.args.parallel,
        "model_alias": app.model_name,
        "model_path": app.args.model.as_deref().map(|m| m.display().to_string()),
        "chat_template": l.template.source(),
        "bos_token": l.template.bos_token(),
        "eos_token": l.template.eos_token(),
        "modalities": {"vision": false, "audio": false},
        "build_info": concat!("pocket ", env!("CARGO_PKG_VERSION")),
    })))
}

async fn slots(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    if app.args.no_slots {
        return Err(ApiError::NotSupported(
            "This server does not support slots endpoint. Start it with `--slots`".into(),
        ));
    }
    let views = app.shared.slots.lock().unwrap().clone();
    Ok(Json(Value::Array(
        views.iter().map(|v| v.to_json()).collect(),
    )))
}

async fn metrics(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    if !app.args.metrics {
        return Err(ApiError::NotSupported(
            "This server does not support metrics endpoint. Start it with `--metrics`".into(),
        ));
    }
    let text = app.shared.metrics.lock().unwrap().prometheus();
    let started = app.started_unix.to_string();
    let headers = [
        (
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4".to_string(),
        ),
        (
            header::HeaderName::from_static("process-start-time-unix"),
            started,
        ),
    ];
    Ok((headers, text).into_response())
}

#[derive(Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

async fn tokenize(State(app): State<Arc<App>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let req: TokenizeRequest = parse_body(&body)?;
    let tok = &loaded(&app)?.model.tokenizer;
    let ids = tok.encode(&req.content, req.add_special, req.parse_special);
    if !req.with_pieces {
        return Ok(Json(json!({"tokens": ids})));
    }
    let pieces: Vec<Value> = ids
        .iter()
        .map(|&id| {
            let bytes = tok.token_to_piece(id);
            let piece = match String::from_utf8(bytes) {
                Ok(s) => json!(s),
                Err(e) => json!(e.into_bytes()),
            };
            json!({"id": id, "piece": piece})
        })
        .collect();
    Ok(Json(json!({"tokens": pieces})))
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    #[serde(default)]
    tokens: Vec<u32>,
}

async fn detokenize(State(app): State<Arc<App>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let req: DetokenizeRequest = parse_body(&body)?;
    let tok = &loaded(&app)?.model.tokenizer;
    if let Some(&id) = req.tokens.iter().find(|&&id| id as usize >= tok.n_vocab()) {
        return Err(bad(format!(
            "token id {id} is outside the vocabulary of {}",
            tok.n_vocab()
        )));
    }
    let bytes = tok.detokenize(&req.tokens, false, true);
    Ok(Json(json!({"content": String::from_utf8_lossy(&bytes)})))
}

/// How many tokens a chat request's prompt is (llama-server's token counting endpoint).
async fn chat_input_tokens(
    State(app): State<Arc<App>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let req: ChatRequest = parse_body(&body)?;
    let prompt = render_chat(&app, &req)?;
    let n = loaded(&app)?
        .model
        .tokenizer
        .encode(&prompt, true, true)
        .len();
    Ok(Json(json!({"input_tokens": n})))
}

async fn apply_template(State(app): State<Arc<App>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let req: ChatRequest = parse_body(&body)?;
    Ok(Json(json!({"prompt": render_chat(&app, &req)?})))
}
