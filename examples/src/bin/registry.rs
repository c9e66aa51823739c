//! A registry of two flows: their descriptors as JSON, one run over a JSON connection (as a
//! transport would), and the spans it made, printed by the OpenTelemetry stdout exporter.
//!
//! ```sh
//! cargo run -p examples --bin registry
//! ```

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use futures_util::StreamExt;
use opentelemetry::global;
use opentelemetry_sdk::trace::SdkTracerProvider;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// How a counter starts.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Start {
    /// The first value.
    from: i64,
}

/// Adds each input to a running total and streams the total.
async fn counter(
    _ctx: ActionContext,
    start: Start,
    mut inbound: Inbound<i64>,
    out: Outbound<i64>,
) -> Result<i64, BoxError> {
    let mut total = start.from;
    while let Some(n) = inbound.recv().await {
        total = bidi_flow::run("add", async move { Ok::<_, BoxError>(total + n) }).await?;
        out.send(total).await?;
        out.end_turn().await?;
    }
    Ok(total)
}

/// Streams each message back in upper case, word by word.
async fn shout(
    _ctx: ActionContext,
    (): (),
    mut inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<(), BoxError> {
    while let Some(text) = inbound.recv().await {
        for word in text.split_whitespace() {
            out.send(word.to_uppercase()).await?;
        }
        out.end_turn().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    global::set_tracer_provider(provider.clone());

    let registry = Registry::new();
    registry
        .register(BidiFlow::new("counter", counter).with_description("Keeps a running total"))?;
    registry.register(BidiFlow::new("shout", shout).with_description("Shouts back"))?;
    println!("{}", serde_json::to_string_pretty(&registry.actions())?);

    let driver = tokio::spawn(async move {
        let mut conn = registry.connect_json("/bidi-flow/counter", json!({"from": 10}))?;
        for n in [1, 2, 3] {
            conn.send(json!(n)).await?;
            while let Some(total) = conn.responses().next().await {
                println!("sent {n}, total {}", total?);
            }
        }
        if let Err(refused) = conn.send(json!("four")).await {
            println!("refused: {refused}");
        }
        conn.close();
        println!("output: {}", conn.output().await?);
        Ok::<_, BoxError>(())
    });
    driver.await??;

    println!("--- spans (exported in a batch at shutdown) ---");
    provider.shutdown()?;
    Ok(())
}
