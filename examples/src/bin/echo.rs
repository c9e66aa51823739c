//! The README example: an echo action, driven turn by turn.
//!
//! ```sh
//! cargo run -p examples --bin echo                 # a short scripted conversation
//! cargo run -p examples --bin echo -- hello world  # one turn per argument
//! ```

use bidi_core::{ActionContext, BidiAction, BoxError, Inbound, Outbound};
use futures_util::StreamExt;

/// Streams each message back word by word, then ends the turn. Returns the number of turns.
async fn echo(
    ctx: ActionContext,
    prefix: String,
    mut inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<usize, BoxError> {
    let mut turns = 0;
    while let Some(msg) = inbound.recv().await {
        for word in msg.split_whitespace() {
            out.send(format!("{prefix}{word}")).await?;
        }
        out.end_turn().await?;
        turns += 1;
    }
    println!(
        "[{} {}] input closed after {turns} turns",
        ctx.name(),
        ctx.connection_id()
    );
    Ok(turns)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut turns: Vec<String> = std::env::args().skip(1).collect();
    if turns.is_empty() {
        turns = ["hello bidi", "a second turn", "bye"]
            .map(String::from)
            .to_vec();
    }
    // Drive the connection from a task: hand-offs between runtime workers are cheap.
    tokio::spawn(async move {
        let action = BidiAction::new("echo", echo);
        let mut conn = action.connect("echo: ".to_owned());
        for text in turns {
            println!("> {text}");
            conn.send(text).await?;
            let mut responses = conn.responses();
            while let Some(chunk) = responses.next().await {
                println!("  {}", chunk?);
            }
        }
        conn.close();
        println!("output: {} turns", conn.output().await?);
        Ok(())
    })
    .await?
}
