//! `pocket chat -m MODEL [-sys TEXT] [--chat-template T] [-n N] [-c CTX] ...`: an interactive
//! multi-turn chat. Each user line is added to the conversation, the whole conversation is
//! rendered with the chat template and tokenized, the KV cache is cut to the longest
//! common token prefix with what it holds (`Session::reuse_prefix`) and only the new
//! suffix is prefilled, as llama.cpp's server and cli do. The reply streams to stdout and
//! stops at an end-of-generation token or after `-n` tokens.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Instant;

use clap::Args;
use pocket_model::chat::{ChatMessage, ChatTemplate};
use pocket_model::forward::ms_since;
use pocket_model::generate::{generate_with, GenParams};
use pocket_model::{Model, Session};

use super::engine_args::ModelArgs;
use super::gen_args::{constrain, DecodeArgs};
use super::{CliError, CliResult};

#[derive(Args)]
#[command(mut_arg("ctx_size", |a| a.help(
    "Context size: the whole conversation (see below for what happens when it is full)")))]
#[command(after_help = "\
Reads one user message per line from stdin (a terminal or a pipe); end of input (Ctrl-D) \
ends the session. `/reset` starts a new conversation (the system prompt is kept), `/exit` \
ends. Each turn reuses the cached tokens the new rendering of the conversation shares with \
the cache (stderr reports `reused N cached tokens`); timings are printed on stderr at exit.

When a message plus -n reply tokens would not fit in the context (-c), the OLDEST TURNS \
(user message and reply) are dropped until it fits, the system prompt is kept, and stderr \
says so; a message that does not fit even alone is refused with an error and the chat \
goes on.")]
pub struct ChatArgs {
    #[command(flatten)]
    engine: ModelArgs,
    /// System prompt (-sys) [default: none; the template may add its own].
    #[arg(long = "system-prompt", value_name = "TEXT")]
    system_prompt: Option<String>,
    /// Chat template: chatml, gemma, llama3, command-r or jinja text [default: the model's
    /// tokenizer.chat_template, else chatml].
    #[arg(long, value_name = "NAME|JINJA")]
    chat_template: Option<String>,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 256)]
    n_predict: usize,
    #[command(flatten)]
    decode: DecodeArgs,
}

/// Totals over the session, for the summary at exit.
#[derive(Default)]
struct Totals {
    turns: usize,
    prompt_tokens: usize,
    prompt_ms: f64,
    reused: usize,
    gen_tokens: usize,
    dec_steps: usize,
    gen_ms: f64,
    dropped_turns: usize,
}

pub fn run(a: ChatArgs) -> CliResult {
    if a.n_predict == 0 {
        return Err(CliError::NoReplyTokens.into());
    }
    if a.n_predict >= a.engine.ctx_size {
        return Err(CliError::NoRoomForChat {
            n_predict: a.n_predict,
            n_ctx: a.engine.ctx_size,
        }
        .into());
    }
    let t0 = Instant::now();
    let model = a.engine.load_model()?;
    let tok = &model.tokenizer;
    let tmpl = ChatTemplate::from_gguf(model.gguf(), tok, a.chat_template.as_deref())?;
    let mut s = Session::try_new(&model, a.engine.session_options(a.engine.ctx_size)?)?;
    let draft = match a.decode.spec.draft_path()? {
        Some(p) => Some(Model::load_with(p, a.engine.load_options())?),
        None => None,
    };
    let mut spec = a.decode.spec.speculator(
        &model,
        draft.as_ref(),
        a.engine.session_options(a.engine.ctx_size)?,
    )?;
    let load_ms = ms_since(t0);
    let n_ctx = s.n_ctx();

    let mut sampler = a.decode.sampling.sampler();
    let grammar = a.decode.grammar.compile(tok)?;
    let mut messages: Vec<ChatMessage> = Vec::new();
    let base: Vec<ChatMessage> = match &a.system_prompt {
        Some(p) if !p.is_empty() => vec![ChatMessage::new("system", p.as_str())],
        _ => Vec::new(),
    };
    messages.extend(base.iter().cloned());
    let mut tot = Totals::default();
    let interactive = std::io::stdin().is_terminal();
    let mut out = std::io::stdout().lock();
    let mut input = std::io::stdin().lock();
    let mut line = String::new();
    loop {
        if interactive {
            write!(out, "> ")?;
            out.flush()?;
        }
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break; // end of input
        }
        let text = line.trim_end_matches(['\n', '\r']);
        match text.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages.clone_from(&base);
                eprintln!("[new conversation]");
                continue;
            }
            _ => {}
        }
        messages.push(ChatMessage::new("user", text));

        // Render; drop the oldest turns while the conversation plus -n does not fit.
        let tokens = loop {
            let prompt = tmpl.render(&messages, true)?;
            let toks = tok.encode(&prompt, true, true);
            if toks.len() + a.n_predict <= n_ctx {
                break Some(toks);
            }
            let first = base.len();
            if messages.len() > first + 1 {
                let n = if messages
                    .get(first + 1)
                    .is_some_and(|m| m.role == "assistant")
                {
                    2
                } else {
                    1
                };
                messages.drain(first..first + n);
                tot.dropped_turns += 1;
                eprintln!(
                    "[context full: {} tokens + -n {} > -c {}; dropped the oldest turn]",
                    toks.len(),
                    a.n_predict,
                    n_ctx
                );
            } else {
                eprintln!(
                    "error: this message ({} tokens with the template) plus -n {} does not fit in the context of {} (raise -c or lower -n); not sent",
                    toks.len(),
                    a.n_predict,
                    n_ctx
                );
                messages.pop();
                break None;
            }
        };
        let Some(tokens) = tokens else { continue };

        // Prefill only what the cache does not already hold.
        let reused = s.reuse_prefix(&tokens);
        let params = GenParams {
            n_predict: a.n_predict,
            stop: Vec::new(),
            ..Default::default()
        };
        // Each reply starts the grammar afresh.
        constrain(&mut sampler, grammar.as_ref());
        let mut failed = None;
        let g = generate_with(
            &mut s,
            &mut sampler,
            spec.as_mut(),
            &tokens[reused..],
            &params,
            |piece| {
                failed = write!(out, "{piece}").and_then(|_| out.flush()).err();
                failed.is_none()
            },
        )?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        writeln!(out)?;
        out.flush()?;
        let (t, reply) = (g.timings, g.text);
        messages.push(ChatMessage::new("assistant", reply));

        tot.turns += 1;
        tot.prompt_tokens += t.prompt_tokens;
        tot.prompt_ms += t.prompt_ms;
        tot.reused += reused;
        tot.gen_tokens += t.gen_tokens;
        tot.dec_steps += t.decode_steps;
        tot.gen_ms += t.gen_ms;
        let drafts = if spec.is_some() {
            format!(
                ", {} of {} drafted tokens accepted",
                g.spec.accepted, g.spec.drafted
            )
        } else {
            String::new()
        };
        eprintln!(
            "[reused {reused} cached tokens, prefilled {} in {:.0} ms, generated {} in {:.0} ms{drafts}, context {}/{}]",
            t.prompt_tokens,
            t.prompt_ms,
            t.gen_tokens,
            t.gen_ms,
            s.pos(),
            n_ctx
        );
    }
    let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let (tk, tv) = s.kv_types();
    eprintln!(
        "\nload {:.0} ms | {} turns | prompt {} tokens in {:.1} ms ({:.2} t/s), {} reused from the cache | generation {} tokens in {:.1} ms ({:.2} t/s){} | KV {}/{}, {} threads, {}",
        load_ms,
        tot.turns,
        tot.prompt_tokens,
        tot.prompt_ms,
        rate(tot.prompt_tokens, tot.prompt_ms),
        tot.reused,
        tot.dec_steps,
        tot.gen_ms,
        rate(tot.dec_steps, tot.gen_ms),
        if tot.dropped_turns > 0 {
            format!(" | {} turns dropped (context full)", tot.dropped_turns)
        } else {
            String::new()
        },
        tk,
        tv,
        s.threads(),
        model.isa.name(),
    );
    Ok(())
}
