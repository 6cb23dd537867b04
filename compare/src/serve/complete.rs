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

use super::api::{
    chat_messages, parse_body, ChatRequest, CompletionRequest, GenFields, PromptTokens,
};
use pocket_model::grammar::{Grammar, GrammarSpec, GrammarVocab};

use super::error::{bad, ApiError};
use super::job::{Done, Event, GenSettings, Job};
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
    let prompts = req.prompt.prompts(&l.model.tokenizer)?;
    generate(&app, prompts, &req.gen, api).await
}

pub async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse_body(&body)?;
    let l = loaded(&app)?;
    let rendered = render_chat(&app, &req)?;
    let prompt = PromptTokens {
        tokens: l.model.tokenizer.encode(&rendered, true, true),
        text: rendered,
    };
    generate(&app, vec![prompt], &req.gen, Api::Chat).await
}

/// The conversation through the chat template, ending with the assistant's opening; a
/// final assistant message is a prefill the reply continues (llama-server's rule).
pub fn render_chat(app: &App, req: &ChatRequest) -> Result<String, ApiError> {
    let l = loaded(app)?;
    let mut messages = chat_messages(&req.messages)?;
    let continue_final = req.continue_final_message == Some(true);
    if continue_final && req.add_generation_prompt == Some(true) {
        return Err(bad(
            "add_generation_prompt and continue_final_message cannot both be true",
        ));
    }
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let render = |m: &[pocket_model::chat::ChatMessage], agp: bool| {
        l.template
            .render(m, agp)
            .map_err(|e| bad(format!("chat template: {e}")))
    };
    let ends_with_assistant = messages.last().is_some_and(|m| m.role == "assistant");
    if ends_with_assistant && (add_generation_prompt || continue_final) {
        let prefill = messages.pop().map(|m| m.content).unwrap_or_default();
        if messages.last().is_some_and(|m| m.role == "assistant") {
            return Err(bad(
                "Cannot have 2 or more assistant messages at the end of the list.",
            ));
        }
        return Ok(render(&messages, true)? + &prefill);
    }
    render(&messages, add_generation_prompt)
}

/// Runs a request's generations (one per prompt and choice) and answers them whole or,
/// for one generation, as a stream.
async fn generate(
    app: &Arc<App>,
    prompts: Vec<PromptTokens>,
    gen: &GenFields,
    api: Api,
) -> Result<Response, ApiError> {
    let l = loaded(app)?;
    let settings = settings_for(app, gen)?;
    for p in &prompts {
        if p.tokens.is_empty() {
            return Err(bad("the prompt is empty (it tokenizes to nothing)"));
        }
        if p.tokens.len() >= l.n_ctx_slot {
            return Err(ApiError::ExceedsContext {
                n_prompt: p.tokens.len(),
                n_ctx: l.n_ctx_slot,
            });
        }
    }
    let n_choices = gen.n.unwrap_or(1) as usize;
    let n_jobs = prompts.len() * n_choices;
    if n_jobs > 1 && gen.stream {
        return Err(bad(
            "streaming answers one generation: n > 1 and lists of prompts need stream: false",
        ));
    }
    let id = app.next_id();
    let shapes: Vec<Shape> = prompts
        .iter()
        .map(|p| Shape {
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
            prompt_text: p.text.clone(),
            return_tokens: gen.return_tokens,
            verbose: gen.verbose.unwrap_or(app.args.verbose),
        })
        .collect();
    // One job per prompt and choice; if one cannot be queued, dropping the others'
    // receivers cancels them.
    let mut jobs = Vec::with_capacity(n_jobs);
    for p in &prompts {
        for _ in 0..n_choices {
            jobs.push(submit(app, p.tokens.clone(), settings.clone(), gen.stream)?);
        }
    }
    let timeout = Duration::from_secs(app.args.timeout.max(1));
    let shape = shapes.into_iter().next().expect("one prompt");
    if gen.stream {
        let rx = jobs.pop().expect("one job");
        return Ok(Sse::new(sse_stream(rx, shape, timeout)).into_response());
    }
    let mut done = Vec::with_capacity(jobs.len());
    for rx in jobs {
        done.push(collect(rx, timeout).await?);
    }
    if api == Api::Native && prompts.len() > 1 {
        // llama-server answers a list of prompts with a list of results.
        let all: Vec<_> = done
            .iter()
            .zip(&prompts)
            .map(|(d, p)| shape.native_final_for(d, &p.text))
            .collect();
        return Ok(Json(all).into_response());
    }
    Ok(Json(shape.full_all(&done)).into_response())
}

/// The request's settings; `ignore_eos` shows (and works) as a -inf bias on every
/// end-of-generation token, as in llama-server.
fn settings_for(app: &App, gen: &GenFields) -> Result<GenSettings, ApiError> {
    let tok = &loaded(app)?.model.tokenizer;
    let mut settings = gen.settings(&app.args, tok)?;
    settings.lora = loaded(app)?.lora.for_request(gen.lora.as_ref())?;
    if let Some(spec) = gen.grammar_spec()? {
        settings.grammar = Some(compile_grammar(app, &spec)?);
    }
    let outside = settings
        .logit_bias
        .iter()
        .find(|(id, _)| *id as usize >= tok.n_vocab());
    if let Some(&(id, _)) = outside {
        return Err(bad(format!(
            "logit_bias: token id {id} is outside the vocabulary of {}",
            tok.n_vocab()
        )));
    }
    if settings.ignore_eos {
        let never = tok.eog_ids().iter().map(|&id| (id, f32::NEG_INFINITY));
        settings.logit_bias.extend(never);
    }
    Ok(settings)
}

/// Compiles a request's grammar or schema for the model; one that does not compile is a
/// 400 with llama-server's messages.
fn compile_grammar(app: &App, spec: &GrammarSpec) -> Result<Grammar, ApiError> {
    let l = loaded(app)?;
    let vocab = app
        .grammar_vocab
        .get_or_init(|| GrammarVocab::new(&l.model.tokenizer));
    let vocab = vocab.as_ref().map_err(|e| {
        ApiError::Server(format!(
            "this model's vocabulary cannot drive a grammar: {e}"
        ))
    })?;
    vocab.compile(spec).map_err(|e| match spec {
        GrammarSpec::Gbnf(_) | GrammarSpec::Lark(_) => bad(format!(
            "Failed to initialize samplers: failed to parse grammar: {e}"
        )),
        _ => bad(format!("\"json_schema\": {e}")),
    })
}

/// Queues one generation for the engine, or 503 when the bounded queue is full.
fn submit(
    app: &App,
    prompt: Vec<u32>,
    settings: GenSettings,
    streams: bool,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    let l = loaded(app)?;
    // The bounded queue: jobs sent and not yet on a slot.
    if app.shared.queued.fetch_add(1, Ordering::SeqCst) >= app.args.queue_size + app.args.parallel {
        app.shared.queued.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::Unavailable(
            "the server is busy (the request queue is full); try again later".into(),
        ));
    }
    let (tx, rx) = unbounded_channel();
    let job = Job {
        id: app.next_id(),
        prompt,
        settings,
        streams,
        events: tx,
    };
    if l.jobs.send(job).is_err() {
        app.shared.queued.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::Server("the engine has stopped".into()));
    }
    Ok(rx)
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
            Ok(Some(Event::Piece { .. } | Event::Progress(_))) => {}
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
                Ok(Some(Event::Piece {
                    text,
                    tokens,
                    id_slot,
                    probs,
                })) => {
                    st.n_decoded += tokens.len();
                    let v = st
                        .shape
                        .piece(&text, &tokens, &probs, id_slot, st.n_decoded);
                    st.queue.push_back(data(&v));
                }
                Ok(Some(Event::Progress(p))) => st.queue.push_back(data(&st.shape.progress(&p))),
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
