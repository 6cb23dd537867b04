//! The router's HTTP side: its own endpoints (`/health`, `/models`, `/props`, load and
//! unload), and every model endpoint handed to the model the request names (`model` in a
//! POST body, `?model=` on a GET), as llama-server's router forwards them.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::registry::{Phase, Registry};
use crate::serve::api::parse_body;
use crate::serve::error::{bad, ApiError};
use crate::serve::routes::{key_refused, model_entry, shape_limit, CHAT_PAGE};
use crate::serve::shapes::now_secs;

type Reg = State<Arc<Registry>>;
type Params = Query<HashMap<String, String>>;

/// The POST endpoints of a model's server, forwarded by the `model` of their body.
const FORWARDED_POSTS: &[&str] = &[
    "/completion",
    "/completions",
    "/v1/completions",
    "/chat/completions",
    "/v1/chat/completions",
    "/v1/systemone",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/chat/completions/input_tokens",
    "/v1/chat/completions/input_tokens",
];

pub fn router(reg: Arc<Registry>) -> Router {
    let limit = reg.args.max_body;
    let mut r = match reg.args.no_webui {
        true => Router::new(),
        false => Router::new().route("/", get(|| async { Html(CHAT_PAGE) })),
    };
    for path in FORWARDED_POSTS {
        r = r.route(path, post(forward_post));
    }
    r.route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/models", get(list))
        .route("/v1/models", get(list))
        .route("/models/load", post(load))
        .route("/models/unload", post(unload))
        .route("/props", get(props))
        .route("/metrics", get(forward_get))
        .route("/slots", get(forward_get))
        .route("/lora-adapters", get(forward_get).post(forward_post))
        .fallback(|| async { ApiError::NotFound("File Not Found".into()) })
        .layer(middleware::from_fn_with_state(reg.clone(), gate))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(reg)
}

/// CORS (preflight answered at once), then the API key; the router itself is always
/// ready (each model answers 503 while it loads).
async fn gate(State(reg): Reg, headers: HeaderMap, req: Request, next: Next) -> Response {
    let preflight = req.method() == Method::OPTIONS;
    let mut resp = if preflight {
        StatusCode::OK.into_response()
    } else if let Some(refused) =
        key_refused(reg.args.api_key.as_deref(), &headers, req.uri().path())
    {
        refused
    } else {
        shape_limit(next.run(req).await, reg.args.max_body)
    };
    reg.args.cors.apply(&headers, preflight, &mut resp);
    resp
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The request's `?autoload=`, else `--models-autoload`.
fn autoload(reg: &Registry, q: &HashMap<String, String>) -> bool {
    match q.get("autoload") {
        Some(v) => v == "true" || v == "1",
        None => reg.autoload(),
    }
}

/// 400 for no name or an unknown one, as llama-server's `router_validate_model`.
fn validate(reg: &Registry, name: &str, autoload: bool) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(bad("model name is missing from the request"));
    }
    match reg.phase(name) {
        None => Err(bad(format!("model '{name}' not found"))),
        Some(Phase::Unloaded { .. }) if !autoload => Err(bad("model is not loaded")),
        Some(_) => Ok(()),
    }
}

async fn forward(
    reg: &Arc<Registry>,
    name: &str,
    autoload: bool,
    req: Request,
) -> Result<Response, ApiError> {
    validate(reg, name, autoload)?;
    let inst = reg.ready(name, autoload).await?;
    match inst.http.oneshot(req).await {
        Ok(resp) => Ok(resp),
        Err(never) => match never {},
    }
}

async fn forward_get(State(reg): Reg, Query(q): Params, req: Request) -> Response {
    let name = q.get("model").cloned().unwrap_or_default();
    forward(&reg, &name, autoload(&reg, &q), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn forward_post(State(reg): Reg, Query(q): Params, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let max = reg.args.max_body;
    let bytes = match axum::body::to_bytes(body, max).await {
        Ok(b) => b,
        Err(_) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    };
    let name = match parse_body::<Value>(&bytes) {
        Ok(v) => v
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        Err(e) => return e.into_response(),
    };
    reg.touch(&name);
    let req = Request::from_parts(parts, Body::from(bytes));
    forward(&reg, &name, autoload(&reg, &q), req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `GET /props`: the router's own, or with `?model=` the model's.
async fn props(State(reg): Reg, Query(q): Params, req: Request) -> Response {
    if q.get("model").is_some_and(|m| !m.is_empty()) {
        return forward_get(State(reg), Query(q), req).await;
    }
    Json(json!({
        "role": "router",
        "max_instances": reg.args.router.models_max,
        "models_autoload": reg.autoload(),
        // llama-server's placeholders, so a UI made for a single model keeps working.
        "model_alias": "llama-server",
        "model_path": "none",
        "default_generation_settings": {"params": Value::Null, "n_ctx": 0},
        "ui_settings": {},
        "build_info": concat!("pocket ", env!("CARGO_PKG_VERSION")),
        "cors_proxy_enabled": false,
    }))
    .into_response()
}

/// `GET /models` and `/v1/models`: every model with its status; a loaded one also with
/// what its own `/v1/models` says of it.
async fn list(State(reg): Reg) -> Json<Value> {
    let created = now_secs();
    let data: Vec<Value> = reg
        .listing()
        .into_iter()
        .map(|m| {
            let mut argv = vec!["pocket".to_string(), "serve".into()];
            argv.extend(m.argv);
            let mut status = json!({"value": m.phase.as_str(), "args": argv, "preset": m.preset});
            if m.phase == (Phase::Unloaded { failed: true }) {
                status["exit_code"] = json!(1);
                status["failed"] = json!(true);
            }
            let mut v = json!({
                "id": m.name,
                "aliases": [],
                "tags": [],
                "object": "model",
                "owned_by": "llamacpp",
                "created": created,
                "status": status,
                "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                "source": m.source.as_str(),
                "can_remove": false,
            });
            if let Some(Value::Object(info)) = m.loaded.and_then(|a| model_entry(&a).ok()) {
                for (k, val) in info {
                    if v.get(&k).is_none() {
                        v[k] = val;
                    }
                }
            }
            v
        })
        .collect();
    Json(json!({"data": data, "object": "list"}))
}

/// The `model` of a load / unload body.
fn model_field(body: &Bytes) -> Result<String, ApiError> {
    let v: Value = parse_body(body)?;
    Ok(v.get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string())
}

/// `POST /models/load`: 404 for an unknown model, 400 if it is loading or loaded; else
/// the load starts and `{"success": true}` answers at once.
async fn load(State(reg): Reg, body: Bytes) -> Result<Json<Value>, ApiError> {
    let name = model_field(&body)?;
    match reg.phase(&name) {
        None => return Err(ApiError::NotFound("File Not Found".into())),
        Some(Phase::Loading | Phase::Loaded) => return Err(bad("model is already running")),
        Some(Phase::Unloaded { .. }) => reg.load(&name)?,
    }
    Ok(Json(json!({"success": true})))
}

/// `POST /models/unload`: 400 for an unknown model or one that is not running.
async fn unload(State(reg): Reg, body: Bytes) -> Result<Json<Value>, ApiError> {
    reg.unload(&model_field(&body)?)?;
    Ok(Json(json!({"success": true})))
}
