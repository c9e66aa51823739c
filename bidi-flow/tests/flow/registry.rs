//! F3: registration, typed lookups and descriptors, against a checked-in golden file.

use bidi_core::{ActionContext, BoxError, Inbound, NotFound, Outbound};
use bidi_flow::{ActionType, BidiFlow, Registry, RegistryError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::words;

/// How a chat starts.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ChatInit {
    /// The system prompt.
    system_prompt: String,
    /// Sampling temperature.
    #[serde(default)]
    temperature: f32,
}

/// One user message.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct ChatIn {
    text: String,
    #[serde(default)]
    attachments: Vec<String>,
}

/// One streamed piece of the answer.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatChunk {
    /// Some text.
    TextDelta { delta: String },
    /// The turn is over.
    Done,
}

/// What a chat ends with.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct ChatOut {
    turns: u32,
}

fn chat() -> BidiFlow<ChatInit, ChatIn, ChatOut, ChatChunk> {
    BidiFlow::new(
        "chat",
        |_: ActionContext, _: ChatInit, mut inbound: Inbound<ChatIn>, out: Outbound<ChatChunk>| async move {
            let mut turns = 0;
            while let Some(msg) = inbound.recv().await {
                out.send(ChatChunk::TextDelta { delta: msg.text }).await?;
                out.send(ChatChunk::Done).await?;
                out.end_turn().await?;
                turns += 1;
            }
            Ok::<_, BoxError>(ChatOut { turns })
        },
    )
    .with_description("A scripted chat")
    .with_metadata("owner", "tests")
}

fn unit() -> BidiFlow<(), (), (), ()> {
    BidiFlow::new(
        "ping",
        |_: ActionContext, (), _: Inbound<()>, _: Outbound<()>| async { Ok::<_, BoxError>(()) },
    )
    .with_action_type(ActionType::AGENT)
}

fn sample() -> Registry {
    let registry = Registry::new();
    registry
        .register(words().with_description("Streams words back"))
        .unwrap();
    registry.register(chat()).unwrap();
    registry.register(unit()).unwrap();
    registry
}

#[test]
fn descriptors_match_the_golden_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/flow/golden/actions.json"
    );
    // Compared as JSON values, not text: the order of object keys depends on serde_json's
    // `preserve_order` feature, which a workspace build turns on (the ACP schema crate needs it).
    let actual = serde_json::to_value(sample().actions()).unwrap();
    let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(
        actual == golden,
        "descriptors changed; rerun with BLESS=1 if intended\n--- actual ---\n{text}"
    );
}

#[test]
fn descriptor_rules() {
    let registry = sample();
    let keys: Vec<_> = registry.actions().into_iter().map(|d| d.key).collect();
    assert_eq!(keys, ["/agent/ping", "/bidi-flow/chat", "/bidi-flow/words"]);
    let ping = registry.action("/agent/ping").unwrap();
    // Unit types have no schema.
    assert!(ping.input_schema.is_none() && ping.init_schema.is_none());
    assert!(ping.output_schema.is_none() && ping.stream_schema.is_none());
    assert_eq!(ping.metadata["bidi"], json!(true));
    let chat = serde_json::to_value(registry.action("/bidi-flow/chat").unwrap()).unwrap();
    assert_eq!(chat["type"], "bidi-flow");
    assert_eq!(chat["metadata"], json!({"bidi": true, "owner": "tests"}));
    // The input schema describes one inbound message, as it is deserialized.
    assert_eq!(chat["inputSchema"]["required"], json!(["text"]));
    assert_eq!(
        chat["inputSchema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(chat["initSchema"]["required"], json!(["systemPrompt"]));
    assert!(chat["streamSchema"]["oneOf"].is_array());
}

#[test]
fn duplicate_keys_are_refused() {
    let registry = sample();
    assert_eq!(
        registry.register(chat()),
        Err(RegistryError::Duplicate {
            key: "/bidi-flow/chat".into()
        })
    );
    // The same name under another type is another key.
    registry
        .register(chat().with_action_type(ActionType::AGENT))
        .unwrap();
    assert_eq!(registry.actions().len(), 4);
}

#[tokio::test]
async fn typed_lookup() {
    let registry = sample();
    let chat = registry
        .get::<ChatInit, ChatIn, ChatOut, ChatChunk>("/bidi-flow/chat")
        .unwrap();
    let init = ChatInit {
        system_prompt: "be brief".into(),
        temperature: 0.0,
    };
    let out = chat
        .run(
            init,
            ChatIn {
                text: "hi".into(),
                attachments: vec![],
            },
        )
        .await
        .unwrap();
    assert_eq!(out.turns, 1);

    assert_eq!(
        registry
            .get::<(), (), (), ()>("/bidi-flow/nope")
            .unwrap_err(),
        RegistryError::NotFound(NotFound::new("action", "/bidi-flow/nope"))
    );
    match registry.get::<(), String, u32, String>("/bidi-flow/chat") {
        Err(RegistryError::TypeMismatch {
            key,
            requested,
            registered,
        }) => {
            assert_eq!(key, "/bidi-flow/chat");
            assert!(requested.contains("alloc::string::String"), "{requested}");
            assert!(registered.contains("ChatInit"), "{registered}");
        }
        other => panic!("expected a type mismatch, got {other:?}"),
    }
    // Clones of a registry share it.
    let clone = registry.clone();
    clone
        .register(words().with_action_type(ActionType::AGENT))
        .unwrap();
    assert!(registry.action("/agent/words").is_ok());
}

#[test]
fn action_kinds_are_open() {
    // A protocol crate's own kind, with no change to bidi-flow.
    const NDJSON: ActionType = ActionType::from_static("ndjson");
    let acp = ActionType::new("acp-agent").unwrap();
    assert_eq!(acp.as_str(), "acp-agent");
    assert_eq!(ActionType::BIDI_FLOW.to_string(), "bidi-flow");
    assert_eq!(serde_json::to_value(&ActionType::AGENT).unwrap(), "agent");

    let registry = sample();
    registry.register(words().with_action_type(acp)).unwrap();
    registry.register(words().with_action_type(NDJSON)).unwrap();
    assert_eq!(
        registry.register(words().with_action_type(NDJSON)),
        Err(RegistryError::Duplicate {
            key: "/ndjson/words".into()
        })
    );
    let desc = serde_json::to_value(registry.action("/acp-agent/words").unwrap()).unwrap();
    assert_eq!(desc["key"], "/acp-agent/words");
    assert_eq!(desc["type"], "acp-agent");
    assert_eq!(desc["name"], "words");
    assert!(registry.action("/ndjson/words").is_ok());
    assert_eq!(
        words().with_action_type(ActionType::AGENT).action_type(),
        &ActionType::AGENT
    );
    assert_eq!(words().action_type(), &ActionType::BIDI_FLOW);
}

#[test]
fn invalid_action_kinds_are_refused() {
    for kind in ["", "Agent", "acp/agent", "acp_agent", "acp agent", "agént"] {
        assert_eq!(
            ActionType::new(kind),
            Err(RegistryError::InvalidActionType { kind: kind.into() }),
            "{kind:?}"
        );
    }
    let error = ActionType::new("/".repeat(10 << 20)).unwrap_err();
    assert!(error.to_string().len() < 512);
    assert_eq!(
        ActionType::new(String::from("x-1")).unwrap().as_str(),
        "x-1"
    );
}

#[test]
#[should_panic(expected = "an action type is lowercase ASCII letters, digits and `-`")]
fn from_static_refuses_an_invalid_kind() {
    let _ = ActionType::from_static("a/b");
}

#[test]
fn lookups_name_the_key_they_resemble() {
    let registry = sample();
    let missing = registry.get::<(), (), (), ()>("ping").unwrap_err();
    assert_eq!(
        missing,
        RegistryError::NotFound(NotFound::new("action", "ping").with_suggestion("/agent/ping"))
    );
    assert_eq!(
        missing.to_string(),
        "no action `ping`; did you mean `/agent/ping`?"
    );
}
