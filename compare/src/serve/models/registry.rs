//! The router's models and their state: unloaded (perhaps after a failed load), loading,
//! loaded. Loads run on the model's own engine thread; waiters watch a change counter.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;

use super::sources::{self, ModelSource};
use crate::serve::args::{self, ServeArgs};
use crate::serve::error::{bad, ApiError};
use crate::serve::state::App;

/// A model's state, as `GET /models` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Unloaded { failed: bool },
    Loading,
    Loaded,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Unloaded { .. } => "unloaded",
            Phase::Loading => "loading",
            Phase::Loaded => "loaded",
        }
    }
}

/// A model being loaded or loaded: its server, as `pocket serve -m` would run it.
#[derive(Clone)]
pub struct Instance {
    pub app: Arc<App>,
    pub http: axum::Router,
}

enum Status {
    Unloaded { failed: bool },
    Running(Instance),
}

struct Entry {
    src: ModelSource,
    status: Status,
    last_used: Instant,
}

impl Entry {
    fn phase(&self) -> Phase {
        match &self.status {
            Status::Unloaded { failed } => Phase::Unloaded { failed: *failed },
            Status::Running(i) if i.app.loaded.get().is_some() => Phase::Loaded,
            Status::Running(_) => Phase::Loading,
        }
    }
}

/// What `GET /models` lists of one model.
pub struct Listing {
    pub name: String,
    pub source: sources::Source,
    pub phase: Phase,
    pub argv: Vec<String>,
    pub preset: String,
    pub loaded: Option<Arc<App>>,
}

pub struct Registry {
    /// The router's own flags (CORS, API key, body limit, models-max, autoload).
    pub args: ServeArgs,
    /// The router's command line, given to every model after its preset options.
    base: Vec<String>,
    entries: Mutex<BTreeMap<String, Entry>>,
    changed: watch::Sender<u64>,
}

impl Registry {
    pub fn new(args: ServeArgs, raw: Vec<OsString>) -> crate::Result<Arc<Registry>> {
        let r = &args.router;
        let found = sources::scan(r.models_dir.as_deref(), r.models_preset.as_deref())?;
        let entries = found
            .into_iter()
            .map(|(name, src)| {
                let e = Entry {
                    src,
                    status: Status::Unloaded { failed: false },
                    last_used: Instant::now(),
                };
                (name, e)
            })
            .collect();
        Ok(Arc::new(Registry {
            args,
            base: raw
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            entries: Mutex::new(entries),
            changed: watch::channel(0).0,
        }))
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        // A handler that panicked while holding the lock left consistent data behind.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn autoload(&self) -> bool {
        !self.args.router.no_models_autoload
    }

    /// The command line a model's server is parsed from: its preset options, the router's
    /// flags (which win), then its name as the alias.
    fn argv(&self, src: &ModelSource) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &src.options {
            let flag = args::flag_of_key(k);
            match v.as_str() {
                "true" => out.push(flag),
                "false" => out.push(format!("--no-{k}")),
                _ => out.extend([flag, v.clone()]),
            }
        }
        out.extend(self.base.iter().cloned());
        out.extend(["--alias".into(), src.name.clone()]);
        out
    }

    pub fn phase(&self, name: &str) -> Option<Phase> {
        self.entries().get(name).map(Entry::phase)
    }

    pub fn listing(&self) -> Vec<Listing> {
        self.entries()
            .values()
            .map(|e| Listing {
                name: e.src.name.clone(),
                source: e.src.source,
                phase: e.phase(),
                argv: self.argv(&e.src),
                preset: preset_text(&e.src),
                loaded: match (&e.status, e.phase()) {
                    (Status::Running(i), Phase::Loaded) => Some(i.app.clone()),
                    _ => None,
                },
            })
            .collect()
    }

    /// Starts loading `name` (unloading the least recently used model if `--models-max`
    /// are running). A model whose flags do not parse fails at once, as a child
    /// llama-server that exits.
    pub fn load(self: &Arc<Self>, name: &str) -> Result<(), ApiError> {
        let mut entries = self.entries();
        let Some(src) = entries.get(name).map(|e| e.src.clone()) else {
            return Err(ApiError::NotFound("File Not Found".into()));
        };
        if matches!(entries[name].status, Status::Running(_)) {
            return Ok(());
        }
        let max = self.args.router.models_max;
        let running = entries
            .values()
            .filter(|e| matches!(e.status, Status::Running(_)))
            .count();
        if max > 0 && running >= max {
            let victim = entries
                .iter()
                .filter(|(_, e)| e.phase() == Phase::Loaded)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(n, _)| n.clone());
            let Some(victim) = victim else {
                return Err(ApiError::Server(
                    "model limit reached, try again later".into(),
                ));
            };
            eprintln!("pocket serve: --models-max {max} reached, unloading {victim}");
            if let Some(e) = entries.get_mut(&victim) {
                e.status = Status::Unloaded { failed: false };
            }
        }
        let argv: Vec<OsString> = self.argv(&src).into_iter().map(OsString::from).collect();
        let entry = entries
            .get_mut(name)
            .ok_or_else(|| ApiError::NotFound("File Not Found".into()))?;
        entry.last_used = Instant::now();
        let mut model_args = match args::parse(argv) {
            Ok(p) => p.args,
            Err(e) => {
                eprintln!("pocket serve: model {name}: {e}");
                entry.status = Status::Unloaded { failed: true };
                drop(entries);
                self.notify();
                return Ok(());
            }
        };
        // The router checks the key; the model answers whoever the router lets through.
        model_args.api_key = None;
        let app = Arc::new(App::new(model_args));
        let http = crate::serve::routes::router(app.clone());
        entry.status = Status::Running(Instance {
            app: app.clone(),
            http,
        });
        drop(entries);
        eprintln!("pocket serve: loading model {name}");
        let (me, model) = (self.clone(), name.to_string());
        let spawned = crate::serve::spawn_engine(app.clone(), move |r| {
            if let Err(e) = &r {
                eprintln!("pocket serve: model {model} failed to load: {e}");
            }
            me.loaded(&model, &app, r.is_ok());
        });
        if let Err(e) = spawned {
            return Err(ApiError::Server(format!("cannot start a thread: {e}")));
        }
        self.notify();
        Ok(())
    }

    /// The engine thread of `app` finished loading `name`.
    fn loaded(&self, name: &str, app: &Arc<App>, ok: bool) {
        let mut entries = self.entries();
        if let Some(e) = entries.get_mut(name) {
            let current = matches!(&e.status, Status::Running(i) if Arc::ptr_eq(&i.app, app));
            if current && !ok {
                e.status = Status::Unloaded { failed: true };
            }
        }
        drop(entries);
        self.notify();
    }

    /// Unloads `name`: 400 unless it is loading or loaded.
    pub fn unload(&self, name: &str) -> Result<(), ApiError> {
        let mut entries = self.entries();
        let e = entries
            .get_mut(name)
            .ok_or_else(|| bad("model is not found"))?;
        if !matches!(e.status, Status::Running(_)) {
            return Err(bad("model is not running"));
        }
        e.status = Status::Unloaded { failed: false };
        drop(entries);
        eprintln!("pocket serve: unloaded model {name}");
        self.notify();
        Ok(())
    }

    /// The model's server once it is loaded, loading it first when `autoload`; a request
    /// that waits for a load ends when the load fails.
    pub async fn ready(self: &Arc<Self>, name: &str, autoload: bool) -> Result<Instance, ApiError> {
        let mut changes = self.changed.subscribe();
        let mut started = false;
        loop {
            let (phase, inst) = {
                let entries = self.entries();
                let e = entries
                    .get(name)
                    .ok_or_else(|| bad(format!("model '{name}' not found")))?;
                let inst = match &e.status {
                    Status::Running(i) => Some(i.clone()),
                    Status::Unloaded { .. } => None,
                };
                (e.phase(), inst)
            };
            match (phase, inst) {
                // Without autoload, a loading model answers for itself (503 while it loads).
                (Phase::Loaded, Some(i)) => return Ok(i),
                (Phase::Loading, Some(i)) if !autoload => return Ok(i),
                (Phase::Unloaded { .. }, _) if !autoload => {
                    return Err(bad("model is not loaded"));
                }
                (Phase::Unloaded { .. }, _) if !started => {
                    self.load(name)?;
                    started = true;
                    continue;
                }
                (Phase::Unloaded { .. }, _) => {
                    return Err(ApiError::Server(format!(
                        "model name={name} failed to load"
                    )));
                }
                _ => {}
            }
            if changes.changed().await.is_err() {
                return Err(ApiError::Unavailable("the server is stopping".into()));
            }
        }
    }

    /// Marks `name` as just used (the least recently used is unloaded first).
    pub fn touch(&self, name: &str) {
        if let Some(e) = self.entries().get_mut(name) {
            e.last_used = Instant::now();
        }
    }

    /// Loads the preset's `load-on-startup` models.
    pub fn load_startup_models(self: &Arc<Self>) {
        let names: Vec<String> = self
            .entries()
            .values()
            .filter(|e| e.src.load_on_startup)
            .map(|e| e.src.name.clone())
            .collect();
        for n in names {
            if let Err(e) = self.load(&n) {
                eprintln!("pocket serve: model {n}: {e}");
            }
        }
    }
}

/// The model's options as an INI section (`status.preset` of `GET /models`).
fn preset_text(src: &ModelSource) -> String {
    let mut s = format!("[{}]\n", src.name);
    for (k, v) in &src.options {
        s.push_str(&format!("{k} = {v}\n"));
    }
    s.push('\n');
    s
}
