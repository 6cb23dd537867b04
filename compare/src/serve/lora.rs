//! llama-server's LoRA API: `GET /lora-adapters` (the loaded adapters with their global
//! scales), `POST /lora-adapters` (`[{"id": 0, "scale": 0.5}, ...]` sets the global
//! scales; adapters not listed get 0), and a request's own `lora` field (the same list,
//! for that request alone; without it the request takes the global scales). Requests with
//! different adapters share the engine's batches: each row applies its slot's set
//! (`Session::set_seq_lora`); a slot whose cache was computed with another set starts
//! over (llama-server clears the slot's cache on a LoRA change too).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use pocket_model::lora::{LoraAdapter, LoraSet};
use pocket_model::{SeqId, Session};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{bad, ApiError};
use super::routes::loaded;
use super::state::App;

/// The server's adapters and their global scales.
pub struct LoraRegistry {
    adapters: Vec<Arc<LoraAdapter>>,
    scales: Mutex<Vec<f32>>,
}

/// One element of a `lora` list.
#[derive(Deserialize)]
struct Entry {
    id: i64,
    #[serde(default)]
    scale: f32,
}

impl LoraRegistry {
    pub fn new(adapters: Vec<Arc<LoraAdapter>>, scales: Vec<f32>) -> LoraRegistry {
        LoraRegistry {
            adapters,
            scales: Mutex::new(scales),
        }
    }

    /// Every adapter at the global scales.
    pub fn global(&self) -> LoraSet {
        let scales = self.scales.lock().unwrap().clone();
        self.with_scales(&scales)
    }

    fn with_scales(&self, scales: &[f32]) -> LoraSet {
        LoraSet::new(
            self.adapters
                .iter()
                .cloned()
                .zip(scales.iter().copied())
                .collect(),
        )
    }

    /// The scales a `lora` list gives (unlisted adapters: 0).
    fn scales_of(&self, list: &Value) -> Result<Vec<f32>, ApiError> {
        let entries: Vec<Entry> = serde_json::from_value(list.clone())
            .map_err(|_| bad("'lora' must be an array of objects with 'id' and 'scale' fields"))?;
        let mut scales = vec![0.0; self.adapters.len()];
        for e in entries {
            let slot = usize::try_from(e.id)
                .ok()
                .and_then(|i| scales.get_mut(i))
                .ok_or_else(|| {
                    bad(format!(
                        "lora: no adapter has id {} ({} are loaded)",
                        e.id,
                        self.adapters.len()
                    ))
                })?;
            if !e.scale.is_finite() {
                return Err(bad(format!(
                    "lora: adapter {}: the scale is not a number",
                    e.id
                )));
            }
            *slot = e.scale;
        }
        Ok(scales)
    }

    /// A request's set: its own `lora` list, else the global scales.
    pub fn for_request(&self, list: Option<&Value>) -> Result<LoraSet, ApiError> {
        match list {
            Some(v) if !v.is_null() => Ok(self.with_scales(&self.scales_of(v)?)),
            _ => Ok(self.global()),
        }
    }
}

/// Before a job runs on `slot`: gives the slot the job's adapters; returns how much of the
/// slot's cached prefix stays valid (none when the adapters changed).
pub fn switch(s: &mut Session, slot: SeqId, set: &LoraSet, common: usize) -> usize {
    if s.lora(slot).is_some_and(|cur| cur.same_as(set)) {
        return common;
    }
    // The set was checked against the model when the server loaded the adapters.
    match s.set_seq_lora(slot, set.clone()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lora: slot {slot}: {e}");
            common
        }
    }
}

/// `GET /lora-adapters`.
pub async fn list(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let reg = &loaded(&app)?.lora;
    let scales = reg.scales.lock().unwrap().clone();
    let out: Vec<Value> = reg
        .adapters
        .iter()
        .zip(scales)
        .enumerate()
        .map(|(id, (a, scale))| {
            json!({"id": id, "path": a.name, "scale": scale, "task_name": "", "prompt_prefix": ""})
        })
        .collect();
    Ok(Json(Value::Array(out)))
}

/// `POST /lora-adapters`.
pub async fn set(State(app): State<Arc<App>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let reg = &loaded(&app)?.lora;
    let list: Value =
        serde_json::from_slice(&body).map_err(|e| bad(format!("malformed JSON: {e}")))?;
    let scales = reg.scales_of(&list)?;
    *reg.scales.lock().unwrap() = scales;
    Ok(Json(json!({"success": true})))
}
