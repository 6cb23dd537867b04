//! Errors as HTTP responses in llama-server's (and so OpenAI's) shape:
//! `{"error": {"code": 400, "message": "...", "type": "invalid_request_error"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it")]
    ExceedsContext { n_prompt: usize, n_ctx: usize },
    #[error("Invalid API Key")]
    Authentication,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    NotSupported(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Server(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_) | ApiError::ExceedsContext { .. } => {
                StatusCode::BAD_REQUEST
            }
            ApiError::Authentication => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::NotSupported(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Server(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest(_) => "invalid_request_error",
            ApiError::ExceedsContext { .. } => "exceed_context_size_error",
            ApiError::Authentication => "authentication_error",
            ApiError::NotFound(_) => "not_found_error",
            ApiError::NotSupported(_) => "not_supported_error",
            ApiError::Unavailable(_) => "unavailable_error",
            ApiError::Server(_) => "server_error",
        }
    }

    /// The `error` object (also sent as an SSE event when a stream fails).
    pub fn body(&self) -> serde_json::Value {
        let mut e = json!({"code": self.status().as_u16(), "message": self.to_string(), "type": self.kind()});
        // llama-server's context error also carries the two sizes, for clients to act on.
        if let ApiError::ExceedsContext { n_prompt, n_ctx } = self {
            e["n_prompt_tokens"] = json!(n_prompt);
            e["n_ctx"] = json!(n_ctx);
        }
        json!({ "error": e })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), Json(self.body())).into_response()
    }
}

pub fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::InvalidRequest(msg.into())
}
