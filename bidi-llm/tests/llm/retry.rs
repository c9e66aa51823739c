//! A turn that survives its model: `OpenAiModel` against local fake providers on 127.0.0.1
//! that answer 429 with `Retry-After`, 500, 503 and 401, and cut a stream halfway, through an
//! agent with a `Retry` policy and a fallback model.

use std::time::{Duration, Instant};

use bidi_agent::AgentInit;
use bidi_llm::{
    AgentEvent, Cut, ExecuteResult, LlmAgent, Message, OpenAiModel, Retry, Status, TurnInput,
    UserMessage, execute,
};
use futures_util::StreamExt;
use serde_json::json;

use super::openai::{Reply, chunk, finish, serve};

fn answer(text: &str) -> Reply {
    Reply::Sse {
        data: vec![chunk(&json!({"content": text})), finish("stop")],
        done: true,
    }
}

async fn run(agent: &LlmAgent) -> (Vec<AgentEvent>, ExecuteResult) {
    let mut conn = agent.connect(AgentInit::new());
    let input = TurnInput::User(UserMessage::new("hi"));
    let mut stream = execute(&mut conn, input).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    (events, stream.result().await.unwrap())
}

/// The `model_retry` events: (attempt, model, delay in ms, error, discarded).
fn retries_in(events: &[AgentEvent]) -> Vec<(u32, String, u64, String, bool)> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ModelRetry {
                attempt,
                model,
                delay_ms,
                error,
                discarded,
            } => Some((
                *attempt,
                model.clone(),
                *delay_ms,
                error.clone(),
                *discarded,
            )),
            _ => None,
        })
        .collect()
}

fn answered(result: &ExecuteResult) -> String {
    assert_eq!(result.status, Status::Completed, "{result:?}");
    // The failed attempts leave nothing in the conversation: the user's message, the answer.
    assert_eq!(result.messages.len(), 2, "{result:?}");
    let Some(Message::Assistant(answer)) = result.messages.last() else {
        panic!("{result:?}")
    };
    answer.text()
}

fn quick() -> Retry {
    Retry::new().backoff(Duration::from_millis(5), Duration::from_millis(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_waits_its_retry_after_and_a_500_its_backoff() {
    let (base, bodies, _) = serve(vec![
        Reply::Throttled("1"),
        Reply::Status(500, r#"{"error": {"message": "internal"}}"#),
        answer("Hello"),
    ])
    .await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .retry(quick())
        .build();
    let started = Instant::now();
    let (events, result) = run(&agent).await;
    assert_eq!(answered(&result), "Hello");
    let retries = retries_in(&events);
    assert_eq!(retries.len(), 2, "{events:?}");
    let (attempt, model, delay, error, discarded) = &retries[0];
    assert_eq!((*attempt, model.as_str(), *delay), (2, "m", 1_000));
    assert!(error.starts_with("HTTP 429"), "{error}");
    assert!(!discarded);
    let (attempt, _, delay, error, _) = &retries[1];
    assert_eq!(*attempt, 3);
    assert!((2..=20).contains(delay), "a backoff of 5 to 20 ms: {delay}");
    assert!(error.starts_with("HTTP 500"), "{error}");
    // What the provider asked for was honoured.
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(bodies.lock().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_mid_answer_is_restarted_or_kept_by_policy() {
    let cut = || Reply::Sse {
        data: vec![chunk(&json!({"content": "Hel"}))],
        done: false,
    };
    let (base, _, _) = serve(vec![cut(), answer("Hello")]).await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .retry(quick())
        .build();
    let (events, result) = run(&agent).await;
    assert_eq!(answered(&result), "Hello");
    let retries = retries_in(&events);
    assert_eq!(retries.len(), 1, "{events:?}");
    assert!(retries[0].3.contains("ended before"), "{retries:?}");
    assert!(retries[0].4, "the streamed `Hel` is discarded");
    // The retry comes after what the cut attempt streamed, and the answer streams anew.
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::TextDelta { delta } => Some(delta.as_str()),
            AgentEvent::ModelRetry { .. } => Some("|retry|"),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["Hel", "|retry|", "Hello"]);

    let (base, _, bodies) = serve(vec![cut(), answer("unused")]).await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .retry(quick().on_cut(Cut::Keep))
        .build();
    let (events, result) = run(&agent).await;
    assert_eq!(result.status, Status::Error, "{result:?}");
    assert!(retries_in(&events).is_empty());
    let Some(Message::Error(message)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(message.partial.as_ref().unwrap().text(), "Hel");
    assert_eq!(bodies.lock().unwrap().len(), 1, "kept: not called again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_stays_down_or_refuses_hands_over_to_the_fallback() {
    let down = || Reply::Status(503, r#"{"error": {"message": "overloaded"}}"#);
    let (primary, primary_bodies, _) = serve(vec![down(), down(), Reply::Status(401, "{}")]).await;
    let (backup, backup_bodies, _) = serve(vec![answer("From backup"), answer("Again")]).await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(primary, "primary"))
        .retry(quick().attempts(2))
        .fallback(OpenAiModel::new(backup, "backup"))
        .build();
    let (events, result) = run(&agent).await;
    assert_eq!(answered(&result), "From backup");
    let retries = retries_in(&events);
    let seen: Vec<(u32, &str)> = retries.iter().map(|r| (r.0, r.1.as_str())).collect();
    assert_eq!(seen, [(2, "primary"), (3, "backup")], "{events:?}");
    assert_eq!(retries[1].2, 0, "a fallback takes over at once");
    assert_eq!(primary_bodies.lock().unwrap().len(), 2);

    // A refusal retrying cannot fix goes to the fallback without a second attempt.
    let (events, result) = run(&agent).await;
    assert_eq!(answered(&result), "Again");
    let retries = retries_in(&events);
    assert_eq!(retries.len(), 1, "{events:?}");
    assert!(retries[0].3.starts_with("HTTP 401"), "{retries:?}");
    assert_eq!(primary_bodies.lock().unwrap().len(), 3);
    assert_eq!(backup_bodies.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spent_attempts_fail_the_turn_with_every_attempt_told() {
    let down = || Reply::Status(500, "{}");
    let (base, _, _) = serve(vec![down(), down(), down()]).await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .retry(quick())
        .build();
    let (events, result) = run(&agent).await;
    assert_eq!(result.status, Status::Error, "{result:?}");
    assert!(result.error.unwrap().error.starts_with("HTTP 500"));
    let attempts: Vec<u32> = retries_in(&events).iter().map(|r| r.0).collect();
    assert_eq!(attempts, [2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_ends_a_backoff_at_once() {
    let (base, _, _) = serve(vec![Reply::Throttled("600")]).await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .retry(quick().patience(Duration::from_secs(3_600)))
        .build();
    let mut conn = agent.connect(AgentInit::new());
    let input = TurnInput::User(UserMessage::new("hi"));
    let mut stream = execute(&mut conn, input).await.unwrap();
    while let Some(event) = stream.next().await {
        if let AgentEvent::ModelRetry { delay_ms, .. } = event.unwrap() {
            assert_eq!(delay_ms, 600_000);
            break;
        }
    }
    stream.cancel_with("the user stopped it");
    // Well before the ten minutes the provider asked for.
    let rest = tokio::time::timeout(Duration::from_secs(120), async {
        while stream.next().await.is_some() {}
    });
    rest.await.expect("the backoff ends with the cancellation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_is_a_model_call_of_its_own_in_the_trace() {
    use opentelemetry::global::BoxedTracer;
    use opentelemetry::trace::{Status as SpanStatus, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let (base, _, _) = serve(vec![Reply::Status(502, "{}"), answer("Hello")]).await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .retry(quick())
        .tracer(BoxedTracer::new(Box::new(provider.tracer("test"))))
        .build();
    let (_, result) = run(&agent).await;
    assert_eq!(answered(&result), "Hello");
    let spans = exporter.get_finished_spans().unwrap();
    let chats: Vec<_> = spans.iter().filter(|span| span.name == "chat m").collect();
    assert_eq!(chats.len(), 2, "{spans:?}");
    assert!(
        matches!(&chats[0].status, SpanStatus::Error { description } if description.contains("HTTP 502"))
    );
    assert_eq!(chats[1].status, SpanStatus::Unset);
    assert_eq!(chats[0].parent_span_id, chats[1].parent_span_id);
}
