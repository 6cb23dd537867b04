//! A JSON value whose objects keep their keys in document order. `/v1/systemone` needs it
//! where `serde_json::Value` (built without `preserve_order`, whose maps are sorted) would
//! lose the order: the answers come back in the order the questions were asked, a choice's
//! probabilities in the order of its criteria, and an object state is shown to the model
//! with its keys as the client wrote them (as llama-server, whose JSON is ordered).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    /// Entries in document order; a repeated key keeps its first place and its last value.
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn object() -> Json {
        Json::Object(Vec::new())
    }

    /// The value of `key` in an object (None for a missing key or a non-object).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Present and not null.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some_and(|v| !v.is_null())
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// Sets `key` (appended if new, replaced in place if present); for building answers.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Json>) {
        if let Json::Object(m) = self {
            let key = key.into();
            let value = value.into();
            match m.iter_mut().find(|(k, _)| *k == key) {
                Some(e) => e.1 = value,
                None => m.push((key, value)),
            }
        }
    }

    /// The text a model is shown for this value: a string as it is, anything else as JSON
    /// with Python's `json.dumps` separators (`", "`, `": "`), keys in document order.
    pub fn to_text(&self) -> String {
        match self {
            Json::String(s) => s.clone(),
            v => {
                let mut out = String::new();
                v.write_json(&mut out);
                out
            }
        }
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(&n.to_string()),
            Json::String(s) => out.push_str(&serde_json::Value::from(s.as_str()).to_string()),
            Json::Array(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write_json(out);
                }
                out.push(']');
            }
            Json::Object(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&serde_json::Value::from(k.as_str()).to_string());
                    out.push_str(": ");
                    v.write_json(out);
                }
                out.push('}');
            }
        }
    }
}

impl From<f64> for Json {
    fn from(x: f64) -> Json {
        serde_json::Number::from_f64(x).map_or(Json::Null, Json::Number)
    }
}

impl From<usize> for Json {
    fn from(x: usize) -> Json {
        Json::Number((x as u64).into())
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::String(s.to_string())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::String(s)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(x) => s.serialize_str(x),
            Json::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Json::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out = Json::object();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            out.insert(k, v);
        }
        Ok(out)
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_document_order_and_writes_python_separators() {
        let v: Json = serde_json::from_str(
            r#"{"z": 1, "a": [true, null, "x\"y"], "m": {"b": 2.5, "a": -1}}"#,
        )
        .unwrap();
        let keys: Vec<&str> = match &v {
            Json::Object(m) => m.iter().map(|(k, _)| k.as_str()).collect(),
            _ => panic!("not an object"),
        };
        assert_eq!(keys, ["z", "a", "m"]);
        assert_eq!(
            v.to_text(),
            r#"{"z": 1, "a": [true, null, "x\"y"], "m": {"b": 2.5, "a": -1}}"#
        );
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"z":1,"a":[true,null,"x\"y"],"m":{"b":2.5,"a":-1}}"#
        );
        assert_eq!(Json::String("plain".into()).to_text(), "plain");
        assert!(v.has("z") && !v.has("q") && v.get("a").is_some());
    }
}
