//! `pocket serve -m MODEL [--host H] [--port P] [-c CTX] [-np SLOTS] ...`: an HTTP server
//! with llama-server's and OpenAI's API. The HTTP side (axum on a small tokio runtime)
//! parses, checks and shapes; the engine thread (`engine.rs`) owns the one `Session`
//! whose KV-cache sequences are the slots, and runs continuous batching over them.
//!
//! Files: `args` (flags), `routes` (router, gate, info endpoints), `complete` (generation
//! endpoints, SSE), `api` (request bodies), `shapes` (response bodies), `job` (what passes
//! between the two sides), `engine` + `slot` + `output` (the scheduler, one generation,
//! its text), `metrics`, `error`, `state`, `chat.html` (the page at `/`).

mod api;
pub mod args;
mod complete;
mod cors;
mod courier;
mod engine;
mod error;
mod job;
mod listen;
mod lora;
mod metrics;
pub(crate) mod models;
mod ordered_json;
mod output;
mod probs;
mod routes;
mod shapes;
mod slot;
mod state;
mod systemone;
mod systemone_native;
mod trace;

use std::ffi::OsString;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use pocket_model::chat::ChatTemplate;
use pocket_model::decision::DecisionModel;
use pocket_model::{LoadOptions, Model, Session, SessionOptions};

use self::state::{App, Loaded};

/// Runs the server until it is killed (or Ctrl-C).
pub fn run(raw: Vec<OsString>) -> crate::Result<()> {
    let parsed = match args::parse(raw.clone()) {
        Ok(p) => p,
        Err(args::ArgsError::Clap(e)) => e.exit(),
        Err(e) => return Err(e.into()),
    };
    for flag in &parsed.ignored {
        eprintln!("note: {flag} has no effect on pocket (a CPU engine); ignored");
    }
    let args = parsed.args;
    if args.cors.tools.is_some() {
        eprintln!("note: --tools: pocket has no built-in tools; the flag only narrows the default --cors-origins to localhost, as on llama-server");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pocket-http")
        .enable_all()
        .build()?;
    let listeners = rt.block_on(listen::bind_all(&args.host, args.port))?;
    let Some(path) = args.model.clone() else {
        // No model: router mode.
        let registry = models::Registry::new(args, raw)?;
        for l in &listeners {
            eprintln!(
                "pocket serve: listening on http://{} (router mode: {} models, loaded on demand)",
                l.local_addr()?,
                registry.len()
            );
        }
        registry.load_startup_models();
        rt.block_on(listen::serve(listeners, models::routes::router(registry)));
        return Ok(());
    };
    for l in &listeners {
        eprintln!(
            "pocket serve: listening on http://{} (loading {})",
            l.local_addr()?,
            path.display()
        );
    }
    let app = Arc::new(App::new(args));
    {
        // The engine's courier dispatches on this runtime (spawn_engine finds it here).
        let _in_runtime = rt.enter();
        spawn_engine(app.clone(), |loaded| {
            if let Err(e) = loaded {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        })?;
    }
    rt.block_on(listen::serve(listeners, routes::router(app)));
    Ok(())
}

/// Starts the engine thread of `app`: it loads the model, publishes it, tells `done` how
/// loading went, then runs the engine until every sender of its jobs (held by the `App`)
/// is gone and no slot works: dropping the last `Arc<App>` stops it and frees the model.
pub fn spawn_engine(
    app: Arc<App>,
    done: impl FnOnce(crate::Result<()>) + Send + 'static,
) -> std::io::Result<()> {
    // The caller's runtime, if it runs in one, delivers the engine's events (courier.rs).
    let runtime = tokio::runtime::Handle::try_current().ok();
    std::thread::Builder::new()
        .name("pocket-engine".into())
        .spawn(move || {
            let mut done = Some(done);
            let mut loaded = || {
                if let Some(d) = done.take() {
                    d(Ok(()))
                }
            };
            let r = load_and_run(app, runtime, &mut loaded);
            if let (Err(e), Some(d)) = (r, done.take()) {
                d(Err(e));
            }
        })?;
    Ok(())
}

/// On the engine thread: loads the model, publishes it, calls `loaded`, then runs the
/// engine (without holding `app`).
fn load_and_run(
    app: Arc<App>,
    runtime: Option<tokio::runtime::Handle>,
    loaded: &mut dyn FnMut(),
) -> crate::Result<()> {
    let a = &app.args;
    let t0 = Instant::now();
    let path = a
        .model
        .as_deref()
        .ok_or(crate::Error::Serve("no model to load"))?;
    let mut model = Model::load_with(path, LoadOptions::default())?;
    let adapters = a.lora.attach(&mut model)?;
    // Merged adapters are part of the weights: nothing to list or switch.
    let lora = match a.lora.lora_merge {
        true => lora::LoraRegistry::new(Vec::new(), Vec::new()),
        false => lora::LoraRegistry::new(adapters, a.lora.specs().iter().map(|s| s.1).collect()),
    };
    let model = Arc::new(model);
    let from_file = match &a.chat_template_file {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|source| crate::Error::File {
                path: path.clone(),
                source,
            })?,
        ),
        None => None,
    };
    let override_ = from_file.as_deref().or(a.chat_template.as_deref());
    let template = ChatTemplate::from_gguf(model.gguf(), &model.tokenizer, override_)?;
    // As llama-server: malformed decision metadata stops the load, naming the key.
    let decision = pocket_model::decision::from_gguf(model.gguf(), &model.tokenizer)?;
    match &decision {
        Some(DecisionModel::Labels(d)) => eprintln!(
            "pocket serve: decision model type: {} ({} labels)",
            d.kind.name(),
            d.labels.len()
        ),
        Some(DecisionModel::Unsupported(t)) => eprintln!(
            "pocket serve: decision model type: {} (not run by pocket: /v1/systemone answers 501)",
            t.name()
        ),
        None => {}
    }
    let n_ctx_slot = a.n_ctx_slot();
    let o = SessionOptions {
        n_ctx: n_ctx_slot,
        n_seq: a.parallel,
        ..a.session_options(true)
    };
    let session = Session::try_new(&model, o)?;
    // Speculative decoding: a drafter per slot; a draft model's sessions run on the
    // engine thread alone (one thread each: the target's pool waits meanwhile).
    let draft = match a.spec.draft_path()? {
        Some(p) => Some(Model::load_with(p, LoadOptions::default())?),
        None => None,
    };
    let draft_opts = SessionOptions {
        n_ctx: n_ctx_slot,
        n_threads: 1,
        pin: false,
        ..Default::default()
    };
    let specs = (0..a.parallel)
        .map(|_| a.spec.speculator(&model, draft.as_ref(), draft_opts))
        .collect::<crate::Result<Vec<_>>>()?;
    let (tx, rx) = mpsc::channel();
    let threads = session.threads();
    let engine = engine::Engine::new(session, specs, a.batch_size, app.shared.clone(), runtime);
    // /slots lists every slot from the moment the server is ready.
    engine.publish();
    let published = Loaded {
        model: model.clone(),
        template,
        jobs: tx,
        n_ctx_slot,
        lora: Arc::new(lora),
        decision,
    };
    // Logged before /health turns 200, so a client that sees 200 also finds the line.
    eprintln!(
        "pocket serve: model loaded in {:.0} ms; {} slots of {} tokens, {} threads, {}{}",
        t0.elapsed().as_secs_f64() * 1e3,
        a.parallel,
        n_ctx_slot,
        threads,
        model.isa.name(),
        match a.spec.kind()? {
            crate::cli::spec_args::SpecKind::None => String::new(),
            k => format!(
                ", speculative decoding {k:?} (up to {} drafts)",
                a.spec.spec_draft_n_max
            ),
        }
    );
    if app.loaded.set(published).is_err() {
        return Err(crate::Error::Serve("the model was loaded twice"));
    }
    drop(app);
    loaded();
    engine.run(rx);
    Ok(())
}
