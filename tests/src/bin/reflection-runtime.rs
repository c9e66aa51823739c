//! A bidi program for Genkit's tools to start: `genkit start -- reflection-runtime`. It serves
//! three actions with `bidi-http`, and Genkit's reflection API beside them when `GENKIT_ENV=dev`
//! (which `genkit start` sets):
//!
//! - `/flow/countdown`: input `n` (at most 100), streams `{"left": n}` down to 1 and returns
//!   `"done after n"`; a larger `n` fails.
//! - `/bidi-flow/slow`: streams `"started"`, then runs until it is cancelled.
//! - `/agent/notes`: a multi-turn agent that remembers the lines of its session (init
//!   `{"sessionId": ".."}`) and answers each word by word.
//! - `/flow/greet`: init `{"salutation"}` (default `"Hello"`), input a name, returns
//!   `"{salutation}, {name}!"`: a struct init with defaults, which a run without init gets.
//! - `/flow/letter`: init `{"to"}` (required), input a line, returns `"Dear {to}, {line}"`: a
//!   struct init without defaults.
//! - `/agent/helper`: an LLM agent on the demo model with a tool, `word_count`, that records
//!   what was said in its spans: a message naming the tool (`{"content": "word_count a b"}`,
//!   init `{"sessionId": ".."}`) is answered after a call of it.
//!
//! With `--auth TOKEN`, the server asks every request for `Authorization: Bearer TOKEN`
//! (`Server::auth`).
//!
//! Its first lines on stdout are `listening on http://{addr}` and, with the reflection API,
//! `reflection on http://{addr} ({runtime file})`, or `reflection dialing {url}` under
//! `genkit start --experimental-reflection-v2`. It serves until SIGINT, then removes its
//! runtime file and says how many span updates did not reach the telemetry server
//! (`spans dropped: N`).

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};

use bidi_agent::{Agent, AgentResult, Responder, Session};
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{ActionType, BidiFlow, Registry};
use bidi_genkit::reflection::{Endpoint, Reflection, Serving};
use bidi_http::{Identity, Server, Unauthorized};
use bidi_llm::testing::DemoModel;
use bidi_llm::{LlmAgent, simple_tool};
use bidi_session::MemoryStore;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One step of the countdown.
#[derive(Debug, Serialize, JsonSchema)]
struct Left {
    /// How many are left.
    left: u32,
}

/// Streams `n` down to 1, in a `run` step.
async fn countdown(
    _: ActionContext,
    (): (),
    mut inbound: Inbound<u32>,
    out: Outbound<Left>,
) -> Result<String, BoxError> {
    let n = inbound.recv().await.unwrap_or(0);
    if n > 100 {
        return Err(format!("{n} is too far to count down from (100 at most)").into());
    }
    bidi_flow::run("count down", async {
        for left in (1..=n).rev() {
            out.send(Left { left }).await?;
        }
        Ok::<_, BoxError>(())
    })
    .await?;
    Ok(format!("done after {n}"))
}

/// Says it started, then runs until cancelled.
async fn slow(
    ctx: ActionContext,
    (): (),
    _: Inbound<String>,
    out: Outbound<String>,
) -> Result<(), BoxError> {
    out.send("started".to_owned()).await?;
    let cause = ctx.cancelled().await;
    Err(format!("stopped: {cause}").into())
}

/// What the notes agent remembers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
struct Notes {
    /// Every line heard, in order.
    heard: Vec<String>,
}

/// Answers each line with what it heard before, word by word; returns the turns.
async fn notes(
    _: ActionContext,
    session: Session<Notes>,
    mut inbound: Inbound<String>,
    out: Responder<String>,
) -> Result<AgentResult<u32>, BoxError> {
    let mut turns = 0;
    while let Some(line) = inbound.recv().await {
        let heard = session.state().heard.len();
        let reply = format!("noted \"{line}\" after {heard} lines");
        for word in reply.split_inclusive(' ') {
            out.send(word.to_owned()).await?;
        }
        session
            .update(|notes| notes.heard.push(line.clone()))
            .await?;
        out.end_turn().await?;
        turns += 1;
    }
    Ok(AgentResult::new(turns))
}

/// How `/flow/greet` greets: every field has a default.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
struct Greeting {
    /// The word before the name.
    salutation: String,
}

impl Default for Greeting {
    fn default() -> Self {
        Self {
            salutation: "Hello".to_owned(),
        }
    }
}

/// Greets the name it is sent.
async fn greet(
    _: ActionContext,
    greeting: Greeting,
    mut inbound: Inbound<String>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let name = inbound.recv().await.unwrap_or_default();
    Ok(format!("{}, {name}!", greeting.salutation))
}

/// What `/agent/helper`'s `word_count` counts.
#[derive(Debug, Deserialize, JsonSchema)]
struct Text {
    /// The text.
    text: String,
}

/// Whom `/flow/letter` writes to: no default.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Letter {
    /// The addressee.
    to: String,
}

/// Writes the line it is sent to the addressee.
async fn letter(
    _: ActionContext,
    letter: Letter,
    mut inbound: Inbound<String>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let line = inbound.recv().await.unwrap_or_default();
    Ok(format!("Dear {}, {line}", letter.to))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let registry = Registry::new();
    registry.register(
        BidiFlow::new("countdown", countdown)
            .with_action_type(ActionType::new("flow")?)
            .with_description("Counts down from n"),
    )?;
    registry.register(BidiFlow::new("slow", slow).with_description("Runs until cancelled"))?;
    registry.register(
        Agent::builder("notes")
            .description("Remembers the lines of its session")
            .store(MemoryStore::new())
            .build(notes)
            .into_flow(),
    )?;
    let helper = LlmAgent::builder("helper", DemoModel)
        .tool(simple_tool(
            "word_count",
            "Word count",
            "Counts the words of a text",
            |_id, args: Text| async move {
                let words = args.text.split_whitespace().count();
                Ok::<_, String>((format!("{words} words"), None))
            },
        ))
        .record_content(true)
        .store(MemoryStore::new())
        .build();
    registry.register(helper.agent().clone().into_flow())?;
    let flow = ActionType::new("flow")?;
    registry.register(BidiFlow::new("greet", greet).with_action_type(flow.clone()))?;
    registry.register(BidiFlow::new("letter", letter).with_action_type(flow))?;
    let reflection = Reflection::in_dev();
    let mut server = Server::new(registry)
        .protocol(reflection.clone())
        .addr(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--auth", Some(token)) => {
                let expected = format!("Bearer {token}");
                server = server.auth(move |headers| {
                    let allowed = headers
                        .get("authorization")
                        .is_some_and(|sent| sent.as_bytes() == expected.as_bytes());
                    async move {
                        if allowed {
                            Ok(Identity::new("tester"))
                        } else {
                            Err(Unauthorized::new("a bearer token is required"))
                        }
                    }
                });
            }
            _ => return Err(format!("usage: reflection-runtime [--auth TOKEN], not {arg}").into()),
        }
    }
    let bound = server
        .bind()
        .await
        .map_err(|error| format!("cannot start: {error}"))?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on http://{}", bound.local_addr()?)?;
    let dropped = reflection
        .serving()
        .map(|runtime| runtime.dropped_spans().clone());
    match reflection.serving().map(Serving::endpoint) {
        Some(Endpoint::Served { addr, file }) => {
            writeln!(stdout, "reflection on http://{addr} ({})", file.display())?;
        }
        Some(Endpoint::Dialed { url }) => writeln!(stdout, "reflection dialing {url}")?,
        Some(_) | None => {}
    }
    stdout.flush()?;
    bound
        .serve_with_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    if let Some(dropped) = dropped {
        writeln!(stdout, "spans dropped: {}", dropped.count())?;
    }
    Ok(())
}
