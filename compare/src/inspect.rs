//! What `pocket inspect` shows: metadata (long arrays summarised), a tensor table and
//! totals (parameters, bytes per type, bits per weight).

use std::collections::BTreeMap;
use std::io::{self, Write};

use pocket_kernels::GgmlType;
use pocket_model::gguf::{Gguf, Value};
use serde_json::{json, Value as Json};

/// Arrays longer than this are shown as their first few entries and a count.
const ARRAY_PREVIEW: u64 = 8;

/// Totals over all tensors.
pub struct Totals {
    pub n_params: u64,
    pub n_bytes: u64,
    /// Per type: (tensor count, elements, bytes).
    pub by_type: BTreeMap<GgmlType, (usize, u64, u64)>,
}

impl Totals {
    pub fn of<B: AsRef<[u8]>>(g: &Gguf<B>) -> Totals {
        let mut by_type: BTreeMap<GgmlType, (usize, u64, u64)> = BTreeMap::new();
        let (mut n_params, mut n_bytes) = (0u64, 0u64);
        for t in g.tensors() {
            let e = by_type.entry(t.ggml_type).or_default();
            e.0 += 1;
            e.1 += t.n_elements();
            e.2 += t.size;
            n_params += t.n_elements();
            n_bytes += t.size;
        }
        Totals {
            n_params,
            n_bytes,
            by_type,
        }
    }

    pub fn bits_per_weight(&self) -> f64 {
        if self.n_params == 0 {
            0.0
        } else {
            self.n_bytes as f64 * 8.0 / self.n_params as f64
        }
    }
}

fn value_to_json(v: &Value<'_>, full: bool) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(a) => {
            let take = if full {
                a.len()
            } else {
                a.len().min(ARRAY_PREVIEW)
            };
            let items: Vec<Json> = a
                .iter()
                .take(take as usize)
                .map(|e| value_to_json(&e, full))
                .collect();
            if take == a.len() {
                Json::Array(items)
            } else {
                json!({ "type": format!("array[{}]", a.elem_type().name()), "len": a.len(), "head": items })
            }
        }
    }
}

pub fn to_json<B: AsRef<[u8]>>(g: &Gguf<B>, full_arrays: bool) -> Json {
    let metadata: serde_json::Map<String, Json> = g
        .metadata()
        .map(|(k, v)| (k.to_string(), value_to_json(&v, full_arrays)))
        .collect();
    let tensors: Vec<Json> = g
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name, "type": t.ggml_type.name(), "type_id": t.ggml_type.id(),
                "dims": t.dims, "offset": g.data_start() + t.offset, "bytes": t.size,
            })
        })
        .collect();
    let tot = Totals::of(g);
    let by_type: serde_json::Map<String, Json> = tot
        .by_type
        .iter()
        .map(|(t, (n, e, b))| {
            (
                t.name().to_string(),
                json!({ "tensors": n, "elements": e, "bytes": b }),
            )
        })
        .collect();
    json!({
        "version": g.version(), "alignment": g.alignment(), "data_offset": g.data_start(),
        "file_bytes": g.file_len(), "metadata": metadata, "tensors": tensors,
        "totals": { "parameters": tot.n_params, "bytes": tot.n_bytes,
                    "bits_per_weight": tot.bits_per_weight(), "by_type": by_type },
    })
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.2} {}", UNITS[u])
    }
}

fn show_value(v: &Value<'_>, full: bool) -> String {
    match v {
        Value::Array(a) if full => {
            let items: Vec<String> = a.iter().map(|e| show_value(&e, full)).collect();
            format!(
                "[{}; {}] [{}]",
                a.elem_type().name(),
                a.len(),
                items.join(", ")
            )
        }
        Value::String(s) if !full && s.chars().count() > 120 => {
            let head: String = s.chars().take(117).collect();
            format!("{head:?}... ({} chars)", s.chars().count())
        }
        _ => v.to_string(),
    }
}

pub fn write_text<B: AsRef<[u8]>>(
    out: &mut dyn Write,
    label: &str,
    g: &Gguf<B>,
    full_arrays: bool,
) -> io::Result<()> {
    writeln!(
        out,
        "{label}: GGUF v{}, {} metadata entries, {} tensors, alignment {}, data at byte {}, {}",
        g.version(),
        g.n_kv(),
        g.tensors().len(),
        g.alignment(),
        g.data_start(),
        human_bytes(g.file_len())
    )?;
    writeln!(out, "\n* metadata")?;
    let kw = g.keys().map(|k| k.len()).max().unwrap_or(0);
    for (i, (k, v)) in g.metadata().enumerate() {
        let ty = match &v {
            Value::Array(a) => format!("arr[{}]", a.elem_type().name()),
            _ => v.value_type().name().to_string(),
        };
        writeln!(
            out,
            "{:4} {k:kw$} {ty:>11} = {}",
            i + 1,
            show_value(&v, full_arrays)
        )?;
    }
    writeln!(out, "\n* tensors")?;
    let nw = g
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "{:>4} {:nw$} {:>7} {:>22} {:>12} {:>12}",
        "#", "name", "type", "shape", "bytes", "offset"
    )?;
    for (i, t) in g.tensors().iter().enumerate() {
        let shape = t
            .dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(" x ");
        writeln!(
            out,
            "{:4} {:nw$} {:>7} {:>22} {:>12} {:>12}",
            i + 1,
            t.name,
            t.ggml_type.name(),
            shape,
            t.size,
            g.data_start() + t.offset
        )?;
    }
    let tot = Totals::of(g);
    writeln!(out, "\n* totals")?;
    writeln!(
        out,
        "parameters: {} ({:.1} M)",
        tot.n_params,
        tot.n_params as f64 / 1e6
    )?;
    writeln!(
        out,
        "tensor bytes: {} ({}), {:.3} bits per weight",
        tot.n_bytes,
        human_bytes(tot.n_bytes),
        tot.bits_per_weight()
    )?;
    for (t, (n, e, b)) in &tot.by_type {
        let bpw = if *e > 0 {
            *b as f64 * 8.0 / *e as f64
        } else {
            0.0
        };
        writeln!(
            out,
            "  {:>7}: {n:4} tensors, {e:>12} elements, {:>12}, {bpw:.3} bpw",
            t.name(),
            human_bytes(*b)
        )?;
    }
    Ok(())
}
