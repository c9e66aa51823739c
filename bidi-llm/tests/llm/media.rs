//! Attachments (images, audio, documents) on user messages and tool results: their wire, old
//! sessions without them, tools that stream them, remote results that carry them; and the
//! `refusal` stop reason.

use bidi_agent::AgentInit;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, Attachment, LlmAgent, LlmSession, Message, Status, StopReason, Tool, ToolEvent,
    ToolResultMessage, TurnInput, UserMessage,
};
use bidi_session::{SessionStore, SqliteStore};
use futures_util::stream;
use serde_json::{Value, json};

use crate::support::{City, confirm, run, user};

fn image() -> Attachment {
    Attachment::image("iVBORw0K", "image/png")
}

fn notes() -> Attachment {
    Attachment::text_resource("file:///project/notes.md", "# Notes")
}

fn tool_results(messages: &[Message]) -> Vec<&ToolResultMessage> {
    messages
        .iter()
        .filter_map(|message| match message {
            Message::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

#[test]
fn attachments_have_a_tagged_camel_case_wire() {
    let cases = [
        (
            image(),
            json!({"type": "image", "data": "iVBORw0K", "mimeType": "image/png"}),
        ),
        (
            Attachment::Image {
                data: String::new(),
                mime_type: "image/jpeg".into(),
                uri: Some("https://example.com/a.jpg".into()),
            },
            json!({"type": "image", "data": "", "mimeType": "image/jpeg", "uri": "https://example.com/a.jpg"}),
        ),
        (
            Attachment::audio("UklGRg==", "audio/wav"),
            json!({"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}),
        ),
        (
            notes(),
            json!({"type": "resource", "uri": "file:///project/notes.md", "text": "# Notes"}),
        ),
        (
            Attachment::blob_resource("file:///project/r.pdf", "JVBERi0x", "application/pdf"),
            json!({"type": "resource", "uri": "file:///project/r.pdf", "mimeType": "application/pdf", "blob": "JVBERi0x"}),
        ),
    ];
    for (attachment, wire) in cases {
        assert_eq!(serde_json::to_value(&attachment).unwrap(), wire);
        assert_eq!(
            serde_json::from_value::<Attachment>(wire).unwrap(),
            attachment
        );
    }
    let unknown = serde_json::from_value::<Attachment>(json!({"type": "video", "data": ""}));
    assert!(unknown.is_err());
    let missing = serde_json::from_value::<Attachment>(json!({"type": "image", "data": "x"}));
    assert!(missing.unwrap_err().to_string().contains("mimeType"));
}

/// Messages without attachments keep their wire; those with them round trip.
#[test]
fn messages_carry_attachments_only_when_they_have_some() {
    let plain = Message::User(UserMessage::new("hi"));
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        json!({"role": "user", "content": "hi"})
    );
    let user = UserMessage::new("look")
        .attachment(image())
        .attachments([notes()]);
    assert_eq!(user.attachments, [image(), notes()]);
    let message = Message::User(user);
    let wire = serde_json::to_value(&message).unwrap();
    assert_eq!(wire["attachments"][1]["type"], "resource");
    assert_eq!(serde_json::from_value::<Message>(wire).unwrap(), message);

    let result = Message::ToolResult(ToolResultMessage {
        tool_call_id: "c1".into(),
        tool_name: "shot".into(),
        content: "attached".into(),
        details: None,
        is_error: false,
        attachments: vec![image()],
    });
    let wire = serde_json::to_value(&result).unwrap();
    assert_eq!(
        wire,
        json!({"role": "toolResult", "toolCallId": "c1", "toolName": "shot", "content": "attached",
            "isError": false, "attachments": [{"type": "image", "data": "iVBORw0K", "mimeType": "image/png"}]})
    );
    assert_eq!(serde_json::from_value::<Message>(wire).unwrap(), result);

    let end = AgentEvent::ToolExecutionEnd {
        tool_call_id: "c1".into(),
        output: "ok".into(),
        details: None,
        is_error: false,
        attachments: Vec::new(),
    };
    assert_eq!(
        serde_json::to_value(&end).unwrap(),
        json!({"type": "tool_execution_end", "toolCallId": "c1", "output": "ok", "isError": false})
    );
}

#[test]
fn refusal_is_a_stop_reason() {
    assert_eq!(
        serde_json::to_value(StopReason::Refusal).unwrap(),
        json!("refusal")
    );
    assert_eq!(
        serde_json::from_value::<StopReason>(json!("refusal")).unwrap(),
        StopReason::Refusal
    );
}

/// A session saved before attachments existed loads, and goes on with a message that has some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_saved_without_attachments_loads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let old = json!({
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "toolCall", "id": "c1", "name": "weather", "arguments": {"city": "Oslo"}},
            ], "stopReason": "tool_calls"},
            {"role": "toolResult", "toolCallId": "c1", "toolName": "weather", "content": "sunny", "isError": false},
            {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}], "stopReason": "stop"},
        ],
        "status": "completed",
    });
    store
        .append("old", bidi_session::Append::create(old))
        .await
        .unwrap();
    let model = ScriptedModel::new([Scripted::new().text("A cat.")]).recording();
    let agent = LlmAgent::builder("a", model.clone())
        .store(SqliteStore::open(&db).await.unwrap())
        .build();
    let mut conn = agent.connect(AgentInit::new().session_id("old"));
    let input = TurnInput::User(UserMessage::new("and this?").attachment(image()));
    let (_, result) = run(&mut conn, input).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let sent = &model.requests()[0].messages;
    assert_eq!(sent.len(), 5);
    assert_eq!(tool_results(sent)[0].attachments, []);
    let Message::User(last) = &sent[4] else {
        panic!("{sent:?}")
    };
    assert_eq!(last.attachments, [image()]);
    let saved = store.load("old").await.unwrap().unwrap().state;
    let state: LlmSession = serde_json::from_value(saved.clone()).unwrap();
    assert_eq!(state.messages.len(), 6);
    assert!(saved["messages"][0].get("attachments").is_none());
    assert!(saved["messages"][2].get("attachments").is_none());
    assert_eq!(saved["messages"][4]["attachments"][0]["type"], "image");
}

/// What a tool streams: attachments before its result go with it, in order; a failed tool, or
/// one that ends without a result, drops them.
fn shot() -> Tool {
    Tool::local("shot", "Shot", "Attaches", |_id, args: City| {
        let events = match args.city.as_str() {
            "ok" => vec![
                ToolEvent::Attachment(image()),
                ToolEvent::Delta("taking it".into()),
                ToolEvent::Attachment(notes()),
                ToolEvent::Complete {
                    output: "attached".into(),
                    details: None,
                },
                ToolEvent::Attachment(Attachment::audio("late", "audio/wav")),
            ],
            "fails" => vec![
                ToolEvent::Attachment(image()),
                ToolEvent::Failed("no camera".into()),
            ],
            _ => vec![ToolEvent::Attachment(image())],
        };
        stream::iter(events)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_s_attachments_go_with_its_result() {
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "shot", &json!({"city": "ok"}))
            .tool_call("c2", "shot", &json!({"city": "fails"}))
            .tool_call("c3", "shot", &json!({"city": "quits"})),
        Scripted::new().text("Seen."),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model.clone()).tool(shot()).build();
    let mut conn = agent.connect(AgentInit::new());
    let (events, result) = run(&mut conn, user("show me")).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");

    let results = tool_results(&result.messages);
    let summary: Vec<_> = results
        .iter()
        .map(|r| (r.tool_call_id.as_str(), r.is_error, r.attachments.clone()))
        .collect();
    assert_eq!(
        summary,
        [
            ("c1", false, vec![image(), notes()]),
            ("c2", true, vec![]),
            ("c3", true, vec![]),
        ]
    );
    let ends: Vec<(&str, &[Attachment])> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                attachments,
                ..
            } => Some((tool_call_id.as_str(), attachments.as_slice())),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("c1", &[image(), notes()][..]),
            ("c2", &[][..]),
            ("c3", &[][..])
        ]
    );
    let wire: Vec<Value> = events
        .iter()
        .filter(|event| event.kind() == "tool_execution_end")
        .map(|event| serde_json::to_value(event).unwrap())
        .collect();
    assert_eq!(wire[0]["attachments"][0]["mimeType"], "image/png");
    assert!(wire[1].get("attachments").is_none());

    // The model sees them on the next call.
    let second = &model.requests()[1].messages;
    assert_eq!(tool_results(second)[0].attachments, [image(), notes()]);
}

/// The results of remote calls may carry attachments, as JSON from the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_results_carry_attachments() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "confirm", &json!({"city": "Oslo"})),
        Scripted::new().text("Thanks."),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model.clone())
        .tool(confirm())
        .build();
    let mut conn = agent.connect(AgentInit::new());
    let (_, result) = run(&mut conn, user("book")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution);
    let input: TurnInput = serde_json::from_value(json!([{
        "toolCallId": "c1", "toolName": "confirm", "content": "signed",
        "attachments": [{"type": "resource", "uri": "file:///project/contract.pdf",
            "mimeType": "application/pdf", "blob": "JVBERi0x"}],
    }]))
    .unwrap();
    let (_, result) = run(&mut conn, input).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let sent = &model.requests()[1].messages;
    assert_eq!(
        tool_results(sent)[0].attachments,
        [Attachment::blob_resource(
            "file:///project/contract.pdf",
            "JVBERi0x",
            "application/pdf"
        )]
    );
}

/// A refusal ends the turn like any answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_completes_the_turn() {
    let model = ScriptedModel::new([Scripted::new()
        .text("I can't help with that.")
        .stop(StopReason::Refusal)]);
    let agent = LlmAgent::builder("a", model).build();
    let mut conn = agent.connect(AgentInit::new());
    let (_, result) = run(&mut conn, user("something bad")).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    assert_eq!(result.error, None);
    let Some(Message::Assistant(answer)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(answer.stop_reason, StopReason::Refusal);
    assert_eq!(answer.text(), "I can't help with that.");
}
