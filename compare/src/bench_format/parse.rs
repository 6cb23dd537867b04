//! Reading llama-bench's output (json, jsonl, csv, md) back into [`BenchRow`]s.

use serde_json::{Map, Value};

use super::{md_field, Format};
use crate::bench_row::{field_type, BenchRow, FieldType, REQUIRED};

/// Where llama-bench output could not be read (`llama-bench json row 2`) and why.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {problem}")]
pub struct ParseError {
    pub what: String,
    pub problem: Problem,
}

/// Why llama-bench output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("llama-bench sql output is write-only here")]
    WriteOnly,
    #[error("missing llama-bench field(s): {0}")]
    Missing(String),
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("expected an array of rows")]
    NotArray,
    #[error("not an object")]
    NotObject,
    #[error("{0}: cannot read `{1}`")]
    Unreadable(String, String),
    #[error("empty")]
    Empty,
    #[error("{0} values for {1} columns")]
    Width(usize, usize),
    #[error("no table")]
    NoTable,
    #[error("no `{0}` column")]
    NoColumn(&'static str),
}

impl ParseError {
    fn new(what: &str, problem: Problem) -> ParseError {
        ParseError {
            what: what.to_string(),
            problem,
        }
    }
}

type Result<T> = std::result::Result<T, ParseError>;

/// Reads llama-bench output in `format` (sql is write-only).
pub fn parse(text: &str, format: Format) -> Result<Vec<BenchRow>> {
    match format {
        Format::Md => parse_md(text),
        Format::Csv => parse_csv(text),
        Format::Json => parse_json(text),
        Format::Jsonl => parse_jsonl(text),
        Format::Sql => Err(ParseError::new("llama-bench sql", Problem::WriteOnly)),
    }
}

/// A row from a map of field -> value; `required` fields must be present.
fn row_from_map(map: Map<String, Value>, required: &[&str], what: &str) -> Result<BenchRow> {
    check_required(&map, required.iter().copied()).map_err(|p| ParseError::new(what, p))?;
    serde_json::from_value(Value::Object(map)).map_err(|e| ParseError::new(what, Problem::Json(e)))
}

/// Refuses `map` unless it has every `required` field (naming the missing ones).
pub(crate) fn check_required<'a>(
    map: &Map<String, Value>,
    required: impl IntoIterator<Item = &'a str>,
) -> std::result::Result<(), Problem> {
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|f| !map.contains_key(*f))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Problem::Missing(missing.join(", ")))
    }
}

fn parse_json(text: &str) -> Result<Vec<BenchRow>> {
    let what = "llama-bench json";
    let v: Value =
        serde_json::from_str(text).map_err(|e| ParseError::new(what, Problem::Json(e)))?;
    let Value::Array(items) = v else {
        return Err(ParseError::new(what, Problem::NotArray));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(m) => {
                row_from_map(m, &REQUIRED, &format!("llama-bench json row {}", i + 1))
            }
            _ => Err(ParseError::new(
                &format!("llama-bench json row {}", i + 1),
                Problem::NotObject,
            )),
        })
        .collect()
}

fn parse_jsonl(text: &str) -> Result<Vec<BenchRow>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let what = format!("llama-bench jsonl line {}", i + 1);
            match serde_json::from_str(line)
                .map_err(|e| ParseError::new(&what, Problem::Json(e)))?
            {
                Value::Object(m) => row_from_map(m, &REQUIRED, &what),
                _ => Err(ParseError::new(&what, Problem::NotObject)),
            }
        })
        .collect()
}

/// A typed JSON value from llama-bench's text spelling of `field`.
fn typed(field: &str, text: &str, what: &str) -> Result<Value> {
    let bad = || {
        ParseError::new(
            what,
            Problem::Unreadable(format!("field {field}"), text.to_string()),
        )
    };
    Ok(match field_type(field) {
        FieldType::String => Value::String(text.to_string()),
        FieldType::Bool => Value::Bool(match text {
            "0" | "false" => false,
            "1" | "true" => true,
            _ => return Err(bad()),
        }),
        FieldType::Int => {
            if let Ok(u) = text.parse::<u64>() {
                Value::from(u)
            } else {
                Value::from(text.parse::<i64>().map_err(|_| bad())?)
            }
        }
        FieldType::Float => Value::from(text.parse::<f64>().map_err(|_| bad())?),
    })
}

/// Splits one CSV record (llama-bench quotes every value, doubling inner quotes).
fn csv_record(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// A table row's `cells`, refused unless there is one per column of `header`.
fn one_per_column(cells: Vec<String>, header: &[String], what: &str) -> Result<Vec<String>> {
    if cells.len() != header.len() {
        return Err(ParseError::new(
            what,
            Problem::Width(cells.len(), header.len()),
        ));
    }
    Ok(cells)
}

fn parse_csv(text: &str) -> Result<Vec<BenchRow>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = csv_record(
        lines
            .next()
            .ok_or_else(|| ParseError::new("llama-bench csv", Problem::Empty))?,
    );
    lines
        .enumerate()
        .map(|(i, line)| {
            let what = format!("llama-bench csv row {}", i + 1);
            let values = one_per_column(csv_record(line), &header, &what)?;
            let mut map = Map::new();
            for (field, value) in header.iter().zip(&values) {
                map.insert(field.clone(), typed(field, value, &what)?);
            }
            row_from_map(map, &REQUIRED, &what)
        })
        .collect()
}

fn md_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// `92.10 MiB` -> bytes (as precise as the table is).
fn md_size(text: &str) -> Option<u64> {
    let (num, unit) = text.split_once(' ')?;
    let scale = match unit {
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((num.parse::<f64>().ok()? * scale).round() as u64)
}

/// `134.52 M` -> count.
fn md_params(text: &str) -> Option<u64> {
    let (num, unit) = text.split_once(' ')?;
    let scale = match unit {
        "M" => 1e6,
        "B" => 1e9,
        _ => return None,
    };
    Some((num.parse::<f64>().ok()? * scale).round() as u64)
}

/// `pp512`, `tg128`, `pp512+tg128`, each with an optional ` @ d4096` -> (prompt, gen, depth).
pub fn parse_test_name(text: &str) -> Option<(i64, i64, i64)> {
    let (test, depth) = match text.split_once('@') {
        Some((t, d)) => (t.trim(), d.trim().strip_prefix('d')?.parse().ok()?),
        None => (text.trim(), 0),
    };
    let num = |s: &str, p: &str| s.strip_prefix(p)?.parse::<i64>().ok();
    if let Some((pp, tg)) = test.split_once('+') {
        Some((num(pp, "pp")?, num(tg, "tg")?, depth))
    } else if let Some(p) = num(test, "pp") {
        Some((p, 0, depth))
    } else {
        Some((0, num(test, "tg")?, depth))
    }
}

fn parse_md(text: &str) -> Result<Vec<BenchRow>> {
    let table: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .collect();
    if table.len() < 2 {
        return Err(ParseError::new("llama-bench md", Problem::NoTable));
    }
    let header = md_cells(table[0]);
    for need in ["model", "test", "t/s"] {
        if !header.iter().any(|h| h == need) {
            return Err(ParseError::new("llama-bench md", Problem::NoColumn(need)));
        }
    }
    let build = text
        .lines()
        .find_map(|l| l.strip_prefix("build: "))
        .and_then(|b| {
            let (commit, num) = b.trim().rsplit_once(" (")?;
            Some((
                commit.to_string(),
                num.trim_end_matches(')').parse::<i64>().ok()?,
            ))
        });
    let mut rows = Vec::new();
    for (i, line) in table[2..].iter().enumerate() {
        let what = format!("llama-bench md row {}", i + 1);
        let cells = one_per_column(md_cells(line), &header, &what)?;
        // Fields the md table leaves out are at llama-bench's defaults.
        let defaults = serde_json::to_value(BenchRow::cpu_defaults());
        let Ok(Value::Object(mut map)) = defaults else {
            unreachable!("a struct serialises to an object")
        };
        if let Some((commit, number)) = &build {
            map.insert("build_commit".into(), commit.clone().into());
            map.insert("build_number".into(), (*number).into());
        }
        for (col, cell) in header.iter().zip(&cells) {
            let bad = || {
                ParseError::new(
                    &what,
                    Problem::Unreadable(format!("column {col}"), cell.clone()),
                )
            };
            match col.as_str() {
                "model" => {
                    map.insert("model_type".into(), cell.clone().into());
                }
                "size" => {
                    map.insert("model_size".into(), md_size(cell).ok_or_else(bad)?.into());
                }
                "params" => {
                    let n = md_params(cell).ok_or_else(bad)?;
                    map.insert("model_n_params".into(), n.into());
                }
                "backend" => {
                    map.insert("backends".into(), cell.clone().into());
                }
                "test" => {
                    let (p, g, d) = parse_test_name(cell).ok_or_else(bad)?;
                    map.insert("n_prompt".into(), p.into());
                    map.insert("n_gen".into(), g.into());
                    map.insert("n_depth".into(), d.into());
                }
                "t/s" => {
                    let (avg, sd) = cell.split_once('±').ok_or_else(bad)?;
                    let avg: f64 = avg.trim().parse().map_err(|_| bad())?;
                    let sd: f64 = sd.trim().parse().map_err(|_| bad())?;
                    map.insert("avg_ts".into(), avg.into());
                    map.insert("stddev_ts".into(), sd.into());
                }
                display => {
                    let field = md_field(display);
                    map.insert(field.into(), typed(field, cell, &what)?);
                }
            }
        }
        rows.push(row_from_map(map, &[], &what)?);
    }
    Ok(rows)
}
