//! pocket's tokenizer as llguidance's token environment: each token's bytes as the
//! output stream shows them, control tokens as 0xFF + their text (llguidance's special
//! token marker, as llama.cpp's `llama_sampler_llg_new_tokenizer` builds it), and the
//! end-of-generation tokens as llguidance's EOS set.

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::tokenizer::Tokenizer;

/// Every token's bytes, and the ids that end generation.
pub(super) fn token_bytes(tok: &Tokenizer) -> (Vec<Vec<u8>>, Vec<u32>) {
    let n = tok.n_vocab();
    let mut out = Vec::with_capacity(n);
    for id in 0..n as u32 {
        let mut b = Vec::new();
        tok.piece_into(id, false, &mut b);
        if b.is_empty() {
            // Control tokens have no text in the output; llguidance names them by it.
            let mut special = Vec::new();
            tok.piece_into(id, true, &mut special);
            if !special.is_empty() {
                b.push(TokTrie::SPECIAL_TOKEN_MARKER);
                b.extend_from_slice(&special);
            }
        }
        out.push(b);
    }
    let mut eog = tok.eog_ids().to_vec();
    // llguidance's first EOS is the one it reports; prefer the model's declared EOS/EOT.
    if let Some(first) = tok.eot().or(tok.eos()).filter(|e| eog.contains(e)) {
        eog.retain(|&e| e != first);
        eog.insert(0, first);
    }
    (out, eog)
}

/// The trie over `bytes`, tokenizing greedily where llguidance needs to tokenize (it
/// does not when it only masks and commits, which is all pocket asks of it).
pub(super) fn trie_env(bytes: Vec<Vec<u8>>, eog: &[u32]) -> Result<TokEnv, String> {
    let n = bytes.len() as u32;
    let Some(&first) = eog.first() else {
        return Err("the model declares no end-of-generation token".into());
    };
    if let Some(&bad) = eog.iter().find(|&&e| e >= n) {
        return Err(format!(
            "end-of-generation token {bad} is outside the vocabulary of {n}"
        ));
    }
    let trie = TokTrie::from(&TokRxInfo::new(n, first), &bytes).with_eos_tokens(eog);
    Ok(Arc::new(TrieEnv { trie }))
}

struct TrieEnv {
    trie: TokTrie,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}
