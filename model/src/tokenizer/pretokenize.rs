//! BPE pre-tokenizers: split a text fragment into words before merging, as llama.cpp's
//! `unicode_regex_split` does.
//!
//! llama.cpp runs a list of expressions per `tokenizer.ggml.pre`, each one re-splitting the
//! pieces of the previous. The common ones (gpt2, llama3, qwen2, qwen35, newline runs) have
//! hand-written matchers in unicode.cpp, ported here line for line. The others go through
//! `std::regex` on a "collapsed" text, where every code point ≥ 128 is replaced by one byte
//! standing for its category (0xD1 number, 0xD2 letter, ...) and `\p{X}` in the expression by
//! a class of that byte plus its ASCII members; we do the same with `regex::bytes`. Expressions
//! without `\p{..}` run on the code points (non-ASCII whitespace replaced by U+000B).
//!
//! Pre-tokenizers whose expressions need look-around outside the hand-written matchers
//! (tekken, gpt-4o, seed-coder, ...) are reported as unsupported.

mod collapse;
mod matchers;

use collapse::{collapse_cpt, collapse_expr, split_regex, uses_ucat, wide_text};
use matchers::{split_gpt2, split_llama3, split_newlines};

use super::TokenizerError;

const GPT2_RE: &str =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3_RE: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_RE: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35_RE: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const NEWLINES_RE: &str = "[^\\n]+|[\\n]+";

/// The expressions of a pre-tokenizer type, as in `llm_tokenizer_bpe`'s constructor.
fn expressions(kind: PreKind) -> &'static [&'static str] {
    use PreKind::*;
    match kind {
        Default => &[
            "[\\p{P}\\$\\+<=>\\^~\\|]+",
            GPT2_RE,
            "\\p{N}+",
            "[0-9][0-9][0-9]",
        ],
        Llama3 => &[LLAMA3_RE],
        DeepseekLlm => &[
            "[\r\n]",
            "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
            "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
            "\\s+$",
            "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
            "\\p{N}+",
        ],
        DeepseekCoder => &[
            "[\r\n]",
            "\\s?\\p{L}+",
            "\\s?\\p{P}+",
            "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
            "\\p{N}",
        ],
        Falcon => &[
            "[\\p{P}\\$\\+<=>\\^~\\|`]+",
            GPT2_RE,
            "[0-9][0-9][0-9]",
        ],
        Starcoder => &["\\p{N}", GPT2_RE],
        Gpt2 => &[GPT2_RE],
        Qwen2 => &[QWEN2_RE],
        Qwen35 => &[QWEN35_RE],
        Bloom => &[" ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+"],
        Viking => &[" ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+", "\\p{N}"],
        Laguna => &[NEWLINES_RE, QWEN2_RE],
        Gemma4 => &[NEWLINES_RE],
    }
}

/// The supported pre-tokenizer types (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`, grouped by the
/// expressions they share).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreKind {
    Default,
    Llama3,
    DeepseekLlm,
    DeepseekCoder,
    Falcon,
    /// starcoder, refact, command-r, smollm, codeshell, exaone, minerva, mellum2
    Starcoder,
    /// gpt-2, mpt, olmo, jais, trillion, granite-docling, phi-2, roberta-bpe, ...
    Gpt2,
    /// qwen2, stablelm2, hunyuan, solar-open, megrez, ...
    Qwen2,
    Qwen35,
    /// poro-chat, bloom, gpt3-finnish
    Bloom,
    Viking,
    Laguna,
    /// SPM-style BPE on raw UTF-8 (tokenizer model `gemma4`)
    Gemma4,
}

/// Per-name settings llama.cpp applies along with the pre-tokenizer type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreConfig {
    pub kind: PreKind,
    pub clean_spaces: bool,
    pub ignore_merges: bool,
    /// Some pre-tokenizers force `add_bos` before the metadata is read (it can override).
    pub add_bos: Option<bool>,
    /// `chatglm-bpe`, `glm4`: no BOS by default.
    pub no_bos: bool,
    pub escape_whitespaces: bool,
}

impl PreConfig {
    /// `kind` with llama.cpp's defaults for the other settings.
    fn of(kind: PreKind) -> PreConfig {
        PreConfig {
            kind,
            clean_spaces: true,
            ignore_merges: false,
            add_bos: None,
            no_bos: false,
            escape_whitespaces: false,
        }
    }

    /// The same with `clean_spaces` off.
    fn keep_spaces(self) -> PreConfig {
        PreConfig {
            clean_spaces: false,
            ..self
        }
    }
}

/// Maps `tokenizer.ggml.pre` to its settings (`llama_vocab::impl::load`).
pub(crate) fn config_for(pre: &str) -> Result<PreConfig, TokenizerError> {
    use PreKind::*;
    Ok(match pre {
        "" | "default" => PreConfig::of(Default),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => PreConfig {
            ignore_merges: true,
            add_bos: Some(true),
            ..PreConfig::of(Llama3)
        },
        "dbrx" | "smaug-bpe" => PreConfig::of(Llama3),
        "chatglm-bpe" => PreConfig {
            no_bos: true,
            ..PreConfig::of(Llama3)
        },
        "glm4" | "glm5" => PreConfig {
            no_bos: true,
            ignore_merges: true,
            ..PreConfig::of(Llama3)
        },
        "deepseek-llm" => PreConfig::of(DeepseekLlm).keep_spaces(),
        "deepseek-coder" => PreConfig::of(DeepseekCoder).keep_spaces(),
        "falcon" => PreConfig::of(Falcon),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            PreConfig::of(Starcoder)
        }
        "command-r" | "smollm" => PreConfig::of(Starcoder).keep_spaces(),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe"
        | "exaone4" | "mpt" | "olmo" | "jais" => PreConfig::of(Gpt2),
        "trillion" | "granite-docling" => PreConfig::of(Gpt2).keep_spaces(),
        "stablelm2" | "megrez" => PreConfig::of(Qwen2),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => {
            PreConfig::of(Qwen2).keep_spaces()
        }
        "qwen35" => PreConfig::of(Qwen35).keep_spaces(),
        "poro-chat" => PreConfig::of(Bloom).keep_spaces(),
        "bloom" | "gpt3-finnish" => PreConfig::of(Bloom),
        "viking" => PreConfig::of(Viking).keep_spaces(),
        "laguna" => PreConfig::of(Laguna).keep_spaces(),
        "gemma4" => PreConfig {
            escape_whitespaces: true,
            ..PreConfig::of(Gemma4)
        },
        other => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_string())),
    })
}

enum Step {
    Gpt2,
    Llama3,
    Qwen2,
    Qwen35,
    Newlines,
    /// An expression run on the collapsed text (one byte per code point).
    Collapsed(regex::bytes::Regex),
    /// An expression run on the code points.
    Wide(regex::Regex),
}

/// A compiled pre-tokenizer.
pub struct PreTokenizer {
    kind: PreKind,
    steps: Vec<Step>,
    need_collapse: bool,
}

impl PreTokenizer {
    pub fn new(kind: PreKind) -> Result<Self, TokenizerError> {
        let exprs = expressions(kind);
        let mut steps = Vec::with_capacity(exprs.len());
        let mut need_collapse = false;
        for &e in exprs {
            let step = match e {
                GPT2_RE => Step::Gpt2,
                LLAMA3_RE => Step::Llama3,
                QWEN2_RE => Step::Qwen2,
                QWEN35_RE => Step::Qwen35,
                NEWLINES_RE => Step::Newlines,
                _ if uses_ucat(e) => {
                    need_collapse = true;
                    let c = collapse_expr(e)?;
                    Step::Collapsed(
                        regex::bytes::Regex::new(&c)
                            .map_err(|err| TokenizerError::Regex(format!("{c:?}: {err}")))?,
                    )
                }
                _ => Step::Wide(
                    regex::Regex::new(e)
                        .map_err(|err| TokenizerError::Regex(format!("{e:?}: {err}")))?,
                ),
            };
            steps.push(step);
        }
        Ok(PreTokenizer {
            kind,
            steps,
            need_collapse,
        })
    }

    pub fn kind(&self) -> PreKind {
        self.kind
    }

    /// Splits `text` into words (not byte-encoded), as `unicode_regex_split`.
    pub fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let cpts: Vec<u32> = text.chars().map(|c| c as u32).collect();
        if cpts.is_empty() {
            return Vec::new();
        }
        let collapsed: Vec<u8> = if self.need_collapse {
            cpts.iter().map(|&c| collapse_cpt(c)).collect()
        } else {
            Vec::new()
        };
        let mut wide: Option<(String, Vec<usize>)> = None;

        let mut offsets = vec![cpts.len()];
        for step in &self.steps {
            offsets = match step {
                Step::Gpt2 => split_gpt2(&cpts, &offsets),
                Step::Llama3 => split_llama3(&cpts, &offsets, false, false),
                Step::Qwen2 => split_llama3(&cpts, &offsets, true, false),
                Step::Qwen35 => split_llama3(&cpts, &offsets, true, true),
                Step::Newlines => split_newlines(&cpts, &offsets),
                Step::Collapsed(re) => split_regex(&offsets, |s, e| {
                    re.find_iter(&collapsed[s..e])
                        .map(|m| (s + m.start(), s + m.end()))
                        .collect()
                }),
                Step::Wide(re) => {
                    let (wtext, cp_byte) = wide.get_or_insert_with(|| wide_text(&cpts));
                    split_regex(&offsets, |s, e| {
                        let (bs, be) = (cp_byte[s], cp_byte[e]);
                        re.find_iter(&wtext[bs..be])
                            .map(|m| {
                                let ms = cp_byte.partition_point(|&b| b < bs + m.start());
                                let me = cp_byte.partition_point(|&b| b < bs + m.end());
                                (ms, me)
                            })
                            .collect()
                    })
                }
            };
        }

        // code point offsets → byte slices of the original text
        let mut byte_of_cp = Vec::with_capacity(cpts.len() + 1);
        byte_of_cp.extend(text.char_indices().map(|(b, _)| b));
        byte_of_cp.push(text.len());
        let mut words = Vec::with_capacity(offsets.len());
        let mut start = 0;
        for len in offsets {
            words.push(&text[byte_of_cp[start]..byte_of_cp[start + len]]);
            start += len;
        }
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(kind: PreKind, s: &str) -> Vec<String> {
        PreTokenizer::new(kind)
            .unwrap()
            .split(s)
            .into_iter()
            .map(String::from)
            .collect()
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            split(PreKind::Gpt2, "Hello world's  123 !!\n\n x"),
            ["Hello", " world", "'s", " ", " 123", " !!", "\n\n", " x"]
        );
    }

    #[test]
    fn llama3_digits_and_newlines() {
        assert_eq!(
            split(PreKind::Llama3, "12345 ab\n\n  cd"),
            ["123", "45", " ab", "\n\n", " ", " cd"]
        );
        assert_eq!(split(PreKind::Qwen2, "12 X'LL"), ["1", "2", " X", "'LL"]);
    }

    #[test]
    fn all_kinds_compile() {
        // one `tokenizer.ggml.pre` name per kind
        let names = [
            "default",
            "llama3",
            "deepseek-llm",
            "deepseek-coder",
            "falcon",
            "starcoder",
            "gpt-2",
            "qwen2",
            "qwen35",
            "bloom",
            "viking",
            "laguna",
            "gemma4",
        ];
        let kinds: Vec<PreKind> = names.iter().map(|n| config_for(n).unwrap().kind).collect();
        for (i, k) in kinds.iter().enumerate() {
            assert!(!kinds[..i].contains(k), "{k:?} twice");
        }
        for k in kinds {
            let p = PreTokenizer::new(k).unwrap();
            let words = p.split("Hello, wörld! 3333 你好 \n\t x");
            assert_eq!(words.concat(), "Hello, wörld! 3333 你好 \n\t x", "{k:?}");
        }
    }

    #[test]
    fn starcoder_splits_digits_first() {
        assert_eq!(
            split(PreKind::Starcoder, " 123a"),
            [" ", "1", "2", "3", "a"]
        );
    }
}
