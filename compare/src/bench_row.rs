//! One llama-bench result row, with llama-bench's own field names, order, types and
//! value spelling (`tools/llama-bench/llama-bench.cpp`, `struct test`): the row both engines
//! print, so `scripts/compare-llama-bench.py` can join pocket's rows with llama.cpp's.

use serde::{Deserialize, Serialize};

/// A llama-bench row. Field names are llama-bench's; `samples_*` are the per-repetition
/// times and rates (json/jsonl only). Fields llama-bench prints that this struct does not
/// know (a newer llama.cpp) land in `extra`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BenchRow {
    pub build_commit: String,
    pub build_number: i64,
    pub cpu_info: String,
    pub gpu_info: String,
    pub backends: String,
    pub model_filename: String,
    pub model_type: String,
    pub model_size: u64,
    pub model_n_params: u64,
    pub n_batch: i64,
    pub n_ubatch: i64,
    pub n_threads: i64,
    pub cpu_mask: String,
    pub cpu_strict: bool,
    pub poll: i64,
    pub type_k: String,
    pub type_v: String,
    pub n_gpu_layers: i64,
    pub n_cpu_moe: i64,
    pub split_mode: String,
    pub main_gpu: i64,
    pub no_kv_offload: bool,
    pub flash_attn: i64,
    pub devices: String,
    pub tensor_split: String,
    pub tensor_buft_overrides: String,
    pub load_mode: String,
    pub lazy_mode: String,
    pub embeddings: bool,
    pub no_op_offload: i64,
    pub no_host: bool,
    pub repack: bool,
    pub fit_target: u64,
    pub fit_min_ctx: u64,
    pub n_prompt: i64,
    pub n_gen: i64,
    pub n_depth: i64,
    pub test_time: String,
    pub avg_ns: u64,
    pub stddev_ns: u64,
    pub avg_ts: f64,
    pub stddev_ts: f64,
    pub samples_ns: Vec<u64>,
    pub samples_ts: Vec<f64>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Which rows must carry a field to mean anything, from none up (the rows of each need
/// include those of the needs before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// None: a row without it gets [`BenchRow`]'s default.
    Optional,
    /// Mainline llama-bench's json, jsonl and csv rows (md carries fewer and is checked
    /// separately).
    Mainline,
    /// Every llama-bench's rows: mainline's and ik_llama.cpp's fork's.
    Every,
}

/// llama-bench's `test::get_fields()`, in its order, each with the rows that must carry it.
const FIELD_TABLE: [(&str, Need); 42] = [
    ("build_commit", Need::Every),
    ("build_number", Need::Mainline),
    ("cpu_info", Need::Every),
    ("gpu_info", Need::Optional),
    ("backends", Need::Optional),
    ("model_filename", Need::Every),
    ("model_type", Need::Every),
    ("model_size", Need::Every),
    ("model_n_params", Need::Every),
    ("n_batch", Need::Every),
    ("n_ubatch", Need::Every),
    ("n_threads", Need::Every),
    ("cpu_mask", Need::Optional),
    ("cpu_strict", Need::Optional),
    ("poll", Need::Optional),
    ("type_k", Need::Every),
    ("type_v", Need::Every),
    ("n_gpu_layers", Need::Optional),
    ("n_cpu_moe", Need::Optional),
    ("split_mode", Need::Optional),
    ("main_gpu", Need::Optional),
    ("no_kv_offload", Need::Optional),
    ("flash_attn", Need::Optional),
    ("devices", Need::Optional),
    ("tensor_split", Need::Optional),
    ("tensor_buft_overrides", Need::Optional),
    ("load_mode", Need::Optional),
    ("lazy_mode", Need::Optional),
    ("embeddings", Need::Optional),
    ("no_op_offload", Need::Optional),
    ("no_host", Need::Optional),
    ("repack", Need::Optional),
    ("fit_target", Need::Optional),
    ("fit_min_ctx", Need::Optional),
    ("n_prompt", Need::Every),
    ("n_gen", Need::Every),
    ("n_depth", Need::Mainline),
    ("test_time", Need::Mainline),
    ("avg_ns", Need::Every),
    ("stddev_ns", Need::Mainline),
    ("avg_ts", Need::Every),
    ("stddev_ts", Need::Mainline),
];

/// The names in [`FIELD_TABLE`] of the fields at least `need` rows must carry, in its order
/// (`N`: how many there are, checked when the constant is evaluated).
const fn field_names<const N: usize>(need: Need) -> [&'static str; N] {
    let mut names = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < FIELD_TABLE.len() {
        if FIELD_TABLE[i].1 as u8 >= need as u8 {
            names[n] = FIELD_TABLE[i].0;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "field_names: N is not the number of fields");
    names
}

/// llama-bench's `test::get_fields()`, in its order (every format but md prints these).
pub const FIELDS: [&str; 42] = field_names(Need::Optional);

/// The fields a mainline llama-bench row must have to mean anything (json, jsonl and csv
/// parsers insist on these; md carries fewer and is checked separately).
pub const REQUIRED: [&str; 20] = field_names(Need::Mainline);

/// The fields every llama-bench's rows must have, ik_llama.cpp's fork's included.
pub const REQUIRED_BY_EVERY: [&str; 15] = field_names(Need::Every);

/// The properties `scripts/compare-llama-bench.py` joins two builds' rows on
/// (`LLAMA_BENCH_KEY_PROPERTIES`): a pocket row pairs with a llama.cpp row only if all agree.
pub const KEY_PROPERTIES: [&str; 28] = [
    "cpu_info",
    "gpu_info",
    "backends",
    "n_gpu_layers",
    "n_cpu_moe",
    "tensor_buft_overrides",
    "model_filename",
    "model_type",
    "n_batch",
    "n_ubatch",
    "embeddings",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "n_threads",
    "type_k",
    "type_v",
    "load_mode",
    "no_kv_offload",
    "split_mode",
    "main_gpu",
    "tensor_split",
    "flash_attn",
    "n_prompt",
    "n_gen",
    "n_depth",
    "fit_target",
    "fit_min_ctx",
];

/// llama-bench's `test::field_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    String,
    Bool,
    Int,
    Float,
}

/// The type llama-bench gives a field (`test::get_field_type`).
pub fn field_type(field: &str) -> FieldType {
    match field {
        "build_number" | "n_batch" | "n_ubatch" | "n_threads" | "poll" | "model_size"
        | "model_n_params" | "n_gpu_layers" | "main_gpu" | "n_prompt" | "n_gen" | "n_depth"
        | "avg_ns" | "stddev_ns" | "no_op_offload" | "n_cpu_moe" | "fit_target" | "fit_min_ctx"
        | "flash_attn" => FieldType::Int,
        "f16_kv" | "no_kv_offload" | "cpu_strict" | "embeddings" | "no_host" | "repack" => {
            FieldType::Bool
        }
        "avg_ts" | "stddev_ts" => FieldType::Float,
        _ => FieldType::String,
    }
}

impl BenchRow {
    /// The test's name as llama-bench's md table spells it: `pp512`, `tg128`,
    /// `pp512+tg128`, with ` @ d<depth>` appended for a non-empty cache.
    pub fn test_name(&self) -> String {
        let mut name = if self.n_prompt > 0 && self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else if self.n_gen > 0 && self.n_prompt == 0 {
            format!("tg{}", self.n_gen)
        } else {
            format!("pp{}+tg{}", self.n_prompt, self.n_gen)
        };
        if self.n_depth > 0 {
            name.push_str(&format!(" @ d{}", self.n_depth));
        }
        name
    }

    /// Fills `samples_ts`, `avg_ns`, `stddev_ns`, `avg_ts` and `stddev_ts` from
    /// `samples_ns` the way llama-bench computes them (t/s = 1e9 · tokens / ns; sample sd).
    pub fn set_samples_ns(&mut self, samples_ns: Vec<u64>) {
        let tokens = (self.n_prompt + self.n_gen) as f64;
        self.samples_ts = samples_ns
            .iter()
            .map(|&ns| 1e9 * tokens / ns as f64)
            .collect();
        self.avg_ns = avg_u64(&samples_ns);
        self.stddev_ns = stdev_u64(&samples_ns);
        self.avg_ts = avg_f64(&self.samples_ts);
        self.stddev_ts = stdev_f64(&self.samples_ts);
        self.samples_ns = samples_ns;
    }

    /// The row's values as llama-bench's `test::get_values()` spells them: integers in
    /// decimal, bools as `0`/`1`, floats as C's `%f`.
    pub fn values(&self) -> Vec<String> {
        let Ok(serde_json::Value::Object(row)) = serde_json::to_value(self) else {
            unreachable!("a struct serializes to an object")
        };
        FIELDS
            .iter()
            .map(|&field| {
                let v = &row[field];
                match field_type(field) {
                    FieldType::String => v.as_str().unwrap_or_default().to_string(),
                    FieldType::Bool => if v == true { "1" } else { "0" }.to_string(),
                    FieldType::Int => v.to_string(),
                    // serde writes a non-finite float as null.
                    FieldType::Float => v.as_f64().map_or("nan".into(), |x| format!("{x:.6}")),
                }
            })
            .collect()
    }

    /// The join properties ([`KEY_PROPERTIES`]) on which `self` and `other` differ: empty
    /// when compare-llama-bench.py will pair the two rows.
    pub fn key_mismatches(&self, other: &BenchRow) -> Vec<&'static str> {
        let (a, b) = (self.values(), other.values());
        KEY_PROPERTIES
            .iter()
            .copied()
            .filter(|k| {
                let i = FIELDS.iter().position(|f| f == k).expect("key is a field");
                a[i] != b[i]
            })
            .collect()
    }

    /// A CPU row with llama-bench's defaults for everything a run does not set (what
    /// `pocket bench` starts from before filling in its model, test and timings).
    pub fn cpu_defaults() -> BenchRow {
        BenchRow {
            build_commit: "unknown".into(),
            backends: "CPU".into(),
            n_batch: 2048,
            n_ubatch: 512,
            cpu_mask: "0x0".into(),
            poll: 50,
            type_k: "f16".into(),
            type_v: "f16".into(),
            n_gpu_layers: -1,
            split_mode: "layer".into(),
            flash_attn: -1,
            devices: "auto".into(),
            tensor_split: "0.00".into(),
            tensor_buft_overrides: "none".into(),
            load_mode: "auto".into(),
            lazy_mode: "auto".into(),
            repack: true,
            ..BenchRow::default()
        }
    }
}

fn avg_u64(v: &[u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.iter().fold(0u64, |a, &x| a.wrapping_add(x)) / v.len() as u64
}

/// llama-bench's `stdev<uint64_t>`, integer arithmetic (and its wrap-around) included, so
/// `stddev_ns` comes out as llama-bench would print it; 0 for fewer than two samples.
fn stdev_u64(v: &[u64]) -> u64 {
    if v.len() <= 1 {
        return 0;
    }
    let n = v.len() as u64;
    let mean = avg_u64(v);
    let sq = v
        .iter()
        .fold(0u64, |a, &x| a.wrapping_add(x.wrapping_mul(x)));
    let var = (sq / (n - 1)).wrapping_sub(mean.wrapping_mul(mean).wrapping_mul(n) / (n - 1));
    (var as f64).sqrt() as u64
}

fn avg_f64(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample standard deviation as llama-bench computes it (sum of squares form).
fn stdev_f64(v: &[f64]) -> f64 {
    if v.len() <= 1 {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = avg_f64(v);
    let sq: f64 = v.iter().map(|x| x * x).sum();
    (sq / (n - 1.0) - mean * mean * n / (n - 1.0)).sqrt()
}
