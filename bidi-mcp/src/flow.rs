//! A flow tool's call: its arguments sent as the flow's input, its chunks as progress, its
//! output as the result; the flow runs in the call's own task.
//!
//! A call is the flow seam: `connect_json_with` in the caller's scope, one input, close, the
//! chunks as `notifications/progress` (pumped by the wire seam, `bidi_flow::wire`, with the
//! call's cancellation as the sink's close), the output as text (and as `structuredContent` for
//! objects). The action's task is polled by the call itself (a `Driver`, under `InPlace`, as
//! the WebSocket does); a call dropped before the action ends cancels the connection and
//! spawns the action's task to finish its grace period. A flow whose output schema is an
//! object's advertises it as its tool's `outputSchema` (MCP's rule); a non-object output then
//! (a `Serialize` disagreeing with its schema) is a tool error, never a `structuredContent`
//! that breaks the schema. The registry's refusals of arguments are `-32602`, their pointer
//! prefixed with where the input or init sits in the arguments; a flow's own failure is a tool
//! result with `isError`.

use std::future::{Future, poll_fn};
use std::pin::pin;

use bidi_core::{ActionTask, BoxError, Driver, InPlace, PeerGone};
use bidi_flow::wire::{self, Closed, Frames, Sink, Wire};
use bidi_flow::{JsonError, JsonRecvHalf, JsonSendHalf, Registry};
use rmcp::model::{CallToolResult, ContentBlock, ErrorData};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::tools::{self, Shape};
use super::{CANCELLED, CallEnv, CallProgress, Caller, Step};

/// How many chunks a flow may stream ahead of the progress notifications.
const OUTPUT_BUFFER: usize = 16;

/// The flow a call runs: its key, how its arguments carry its input, and whether its tool
/// advertises an `outputSchema` (then its output must be an object).
pub(super) struct FlowCall<'a> {
    pub(super) key: &'a str,
    pub(super) shape: Shape,
    pub(super) structured: bool,
}

/// Runs `call`'s flow on the arguments of a call.
///
/// The action's task is polled by this call (a [`Driver`]), beside the reading of its
/// output, in place ([`InPlace`]): the input handed over, the output answered and the
/// action's end wake one another inside one poll instead of crossing tasks.
///
/// # Errors
///
/// Arguments the flow refuses, as `-32602` naming where.
pub(super) async fn call(
    registry: &Registry,
    call: FlowCall<'_>,
    arguments: Map<String, Value>,
    env: &CallEnv,
    caller: &Caller,
) -> Result<CallToolResult, ErrorData> {
    let FlowCall {
        key,
        shape,
        structured,
    } = call;
    let (init, input) = shape.split(arguments)?;
    let driver = Driver::new();
    let options = env
        .options()
        .input_buffer(1)
        .output_buffer(OUTPUT_BUFFER)
        .driver(&driver);
    let conn = registry
        .connect_json_with(key, init, options)
        .map_err(|error| refused(&error, shape))?;
    let (input_half, output) = conn.into_split();
    let mut action = Action {
        task: driver.take(),
        input: input_half.clone(),
    };
    let exchange = exchange((input_half, input), output, shape, caller);
    Ok(match InPlace::new(action.beside(exchange)).await? {
        Ok(value) => answer(value, structured),
        Err(error) => failed(&error),
    })
}

/// A call's action, polled by the call. A call dropped before the action's end (its client
/// went away) cancels the connection and leaves the action to end, its grace period
/// included, in a task of its own.
struct Action {
    task: Option<ActionTask>,
    input: JsonSendHalf,
}

impl Action {
    /// Runs `work`, polling the action beside it; the action's end is not waited for.
    async fn beside<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = pin!(work);
        poll_fn(|cx| {
            if let Some(task) = &mut self.task
                && task.as_mut().poll(cx).is_ready()
            {
                self.task = None;
            }
            work.as_mut().poll(cx)
        })
        .await
    }
}

impl Drop for Action {
    fn drop(&mut self) {
        if !self.input.is_finished() {
            // The first cause stays: a refused input's, a client's cancel.
            self.input.cancel_with(PeerGone::Disconnected);
        }
        if let Some(task) = self.task.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            drop(runtime.spawn(task));
        }
    }
}

/// Sends `input`, closes the input, notifies the chunks as progress and answers the output.
///
/// # Errors
///
/// An input the flow refuses, as `-32602`; the connection is cancelled.
async fn exchange(
    (input_half, input): (JsonSendHalf, Value),
    mut output: JsonRecvHalf,
    shape: Shape,
    caller: &Caller,
) -> Result<Result<Value, JsonError>, ErrorData> {
    if let Err(error @ JsonError::InvalidInput { .. }) = input_half.send(input).await {
        input_half.cancel_with("the call's input was refused");
        return Err(refused(&error, shape));
    }
    // Any other failure to send: the flow ended without taking it, and its output says how.
    input_half.close();
    drop(input_half);
    let progress = Notify {
        progress: &caller.progress,
        call: caller.cancelled(),
    };
    let mut wire = Steps {
        wanted: progress.progress.wanted(),
    };
    let mut last = Pending::default();
    wire::pump_turns(&mut output, &mut wire, &progress, None, &mut last).await;
    let _ = progress.send(last).await;
    Ok(output.output().await)
}

/// A flow's chunks as the steps of its call's progress: a [`bidi_flow::Progress`] as it says,
/// any other as its JSON text; none if the caller did not ask for progress.
struct Steps {
    wanted: bool,
}

impl Wire for Steps {
    type Event = Value;
    type Output = ();
    type Frames = Pending;

    fn event(&mut self, chunk: Value, out: &mut Pending) {
        if self.wanted {
            out.0.push(match bidi_flow::Progress::of(&chunk) {
                Some(known) => Step::Known(known),
                None => Step::Text(chunk.to_string()),
            });
        }
    }

    /// The result says why.
    fn failed(&mut self, _: &str, _: &mut Pending) {}
}

/// Progress steps not notified yet, notified one at a time.
#[derive(Default)]
struct Pending(Vec<Step>);

impl Frames for Pending {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn is_full(&self) -> bool {
        !self.0.is_empty()
    }
}

/// A call's progress notifications: the sink of its flow's chunks, closed when the client
/// cancels the call (`notifications/cancelled`).
struct Notify<'a> {
    progress: &'a CallProgress,
    call: &'a CancellationToken,
}

impl Sink<Pending> for Notify<'_> {
    /// A client that is gone is noticed by the call's cancellation, not here.
    async fn send(&self, Pending(steps): Pending) -> Result<(), Closed> {
        for step in steps {
            self.progress.send(step).await;
        }
        Ok(())
    }

    async fn closed(&self) -> BoxError {
        self.call.cancelled().await;
        CANCELLED.into()
    }
}

/// A flow's output as a tool result: a string as its text, any other value as its JSON, and
/// as `structuredContent` when it is an object. The output of a flow whose tool has an
/// `outputSchema` (`structured`) must be an object: any other is the tool's error.
fn answer(value: Value, structured: bool) -> CallToolResult {
    match value {
        Value::Object(_) => CallToolResult::structured(value),
        _ if structured => CallToolResult::error(vec![ContentBlock::text(
            "the flow's output is not an object, as its output schema says",
        )]),
        Value::String(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        other => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
    }
}

/// A flow that failed, as a tool result with `isError` and the failure's message.
fn failed(error: &JsonError) -> CallToolResult {
    let message = match error {
        JsonError::Connection(error) => bidi_agent::Refusal::of(error).into_message(),
        JsonError::Send(send) => match send.error() {
            Some(error) => bidi_agent::Refusal::of(error).into_message(),
            None => error.to_string(),
        },
        _ => error.to_string(),
    };
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The registry's refusal of a call's arguments, as `-32602` naming the argument.
fn refused(error: &JsonError, shape: Shape) -> ErrorData {
    let (path, reason, prefix) = match error {
        JsonError::InvalidInit { path, reason } => (path, reason, "/init"),
        JsonError::InvalidInput { path, reason, .. } => (path, reason, shape.input_prefix()),
        JsonError::NotFound(missing) => {
            return ErrorData::invalid_params(format!("no such tool: {missing}"), None);
        }
        other => return ErrorData::internal_error(other.to_string(), None),
    };
    tools::invalid_argument(&format!("{prefix}{path}"), reason)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_object_output_is_structured_content() {
        let result = answer(json!({"total": 3}), true);
        assert_eq!(result.is_error, Some(false));
        assert_eq!(result.structured_content, Some(json!({"total": 3})));
        let text = result.content[0].as_text().map(|text| text.text.as_str());
        assert_eq!(text, Some(r#"{"total":3}"#));
    }

    #[test]
    fn other_outputs_are_text_or_break_the_output_schema() {
        let plain = answer(json!("Hi, Ada"), false);
        assert_eq!(plain.is_error, Some(false));
        assert_eq!(plain.structured_content, None);
        let text = plain.content[0].as_text().map(|text| text.text.as_str());
        assert_eq!(text, Some("Hi, Ada"));
        let number = answer(json!([1, "two"]), false);
        let text = number.content[0].as_text().map(|text| text.text.as_str());
        assert_eq!(text, Some(r#"[1,"two"]"#));
        let broken = answer(json!([1, 2]), true);
        assert_eq!(broken.is_error, Some(true));
        assert_eq!(broken.structured_content, None);
    }
}
