//! The generation endpoints: `/completion`, `/v1/completions`, `/v1/chat/completions`.
//! A request becomes a [`Job`] for the engine thread; its answer is collected (or streamed
//! as SSE) from the job's channel. Dropping the receiver (the client closed its
//! connection, so axum dropped this future or the stream) is what cancels the job.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::api::{chat_messages, parse_body, ChatRequest, CompletionRequest, GenFields};
use super::error::{bad, ApiError};
use super::job::{Done, Event, Job};
use super::routes::loaded;
use super::shapes::{now_secs, Api, Shape};
use super::state::App;

pub async fn completion(State(app): State<Arc<App>>, body: Bytes) -> Result<Response, ApiError> {
    text_completion(app, body, Api::Native).await
}

pub async fn v1_completions(
    State(app): State<Arc<App>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    text_completion(app, body, Api::Completions).await
}

async fn text_completion(app: Arc<App>, body: Bytes, api: Api) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse_body(&body)?;
    let l = loaded(&app)?;
    let prompt = req.prompt.tokens(&l.model.tokenizer)?;
    let text = match &req.prompt {
        super::api::Prompt::Text(s) => s.clone(),
        _ => String::new(),
    };
    generate(&app, prompt, &req.gen, api, text).await
}

pub async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse_body(&body)?;
    let l = loaded(&app)?;
    let rendered = render_chat(&app, &req)?;
    let prompt = l.model.tokenizer.encode(&rendered, true, true);
    generate(&app, prompt, &req.gen, Api::Chat, rendered).await
}

/// The conversation through the chat template, ending with the assistant's opening.
pub fn render_chat(app: &App, req: &ChatRequest) -> Result<String, ApiError> {
    let l = loaded(app)?;
    let messages = chat_messages(&req.messages)?;
    l.template
        .render(&messages, true)
        .map_err(|e| bad(format!("chat template: {e}")))
}

async fn generate(
    app: &Arc<App>,
    prompt: Vec<u32>,
    gen: &GenFields,
    api: Api,
    prompt_text: String,
) -> Result<Response, ApiError> {
    let l = loaded(app)?;
    let settings = gen.settings(&app.args)?;
    if prompt.is_empty() {
        return Err(bad("the prompt is empty (it tokenizes to nothing)"));
    }
    if prompt.len() >= l.n_ctx_slot {
        return Err(ApiError::ExceedsContext(format!(
            "request ({} tokens) exceeds the available context size ({} tokens), try increasing it",
            prompt.len(),
            l.n_ctx_slot
        )));
    }
    // The bounded queue: jobs sent and not yet on a slot.
    if app.shared.queued.fetch_add(1, Ordering::SeqCst) >= app.args.queue_size + app.args.parallel {
        app.shared.queued.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::Unavailable(
            "the server is busy (the request queue is full); try again later".into(),
        ));
    }
    let id = app.next_id();
    let shape = Shape {
        api,
        id: match api {
            Api::Chat => format!("chatcmpl-pocket-{id}"),
            _ => format!("cmpl-pocket-{id}"),
        },
        model: app.model_name.clone(),
        created: now_secs(),
        include_usage: gen.include_usage(),
        settings: settings.clone(),
        n_ctx: l.n_ctx_slot,
        prompt_text,
    };
    let (tx, rx) = unbounded_channel();
    let job = Job {
        id,
        prompt,
        settings,
        events: tx,
    };
    if l.jobs.send(job).is_err() {
        app.shared.queued.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::Server("the engine has stopped".into()));
    }
    let timeout = Duration::from_secs(app.args.timeout.max(1));
    if gen.stream {
        Ok(Sse::new(sse_stream(rx, shape, timeout)).into_response())
    } else {
        let done = collect(rx, timeout).await?;
        Ok(Json(shape.full(&done)).into_response())
    }
}

/// Waits for the end of a job that does not stream.
async fn collect(mut rx: UnboundedReceiver<Event>, timeout: Duration) -> Result<Done, ApiError> {
    loop {
        match tokio::time::timeout(timeout, rx.recv()).await {
            Err(_) => {
                return Err(ApiError::Unavailable(
                    "the request timed out (--timeout)".into(),
                ))
            }
            Ok(None) => return Err(ApiError::Server("the engine dropped the request".into())),
            Ok(Some(Event::Piece { .. })) => {}
            Ok(Some(Event::Done(d))) => return Ok(*d),
            Ok(Some(Event::Failed(msg))) => return Err(ApiError::Server(msg)),
        }
    }
}

/// State of one SSE stream.
struct Streaming {
    rx: UnboundedReceiver<Event>,
    shape: Shape,
    timeout: Duration,
    queue: std::collections::VecDeque<SseEvent>,
    n_decoded: usize,
    ended: bool,
}

fn data(v: &serde_json::Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

fn sse_stream(
    rx: UnboundedReceiver<Event>,
    shape: Shape,
    timeout: Duration,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let queue = shape.opening().iter().map(data).collect();
    let st = Streaming {
        rx,
        shape,
        timeout,
        queue,
        n_decoded: 0,
        ended: false,
    };
    stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.ended {
                return None;
            }
            let next = tokio::time::timeout(st.timeout, st.rx.recv()).await;
            match next {
                Ok(Some(Event::Piece { text, tokens })) => {
                    st.n_decoded += tokens.len();
                    let v = st.shape.piece(&text, &tokens, None, st.n_decoded);
                    st.queue.push_back(data(&v));
                }
                Ok(Some(Event::Done(d))) => {
                    st.queue.extend(st.shape.closing(&d).iter().map(data));
                    if st.shape.ends_with_done() {
                        st.queue.push_back(SseEvent::default().data("[DONE]"));
                    }
                    st.ended = true;
                }
                Ok(Some(Event::Failed(msg))) => {
                    st.queue.push_back(
                        SseEvent::default()
                            .event("error")
                            .data(ApiError::Server(msg).body().to_string()),
                    );
                    st.ended = true;
                }
                Ok(None) | Err(_) => {
                    let e =
                        ApiError::Server("the request timed out or the engine dropped it".into());
                    st.queue.push_back(
                        SseEvent::default()
                            .event("error")
                            .data(e.body().to_string()),
                    );
                    st.ended = true;
                }
            }
        }
    })
}
