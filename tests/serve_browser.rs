//! The chat page at `/` of `pocket serve` in a real browser: Debian's headless Chromium,
//! driven over the DevTools Protocol as a user would (type a message, press Enter), with
//! the streamed reply read from the DOM. Skipped, loudly, where Chromium is not installed
//! (compare/setup.sh installs Debian's `chromium`).

#[path = "serve/browser_cdp.rs"]
mod browser_cdp;
mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::time::Duration;

use serde_json::{json, Value};
use serve_common::Server;

/// Records every distinct text the first reply bubble shows, as the page updates it.
const WATCH_REPLY: &str = r#"
window.__replyStates = [];
new MutationObserver(() => {
  const r = document.querySelector('#log .assistant, #log .error');
  const t = r ? r.textContent : '';
  const s = window.__replyStates;
  if (t && s[s.length - 1] !== t) s.push(t);
}).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
true
"#;

#[test]
fn chat_page_streams_a_reply_in_headless_chromium() {
    let Some(chromium) = browser_cdp::find_chromium() else {
        eprintln!(
            "SKIPPED serve_browser: no chromium on PATH (apt-get install chromium; \
             compare/setup.sh does it)"
        );
        return;
    };
    let model = common::smollm2();
    // Greedy and bounded, so the page's reply can be checked against the API's.
    let s = Server::start(
        &model,
        &["-c", "1024", "-np", "1", "--temp", "0", "-n", "24"],
    );
    let browser = browser_cdp::Browser::start(&chromium);
    let mut page = browser.open(&s.url("/"));
    page.wait_for(
        "document.readyState === 'complete' && !!document.getElementById('input')",
        Duration::from_secs(30),
    );
    assert_eq!(page.eval("document.title"), json!("pocket chat"));
    assert_eq!(page.eval(WATCH_REPLY), json!(true));

    let message = "What is the capital of France?";
    page.eval("document.getElementById('input').focus(), true");
    page.type_text(message);
    assert_eq!(
        page.eval("document.getElementById('input').value"),
        json!(message)
    );
    page.press_enter();
    page.wait_for(
        "(() => { const r = document.querySelector('#log .assistant, #log .error'); \
         return !!r && (r.dataset.done === 'true' || r.classList.contains('error')); })()",
        Duration::from_secs(60),
    );

    let user = page.eval("document.querySelector('#log .user').textContent");
    assert_eq!(user, json!(message));
    let class = page.eval("document.querySelector('#log .msg:last-child').className");
    let reply = page.eval("document.querySelector('#log .msg:last-child').textContent");
    assert_eq!(
        class,
        json!("msg assistant"),
        "the page shows an error: {reply}"
    );
    let reply = reply.as_str().unwrap().to_string();
    assert!(!reply.trim().is_empty(), "empty assistant reply");

    // Streamed: the bubble showed growing prefixes of the reply before the whole of it.
    let states: Vec<String> = serde_json::from_value(page.eval("window.__replyStates")).unwrap();
    assert!(
        states.len() >= 2,
        "the reply arrived in one piece, not streamed: {states:?}"
    );
    assert!(
        states.iter().all(|t| reply.starts_with(t.as_str())),
        "{states:?}"
    );
    assert_eq!(states.last().unwrap(), &reply);

    // The status line carries the final chunk's timings.
    let status = page.eval("document.getElementById('status').textContent");
    assert!(
        status.as_str().unwrap().starts_with("24 tokens"),
        "status: {status}"
    );

    // The same conversation through the API (not streamed) gives the same greedy text.
    let api: Value = s.post(
        "/v1/chat/completions",
        &json!({ "messages": [{ "role": "user", "content": message }] }),
    );
    assert_eq!(
        api["choices"][0]["message"]["content"].as_str().unwrap(),
        reply
    );
    // The send button is usable again for the next turn.
    assert_eq!(
        page.eval("document.getElementById('send').disabled"),
        json!(false)
    );
}
