//! The Telegram channel against a local fake Bot API server: a reply streamed at 50 tokens a
//! second grows in one message, edited every 500 ms at most, within Telegram's one edit per
//! second per chat. Prints the transcript of the Bot API calls.
//!
//! ```sh
//! cargo run -p examples --bin channel-telegram                       # about 3 seconds
//! cargo run -p examples --bin channel-telegram -- --words 400        # a longer reply
//! ```
//!
//! The fake server (`bidi_channel::testing::FakeBotApi`) speaks the Bot API's wire
//! (`sendMessage`, `editMessageText`, `sendChatAction`; `{"ok":true,"result":..}`, and
//! `429 Too Many Requests` with `parameters.retry_after` for a second edit within a second).
//! Point `Telegram::builder` at `https://api.telegram.org/bot<token>` (with a TLS-enabled
//! reqwest client) for a real bot.

use std::sync::Arc;
use std::time::Duration;

use bidi_channel::MessageRouter;
use bidi_channel::telegram::Telegram;
use bidi_channel::testing::FakeBotApi;
use bidi_core::BoxError;
use bidi_llm::testing::Scripted;
use bidi_llm::{LlmAgent, Model, ModelEvent, ModelRequest, simple_tool};
use clap::Parser;
use futures_util::StreamExt as _;
use futures_util::stream::{self, BoxStream};
use serde_json::json;

/// A streamed reply to a fake Telegram chat.
#[derive(Debug, Parser)]
struct Args {
    /// How many words the reply has.
    #[arg(long, default_value_t = 150)]
    words: usize,
    /// How many words a second the model writes.
    #[arg(long, default_value_t = 50)]
    rate: u64,
}

/// Looks something up with a tool, then writes `words` words at `rate` a second.
struct Slow {
    words: usize,
    rate: u64,
}

impl Model for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        if request.messages.len() == 1 {
            let call = Scripted::new().tool_call("c1", "search", &json!({"q": "bidi"}));
            return stream::iter(call.events()).boxed();
        }
        let text: String = (1..=self.words).map(|i| format!("word{i} ")).collect();
        let every = Duration::from_millis(1000 / self.rate.max(1));
        stream::iter(Scripted::new().text(text.trim_end()).events())
            .then(move |event| async move {
                if matches!(event, ModelEvent::TextDelta(_)) {
                    tokio::time::sleep(every).await;
                }
                event
            })
            .boxed()
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let api = FakeBotApi::start().await?;
    let telegram = Arc::new(Telegram::builder(api.url()).build()?);
    let search = simple_tool(
        "search",
        "Search",
        "Searches",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("found".to_owned(), None)) },
    );
    let model = Slow {
        words: args.words,
        rate: args.rate,
    };
    let router = MessageRouter::new(LlmAgent::builder("bot", model).tool(search).build());
    let reply = router.handle(telegram, "42", "tell me about bidi").await?;

    println!("{:>7}  {:<16} {:<8} text", "at", "method", "answer");
    for call in api.calls() {
        let answer = call
            .error_code
            .map_or_else(|| "ok".to_owned(), |code| code.to_string());
        let text = match (&call.text, &call.action) {
            (Some(text), _) => {
                let chars = text.chars().count();
                let tail: String = text.chars().skip(chars.saturating_sub(24)).collect();
                format!("{chars:>5} chars, ends {tail:?}")
            }
            (None, Some(action)) => format!("action {action}"),
            (None, None) => String::new(),
        };
        println!(
            "{:>6.2}s  {:<16} {:<8} {text}",
            call.at.as_secs_f64(),
            call.method,
            answer
        );
    }
    let calls = api.calls();
    let edits = calls.iter().filter(|c| c.method == "editMessageText");
    let (shown, limited) = edits.fold((0, 0), |(ok, limited), c| match c.error_code {
        None => (ok + 1, limited),
        Some(429) => (ok, limited + 1),
        Some(_) => (ok, limited),
    });
    println!(
        "{} characters in {} message(s); {shown} edits shown, {limited} answered 429 and waited out",
        reply.text.chars().count(),
        api.messages(42).len(),
    );
    assert_eq!(api.messages(42).concat(), reply.text);
    Ok(())
}
