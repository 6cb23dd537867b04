//! The functions and filters templates call beyond minijinja's own: `raise_exception`,
//! a fuel-paying `join` and Python-style `tojson`, `strftime_now`.

use super::*;

/// A map value that keeps insertion order (Python dicts do; `tojson` shows it).
pub(super) fn dict<const N: usize>(items: [(&str, Value); N]) -> Value {
    let m: indexmap::IndexMap<Value, Value> = items
        .into_iter()
        .map(|(k, v)| (Value::from(k), v))
        .collect();
    Value::from_object(m)
}

pub(super) fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// minijinja's `join`, after paying for its output: minijinja checks the output against the
/// fuel only for a non-empty joiner, so `[s] * n | join('')` could build all n copies of `s`
/// (gigabytes) before running out.
pub(super) fn join(
    state: &mut State,
    value: &Value,
    joiner: Option<StringInput<'_>>,
    attribute: Option<&str>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let sep = joiner.as_ref().map_or(0, |j| j.as_str().len());
    let mut bytes = 0usize;
    for item in value.try_iter().into_iter().flatten() {
        let item = match attribute {
            Some(a) => item.get_attr(a).unwrap_or_default(),
            None => item,
        };
        bytes = bytes.saturating_add(sep + item.as_str().map_or(0, str::len));
    }
    state.consume_fuel(bytes as u64 / 64)?;
    minijinja::filters::join(state, value, joiner, attribute, kwargs)
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)` as Hugging Face's
/// `tojson` filter calls it.
pub(super) fn tojson(
    state: &State,
    value: Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let indent: Option<usize> = match indent.or(kwargs.get::<Option<Value>>("indent")?) {
        Some(v) if v.kind() == ValueKind::Number => Some(usize::try_from(v)?),
        Some(v) if v.kind() == ValueKind::String => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: string indent is not supported",
            ))
        }
        _ => None,
    };
    let _ = kwargs.get::<Option<Value>>("ensure_ascii")?;
    let _ = kwargs.get::<Option<Value>>("separators")?;
    let _ = kwargs.get::<Option<Value>>("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    py_json(state, &value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn py_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The output is charged as fuel before it is written (one fuel per value, plus its strings
/// and indentation): a value made cheaply (`[s] * n` shares one `s`, `indent=10**9`) could
/// otherwise serialize to gigabytes. The depth cap keeps the recursion off the end of the
/// native stack.
fn py_json(
    state: &State,
    v: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> Result<(), Error> {
    if depth > MAX_JSON_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: value nested deeper than {MAX_JSON_DEPTH}"),
        ));
    }
    let newline = |out: &mut String, depth: usize| -> Result<(), Error> {
        if let Some(n) = indent {
            let spaces = n.saturating_mul(depth);
            state.consume_fuel(spaces as u64 / 64)?;
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', spaces));
        }
        Ok(())
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    // `open`, the items (each on a line of its own when indenting), `close`.
    type Item<'i> = dyn Fn(&mut String, &Value) -> Result<(), Error> + 'i;
    let container = |out: &mut String, (open, close), items: &[Value], item: &Item| {
        out.push(open);
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(item_sep);
            }
            newline(out, depth + 1)?;
            item(out, x)?;
        }
        if !items.is_empty() {
            newline(out, depth)?;
        }
        out.push(close);
        Ok::<(), Error>(())
    };
    state.consume_fuel(1)?;
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = v.as_i64() {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(v.clone())?;
                if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
                    out.push_str(&format!("{f:.1}"));
                } else if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    out.push_str(&f.to_string());
                }
            }
        }
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            state.consume_fuel(s.len() as u64 / 64)?;
            py_json_str(s, out)
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            container(out, ('{', '}'), &keys, &|out, k| {
                match k.as_str() {
                    Some(s) => {
                        state.consume_fuel(s.len() as u64 / 64)?;
                        py_json_str(s, out)
                    }
                    None => py_json_str(&k.to_string(), out),
                }
                out.push_str(": ");
                py_json(state, &v.get_item(k)?, indent, depth + 1, out)
            })?;
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            container(out, ('[', ']'), &items, &|out, item| {
                py_json(state, item, indent, depth + 1, out)
            })?;
        }
        _ => py_json_str(&v.to_string(), out),
    }
    Ok(())
}

/// `strftime_now(fmt)` (used by Llama 3.x templates for the date), in UTC. Supports
/// `%Y %y %m %d %e %B %b %A %a %H %M %S %j %%`.
pub(super) fn strftime_now(fmt: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(&fmt, secs)
}

pub(super) fn strftime(fmt: &str, secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);

    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('b') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('H') => out.push_str(&format!("{:02}", tod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", tod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", tod % 60)),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The proleptic Gregorian (year, month 1-12, day 1-31) of `days` since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday, day 208.
        let t = 1_722_000_000 - 1_722_000_000 % 86_400 + 13 * 3600 + 5 * 60 + 9;
        assert_eq!(
            strftime("%d %b %Y %H:%M:%S %A %j %B %y %m %%", t),
            "26 Jul 2024 13:05:09 Friday 208 July 24 07 %"
        );
        assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
        assert_eq!(strftime("%Y-%m-%d %j", 951_782_400), "2000-02-29 060");
    }
}
