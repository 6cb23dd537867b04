//! Native decision models: GGUFs that declare `<arch>.decision.type`, answered the way
//! llama.cpp b11434's llama-server answers them on `POST /v1/systemone`
//! (`tools/server/server-decision.cpp`, `common/common.cpp`, `src/llama-model.cpp`).
//!
//! What llama-server reads from the file (`server_decision_context::init`):
//! - `<arch>.decision.type`, a string: `openjev`, `lev`, `nimble` (the logits of one label
//!   token per option, read at the prompt's last token), `kev` (a scaled dot product of
//!   hidden states: the last token's against each option's `<|box_end|>`), `laya` (a score
//!   column of the hidden state at one marker token per option) and `clef` (a joint head
//!   over all questions). Another value stops the server from loading ("unsupported
//!   decision model type"); a file without the key is not a decision model.
//! - `tokenizer.chat_template.systemone`, the jinja template of the prompt (required).
//! - every `<arch>.decision.temperature.<name>` key, `<name>` being `<question type>` or
//!   `<question type>.<bucket>`; each value is read through its text form (`%f`, six
//!   decimals) and must be > 0.
//! - the label tokens: openjev's are the 52 letters `A`-`Z`, `a`-`z`, each of which must be a
//!   single token (tokenized without BOS, special tokens not parsed); lev's and nimble's are
//!   the codes `A`-`Z` then `AA`-`ZZ` that are a single token, at most 255, and their texts
//!   are given to the template as each option's `label`. The number of labels is the most
//!   options a question may have.
//!
//! How a question is answered (`fill_task`, `send_decision`, `format_answer`): the template
//! renders a prompt per question and per *variant*; the prompt is tokenized without BOS,
//! special tokens parsed, and evaluated; the logits of the label tokens at its last token
//! are the scores. Option `i` as shown gets label `i`. lev shows a choice of two or more
//! options twice, the second time in reverse order (to cancel the preference for the first
//! label), and answers noul on a 9-point rating scale (the first 9 labels: 0 = certainly
//! no .. 8 = certainly yes). openjev lists a noul question's options as `true, false`.
//! Each variant's scores go through a softmax at the question's temperature (the largest
//! subtracted first), the variants' probabilities are averaged (the reverse variant mapped
//! back), and: `noul` is the probability of `true` (lev: the expected rating / 8), `choice`
//! the argmax, `score` the expectation of the level index; the confidences are TypeSafe's.
//!
//! pocket runs the three label types ([`LabelDecision`]); kev, laya and clef need heads on
//! the hidden states that pocket's forward pass does not compute: they load as
//! [`DecisionModel::Unsupported`] and the server answers 501 naming the type.

use std::collections::BTreeMap;

use crate::chat::{ChatError, ChatTemplate};
use crate::gguf::{Gguf, Value};
use crate::tokenizer::Tokenizer;

/// The `<arch>.decision.type` values llama.cpp b11434 knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionType {
    Openjev,
    Lev,
    Nimble,
    Kev,
    Laya,
    Clef,
}

impl DecisionType {
    pub const ALL: [DecisionType; 6] = [
        DecisionType::Openjev,
        DecisionType::Lev,
        DecisionType::Nimble,
        DecisionType::Kev,
        DecisionType::Laya,
        DecisionType::Clef,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DecisionType::Openjev => "openjev",
            DecisionType::Lev => "lev",
            DecisionType::Nimble => "nimble",
            DecisionType::Kev => "kev",
            DecisionType::Laya => "laya",
            DecisionType::Clef => "clef",
        }
    }

    pub fn parse(s: &str) -> Option<DecisionType> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Whether the model answers from the logits of label tokens (what pocket runs).
    pub fn reads_label_logits(self) -> bool {
        matches!(
            self,
            DecisionType::Openjev | DecisionType::Lev | DecisionType::Nimble
        )
    }

    /// What the types pocket cannot run read instead of label logits.
    pub fn head(self) -> &'static str {
        match self {
            DecisionType::Kev => "a pointer head over hidden states (the last token's against each option's end token)",
            DecisionType::Laya => "a scorer over the hidden state of one marker token per option",
            DecisionType::Clef => "a joint head over all the questions of a request",
            _ => "the logits of one label token per option",
        }
    }
}

/// The kinds of question (`type` in a request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuestionKind {
    Choice,
    Score,
    Noul,
}

impl QuestionKind {
    pub fn name(self) -> &'static str {
        match self {
            QuestionKind::Choice => "choice",
            QuestionKind::Score => "score",
            QuestionKind::Noul => "noul",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("{key} must be a string, found {found}")]
    TypeNotString { key: String, found: String },
    #[error("unsupported decision model type {value:?} in {key} (llama.cpp knows {known})", known = DecisionType::ALL.map(DecisionType::name).join(", "))]
    UnknownType { key: String, value: String },
    #[error("decision model has no \"systemone\" template (tokenizer.chat_template.systemone)")]
    NoTemplate,
    #[error("tokenizer.chat_template.systemone must be a string, found {0}")]
    TemplateNotString(String),
    #[error("decision model's systemone template: {0}")]
    Template(#[from] ChatError),
    #[error("invalid decision temperature: {key} = {value} (a number > 0 is needed)")]
    BadTemperature { key: String, value: String },
    #[error("decision label {0:?} is not a single token")]
    LabelNotOneToken(String),
    #[error("decision model type lev needs {need} single-token labels (A, B, ...) for its noul rating scale, the vocabulary has {have}")]
    TooFewLabels { need: usize, have: usize },
}

/// A GGUF's decision model, if it declares one.
#[derive(Debug)]
pub enum DecisionModel {
    /// openjev, lev, nimble: run by pocket.
    Labels(Box<LabelDecision>),
    /// kev, laya, clef: declared, but they need a head pocket does not run.
    Unsupported(DecisionType),
}

/// openjev's 52 letters; lev's noul rating scale.
const OPENJEV_LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
pub const LEV_N_RATINGS: usize = 9;
const MAX_CODES: usize = 255;

/// A decision model read from the logits of label tokens (openjev, lev, nimble).
#[derive(Debug)]
pub struct LabelDecision {
    pub kind: DecisionType,
    /// The `systemone` template (compiled with empty BOS/EOS texts, as llama-server).
    pub template: ChatTemplate,
    /// `<question type>[.<bucket>]` → temperature.
    pub temperatures: BTreeMap<String, f64>,
    /// Label token of the option shown at each position.
    pub labels: Vec<u32>,
    /// lev and nimble: each label's text, given to the template as the option's `label`.
    pub label_texts: Vec<String>,
}

/// Reads the decision metadata of `g` (None: not a decision model).
pub fn from_gguf<B: AsRef<[u8]>>(
    g: &Gguf<B>,
    tok: &Tokenizer,
) -> Result<Option<DecisionModel>, DecisionError> {
    let Ok(arch) = g.get_str("general.architecture") else {
        return Ok(None);
    };
    let key = format!("{arch}.decision.type");
    let kind = match g.get(&key) {
        None => return Ok(None),
        Some(Value::String(s)) => {
            DecisionType::parse(&s).ok_or_else(|| DecisionError::UnknownType {
                key: key.clone(),
                value: s.into_owned(),
            })?
        }
        Some(v) => {
            let found = format!("{} {v}", v.value_type().name());
            return Err(DecisionError::TypeNotString { key, found });
        }
    };
    if !kind.reads_label_logits() {
        return Ok(Some(DecisionModel::Unsupported(kind)));
    }
    let template = match g.get("tokenizer.chat_template.systemone") {
        None => return Err(DecisionError::NoTemplate),
        Some(Value::String(s)) => ChatTemplate::new(&s, "", "")?,
        Some(v) => {
            return Err(DecisionError::TemplateNotString(
                v.value_type().name().into(),
            ))
        }
    };
    let temperatures = temperatures(g, &format!("{arch}.decision.temperature."))?;
    let (labels, label_texts) = labels(kind, tok)?;
    Ok(Some(DecisionModel::Labels(Box::new(LabelDecision {
        kind,
        template,
        temperatures,
        labels,
        label_texts,
    }))))
}

/// Every `<prefix><name>` key. llama-server reads the value's text (`std::to_string`: six
/// decimals for a float) with `strtof`, so the value is rounded to six decimals here too;
/// what is not a number (a string, a bool, an array) is refused rather than read as 0.
fn temperatures<B: AsRef<[u8]>>(
    g: &Gguf<B>,
    prefix: &str,
) -> Result<BTreeMap<String, f64>, DecisionError> {
    let mut out = BTreeMap::new();
    for (key, v) in g.metadata() {
        let Some(name) = key.strip_prefix(prefix) else {
            continue;
        };
        let bad = || DecisionError::BadTemperature {
            key: key.to_string(),
            value: format!("{} {v}", v.value_type().name()),
        };
        let t = match v {
            Value::F32(_) | Value::F64(_) => v.as_f64().map(|x| format!("{x:.6}")),
            _ => v.as_i64().map(|x| x.to_string()),
        };
        let t: f64 = match t.and_then(|s| s.parse::<f32>().ok()) {
            Some(t) if t.is_finite() && t > 0.0 => t as f64,
            _ => return Err(bad()),
        };
        out.insert(name.to_string(), t);
    }
    Ok(out)
}

/// The label tokens (and texts, for lev and nimble) of `kind`.
fn labels(kind: DecisionType, tok: &Tokenizer) -> Result<(Vec<u32>, Vec<String>), DecisionError> {
    let one = |text: &str| match tok.encode(text, false, false)[..] {
        [t] => Some(t),
        _ => None,
    };
    if kind == DecisionType::Openjev {
        let mut labels = Vec::with_capacity(OPENJEV_LETTERS.len());
        for c in OPENJEV_LETTERS.chars() {
            let text = c.to_string();
            labels.push(one(&text).ok_or(DecisionError::LabelNotOneToken(text))?);
        }
        return Ok((labels, Vec::new()));
    }
    let singles = ('A'..='Z').map(String::from);
    let pairs = ('A'..='Z').flat_map(|a| ('A'..='Z').map(move |b| format!("{a}{b}")));
    let (mut labels, mut texts) = (Vec::new(), Vec::new());
    for code in singles.chain(pairs) {
        if labels.len() == MAX_CODES {
            break;
        }
        if let Some(t) = one(&code) {
            labels.push(t);
            texts.push(code);
        }
    }
    if kind == DecisionType::Lev && labels.len() < LEV_N_RATINGS {
        return Err(DecisionError::TooFewLabels {
            need: LEV_N_RATINGS,
            have: labels.len(),
        });
    }
    Ok((labels, texts))
}

impl LabelDecision {
    /// The most options a question may have.
    pub fn max_options(&self) -> usize {
        self.labels.len()
    }

    /// openjev lists a noul question's options as `true, false`.
    pub fn noul_true_first(&self) -> bool {
        self.kind == DecisionType::Openjev
    }

    /// Prompts evaluated for a question: lev shows a choice of 2+ options twice.
    pub fn n_variants(&self, kind: QuestionKind, n_options: usize) -> usize {
        match (self.kind, kind) {
            (DecisionType::Lev, QuestionKind::Choice) if n_options > 1 => 2,
            _ => 1,
        }
    }

    /// Scores read per prompt: lev's noul reads its 9 ratings, the others one per option.
    pub fn n_outputs(&self, kind: QuestionKind, n_options: usize) -> usize {
        match (self.kind, kind) {
            (DecisionType::Lev, QuestionKind::Noul) => LEV_N_RATINGS,
            _ => n_options,
        }
    }

    /// The question's temperature: `<type>.<bucket>`, else `<type>`, else 1, with
    /// llama.cpp's buckets of the option count.
    pub fn temperature(&self, kind: QuestionKind, n_options: usize) -> f64 {
        temperature(
            &|name| self.temperatures.get(name).copied(),
            self.kind == DecisionType::Lev,
            kind,
            n_options,
        )
    }

    /// The probability of each output from the raw scores of each variant (llama-server's
    /// `format_answer`): a softmax per variant at `temperature`, averaged, the second
    /// variant's positions reversed.
    pub fn probabilities(scores: &[Vec<f32>], temperature: f64) -> Vec<f64> {
        let n = scores.first().map_or(0, Vec::len);
        let mut probs = vec![0.0; n];
        for (v, s) in scores.iter().enumerate() {
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f64> = s
                .iter()
                .map(|&x| ((x - max) as f64 / temperature).exp())
                .collect();
            let sum: f64 = e.iter().sum();
            for (i, p) in e.iter().enumerate() {
                let at = if v == 0 { i } else { n - 1 - i };
                probs[at] += p / sum / scores.len() as f64;
            }
        }
        probs
    }
}

/// llama-server's `get_temperature`: `lookup(<type>.<bucket>)`, else `lookup(<type>)`, else 1.
/// Buckets of the option count: lev's small (≤ 8), mid (≤ 26), large; the others' 2, 3_5,
/// 6_10, 11.
pub fn temperature(
    lookup: &dyn Fn(&str) -> Option<f64>,
    lev_buckets: bool,
    kind: QuestionKind,
    n_options: usize,
) -> f64 {
    let bucket = match (lev_buckets, n_options) {
        (true, 0..=8) => "small",
        (true, 9..=26) => "mid",
        (true, _) => "large",
        (false, 0..=2) => "2",
        (false, 3..=5) => "3_5",
        (false, 6..=10) => "6_10",
        (false, _) => "11",
    };
    let name = kind.name();
    lookup(&format!("{name}.{bucket}"))
        .or_else(|| lookup(name))
        .unwrap_or(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reverse_variant_maps_back_and_temperature_sharpens() {
        // Variant 0 shows (a, b, c), variant 1 (c, b, a).
        let p = LabelDecision::probabilities(&[vec![1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0]], 1.0);
        let e = std::f64::consts::E;
        let want = [e / (e + 2.0), 1.0 / (e + 2.0), 1.0 / (e + 2.0)];
        for (a, b) in p.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{p:?}");
        }
        let cold = LabelDecision::probabilities(&[vec![1.0, 0.0]], 0.5);
        assert!((cold[0] - e * e / (e * e + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn buckets_follow_llama_cpp() {
        let t = |name: &str| match name {
            "choice.3_5" => Some(0.5),
            "choice" => Some(2.0),
            "noul.small" => Some(3.0),
            _ => None,
        };
        assert_eq!(temperature(&t, false, QuestionKind::Choice, 3), 0.5);
        assert_eq!(temperature(&t, false, QuestionKind::Choice, 6), 2.0);
        assert_eq!(temperature(&t, true, QuestionKind::Choice, 3), 2.0);
        assert_eq!(temperature(&t, true, QuestionKind::Noul, 2), 3.0);
        assert_eq!(temperature(&t, false, QuestionKind::Score, 4), 1.0);
    }
}
