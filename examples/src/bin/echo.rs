//! The README example: an echo action, driven turn by turn.
//!
//! ```sh
//! cargo run -p examples --bin echo                 # a short scripted conversation
//! cargo run -p examples --bin echo -- hello world  # one turn per argument
//! ```

use bidi_core::{ActionContext, BidiAction, BoxError};
use futures_util::StreamExt;

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
        // The shared echo, and a line when its input closed.
        let action = BidiAction::new(
            "echo",
            |ctx: ActionContext, prefix, inbound, out| async move {
                let turns = examples::echo(ctx.clone(), prefix, inbound, out).await?;
                println!(
                    "[{} {}] input closed after {turns} turns",
                    ctx.name(),
                    ctx.connection_id()
                );
                Ok::<_, BoxError>(turns)
            },
        );
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
