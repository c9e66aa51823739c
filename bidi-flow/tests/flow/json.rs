//! F4: JSON connections: round trips, and a typed error naming the path for each bad input.

use std::collections::HashMap;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound, SendError};
use bidi_flow::{BidiFlow, JsonError, Registry};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::words;

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Order {
    items: Vec<Item>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Item {
    name: String,
    qty: u32,
}

fn registry() -> Registry {
    let registry = Registry::new();
    registry.register(words()).unwrap();
    let orders = BidiFlow::new(
        "orders",
        |_: ActionContext, (), mut inbound: Inbound<Order>, out: Outbound<u32>| async move {
            let mut total = 0;
            while let Some(order) = inbound.recv().await {
                let qty: u32 = order.items.iter().map(|i| i.qty).sum();
                total += qty;
                out.send(qty).await?;
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(total)
        },
    );
    registry.register(orders).unwrap();
    // Its chunks are maps with non-string keys: JSON cannot hold them.
    let unserializable = BidiFlow::new(
        "unserializable",
        |_: ActionContext,
         (),
         mut inbound: Inbound<u32>,
         out: Outbound<HashMap<(u32, u32), u32>>| async move {
            while let Some(n) = inbound.recv().await {
                out.send(HashMap::from([((n, n), n)])).await?;
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(())
        },
    );
    registry.register(unserializable).unwrap();
    registry
}

async fn turn(conn: &mut bidi_flow::JsonConnection) -> Vec<Result<Value, JsonError>> {
    conn.responses().collect().await
}

/// The chunks of a turn that must succeed.
async fn chunks(conn: &mut bidi_flow::JsonConnection) -> Vec<Value> {
    turn(conn).await.into_iter().map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_traffic_round_trips() {
    let registry = registry();
    let mut conn = registry
        .connect_json("/bidi-flow/words", json!({"prefix": "#"}))
        .unwrap();
    conn.send(json!("a b")).await.unwrap();
    assert_eq!(chunks(&mut conn).await, [json!("#a"), json!("#b")]);
    conn.close();
    assert_eq!(conn.output().await.unwrap(), json!(1));
}

#[tokio::test]
async fn bad_init_is_refused_before_the_action_starts() {
    let registry = registry();
    match registry.connect_json("/bidi-flow/words", json!({"prefix": 7})) {
        Err(JsonError::InvalidInit { path, reason }) => {
            assert_eq!(path, "prefix");
            assert!(reason.contains("expected a string"), "{reason}");
        }
        other => panic!("expected InvalidInit, got {other:?}"),
    }
    assert!(matches!(
        registry.connect_json("/bidi-flow/words", json!(null)),
        Err(JsonError::InvalidInit { path, .. }) if path == "."
    ));
    assert_eq!(
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        0
    );
    assert!(matches!(
        registry.connect_json("/bidi-flow/missing", json!(null)),
        Err(JsonError::NotFound { key }) if key == "/bidi-flow/missing"
    ));
}

#[tokio::test]
async fn bad_input_is_refused_and_the_connection_goes_on() {
    let registry = registry();
    let mut conn = registry
        .connect_json("/bidi-flow/orders", json!(null))
        .unwrap();
    conn.send(json!({"items": [{"name": "tea", "qty": 2}]}))
        .await
        .unwrap();
    assert_eq!(chunks(&mut conn).await, [json!(2)]);

    let bad = json!({"items": [{"name": "tea", "qty": 1}, {"name": "cake", "qty": -1}]});
    match conn.send(bad.clone()).await {
        Err(JsonError::InvalidInput {
            path,
            reason,
            input,
        }) => {
            assert_eq!(path, "items[1].qty");
            assert!(reason.contains("invalid value"), "{reason}");
            assert_eq!(input, bad, "the input is handed back");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    let missing = json!({"items": [{"qty": 1}]});
    assert!(matches!(
        conn.send(missing).await,
        Err(JsonError::InvalidInput { path, reason, .. }) if path == "items[0]" && reason.contains("missing field `name`")
    ));

    // Nothing already accepted is lost: the connection keeps running.
    conn.send(json!({"items": [{"name": "jam", "qty": 3}]}))
        .await
        .unwrap();
    assert_eq!(chunks(&mut conn).await, [json!(3)]);
    conn.close();
    match conn.send(json!({"items": []})).await {
        Err(JsonError::Send(SendError::Closed(value))) => assert_eq!(value, json!({"items": []})),
        other => panic!("expected Send(Closed), got {other:?}"),
    }
    assert_eq!(conn.output().await.unwrap(), json!(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserializable_chunk_ends_the_connection() {
    let registry = registry();
    let mut conn = registry
        .connect_json("/bidi-flow/unserializable", json!(null))
        .unwrap();
    conn.send(json!(1)).await.unwrap();
    let items = turn(&mut conn).await;
    assert_eq!(items.len(), 1);
    let Err(JsonError::Serialize { what, reason }) = &items[0] else {
        panic!("{items:?}")
    };
    assert_eq!(*what, "chunk");
    assert!(reason.contains("key must be a string"), "{reason}");
    // The connection is over: later turns are empty, sends fail, the output is the same error.
    assert!(turn(&mut conn).await.is_empty());
    assert!(matches!(
        conn.send(json!(2)).await,
        Err(JsonError::Send(SendError::Cancelled(_)))
    ));
    assert!(conn.is_finished());
    assert!(matches!(
        conn.output().await,
        Err(JsonError::Serialize { what: "chunk", .. })
    ));
}
