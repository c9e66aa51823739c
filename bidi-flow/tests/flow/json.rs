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
            assert_eq!(path, "/prefix");
            assert!(reason.contains("expected a string"), "{reason}");
        }
        other => panic!("expected InvalidInit, got {other:?}"),
    }
    assert!(matches!(
        registry.connect_json("/bidi-flow/words", json!(null)),
        Err(JsonError::InvalidInit { path, .. }) if path.is_empty()
    ));
    assert_eq!(
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        0
    );
    assert!(matches!(
        registry.connect_json("/bidi-flow/missing", json!(null)),
        Err(JsonError::NotFound(missing)) if missing.name == "/bidi-flow/missing" && missing.suggestion.is_none()
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
            assert_eq!(path, "/items/1/qty");
            assert!(reason.contains("invalid value"), "{reason}");
            assert_eq!(input, bad, "the input is handed back");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    let missing = json!({"items": [{"qty": 1}]});
    assert!(matches!(
        conn.send(missing).await,
        Err(JsonError::InvalidInput { path, reason, .. }) if path == "/items/0" && reason.contains("missing field `name`")
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

#[tokio::test]
async fn a_huge_bad_value_gives_a_short_error() {
    let registry = registry();
    let huge = "x".repeat(10 << 20);

    // As an init: `words` wants `{"prefix": string}`.
    let error = registry
        .connect_json("/bidi-flow/words", json!({"prefix": 1, "extra": huge}))
        .unwrap_err();
    assert!(error.to_string().len() < 512, "{error}");
    let error = registry
        .connect_json("/bidi-flow/orders", json!(huge))
        .unwrap_err();
    let message = error.to_string();
    assert!(message.len() < 512, "{} bytes", message.len());
    assert!(message.starts_with("invalid init at the root: invalid type: string \"xxx"));
    assert!(message.contains(" bytes cut]"), "{message}");
    assert!(message.ends_with("\", expected unit"), "{message}");

    // As an input: the message and the `Debug` output are short, the input comes back whole.
    let conn = registry
        .connect_json("/bidi-flow/orders", json!(null))
        .unwrap();
    let error = conn
        .send(json!({"items": [{"name": huge, "qty": huge}]}))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(message.len() < 512, "{} bytes", message.len());
    assert!(message.starts_with("invalid input at `/items/0/qty`: invalid type: string"));
    assert!(message.ends_with("\", expected u32"), "{message}");
    assert!(format!("{error:?}").len() < 1024);
    let JsonError::InvalidInput { reason, input, .. } = error else {
        panic!("{error:?}")
    };
    assert!(reason.len() <= 256);
    assert_eq!(input["items"][0]["qty"].as_str().unwrap().len(), 10 << 20);
}

/// Maps of maps: keys with `.`, `/` and `~` in them.
fn nested() -> BidiFlow<(), std::collections::BTreeMap<String, HashMap<String, u32>>, (), ()> {
    BidiFlow::new(
        "nested",
        |_: ActionContext,
         (),
         mut inbound: Inbound<std::collections::BTreeMap<String, HashMap<String, u32>>>,
         _: Outbound<()>| async move {
            while inbound.recv().await.is_some() {}
            Ok::<_, BoxError>(())
        },
    )
}

#[tokio::test]
async fn paths_are_unambiguous_json_pointers() {
    let registry = Registry::new();
    registry.register(nested()).unwrap();
    let conn = registry
        .connect_json("/bidi-flow/nested", json!(null))
        .unwrap();
    let mut paths = Vec::new();
    for bad in [
        json!({"a.b": {"c": "x"}}),
        json!({"a": {"b.c": "x"}}),
        json!({"a/b": {"c~d": "x"}}),
        json!({"a": {"b/c": "x"}}),
        json!({"": {"": "x"}}),
        json!({"ok": {"n": 1}, "a": []}),
    ] {
        match conn.send(bad).await {
            Err(JsonError::InvalidInput { path, .. }) => paths.push(path),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        paths,
        ["/a.b/c", "/a/b.c", "/a~1b/c~0d", "/a/b~1c", "//", "/a"]
    );
    let error = conn.send(json!({"a/b": {"c~d": "x"}})).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid input at `/a~1b/c~0d`: invalid type: string \"x\", expected u32"
    );
    conn.send(json!({"a.b": {"c": 1}})).await.unwrap();
}

#[tokio::test]
async fn an_unknown_key_names_the_key_it_resembles() {
    let registry = registry();
    for (asked, suggestion) in [
        ("words", Some("/bidi-flow/words")),
        ("/agent/orders", Some("/bidi-flow/orders")),
        ("bidi-flow/words", Some("/bidi-flow/words")),
        ("/bidi-flow/wrods", Some("/bidi-flow/words")),
        ("/bidi-flow/order", Some("/bidi-flow/orders")),
        ("/bidi-flow/translate", None),
    ] {
        match registry.connect_json(asked, json!(null)) {
            Err(JsonError::NotFound(missing)) => {
                assert_eq!(missing.kind, "action");
                assert_eq!(missing.name, asked);
                assert_eq!(missing.suggestion.as_deref(), suggestion, "{asked}");
            }
            other => panic!("{asked}: {other:?}"),
        }
    }
    let error = registry.connect_json("words", json!(null)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no action `words`; did you mean `/bidi-flow/words`?"
    );
    // A huge key is quoted short.
    let error = registry
        .connect_json(&"k".repeat(10 << 20), json!(null))
        .unwrap_err();
    assert!(error.to_string().len() < 512);
}
