//! How a call asks its client: the one home of MCP's elicitation for an agent's approvals and
//! a flow's questions (`bidi_flow::ask`).
//!
//! A call that runs as a task asks through the task: its questions are the task's input
//! requests, answered by `tasks/update`, all asked at once. A call in its request asks by
//! `elicitation/create` requests of a form, one after the other, when its client declared
//! form elicitation; the call's cancellation withdraws the question (`notifications/cancelled`
//! for the elicitation). A question of a form MCP cannot carry is the asker's failure.

use std::sync::Arc;

use bidi_flow::ask::{Answer, AskError, Asker, Question};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    InputRequest, ServerRequest,
};
use rmcp::service::{ElicitationMode, Peer, PeerRequestOptions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::CANCELLED;
use super::tasks::Task;

/// Whom a call asks: its client, or the task it runs as.
#[derive(Clone)]
pub(super) struct Asking {
    pub(super) peer: Peer<RoleServer>,
    pub(super) task: Option<Arc<Task>>,
    /// The call's cancellation, which withdraws the questions.
    pub(super) cancelled: CancellationToken,
}

/// Why a question has no answer.
pub(super) enum Unanswered {
    /// The call was cancelled while it waited.
    Cancelled,
    /// The client could not be asked, or did not answer: why.
    Failed(String),
}

impl Asking {
    /// Whether the client can be asked: through the call's task, or by elicitations of a
    /// form.
    pub(super) fn can_ask(&self) -> bool {
        self.task.is_some()
            || self
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
    }

    /// Asks `questions`: all at once as the input requests of the call's task, else one after
    /// the other. The answers, in the order of the questions.
    ///
    /// # Cancel safety
    ///
    /// Dropped, a question sent by request is left to its client; a task's stays asked
    /// until the task ends.
    pub(super) async fn ask(
        &self,
        questions: Vec<ElicitRequestParams>,
    ) -> Result<Vec<ElicitResult>, Unanswered> {
        if let Some(task) = &self.task {
            let requests = questions
                .into_iter()
                .map(|question| InputRequest::Elicitation(ElicitRequest::new(question)));
            let answers = task
                .ask(requests.collect())
                .await
                .ok_or(Unanswered::Cancelled)?;
            return answers
                .into_iter()
                .map(|answer| {
                    serde_json::from_value::<ElicitResult>(answer).map_err(|error| {
                        Unanswered::Failed(format!("the client's answer is not one: {error}"))
                    })
                })
                .collect();
        }
        let mut answers = Vec::with_capacity(questions.len());
        for question in questions {
            answers.push(self.ask_one(question).await?);
        }
        Ok(answers)
    }

    /// Asks `question` by an `elicitation/create` request.
    async fn ask_one(&self, mut question: ElicitRequestParams) -> Result<ElicitResult, Unanswered> {
        super::traced(&mut question);
        let sent = self
            .peer
            .send_cancellable_request(
                ServerRequest::ElicitRequest(ElicitRequest::new(question)),
                PeerRequestOptions::no_options(),
            )
            .await;
        let mut handle = sent
            .map_err(|error| Unanswered::Failed(format!("the client cannot be asked: {error}")))?;
        let answer = tokio::select! {
            answer = &mut handle.rx => answer,
            () = self.cancelled.cancelled() => {
                // Tells the client the question is over; one that went away hears nothing.
                let _ = handle.cancel(Some(CANCELLED.to_owned())).await;
                return Err(Unanswered::Cancelled);
            }
        };
        match answer {
            Ok(Ok(ClientResult::ElicitResult(answer))) => Ok(answer),
            Ok(Ok(_)) => Err(Unanswered::Failed(
                "the client answered the question with another result".into(),
            )),
            Ok(Err(error)) => Err(Unanswered::Failed(format!(
                "the client did not answer the question: {error}"
            ))),
            Err(_) => Err(Unanswered::Failed(
                "the client went away before it answered".into(),
            )),
        }
    }

    /// An [`Asker`] of a flow's questions, when the client can be asked.
    pub(super) fn asker(&self) -> Option<Asker> {
        if !self.can_ask() {
            return None;
        }
        let asking = self.clone();
        Some(Asker::new(move |question: Question| {
            let asking = asking.clone();
            async move {
                let params = elicitation(&question)?;
                match asking.ask(vec![params]).await {
                    Ok(answers) => answers
                        .into_iter()
                        .next()
                        .map(answer)
                        .ok_or_else(|| AskError::Failed("no answer".to_owned())),
                    Err(Unanswered::Cancelled) => Err(AskError::Failed(CANCELLED.to_owned())),
                    Err(Unanswered::Failed(why)) => Err(AskError::Failed(why)),
                }
            }
        }))
    }
}

/// A flow's question as an elicitation of a form.
///
/// # Errors
///
/// A form MCP's elicitation cannot carry, saying where.
fn elicitation(question: &Question) -> Result<ElicitRequestParams, AskError> {
    let schema = Value::Object(question.form().clone());
    let requested_schema = serde_json::from_value(schema)
        .map_err(|error| AskError::Failed(format!("MCP cannot ask with this form: {error}")))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.message().to_owned(),
        requested_schema,
    })
}

/// The client's answer as a flow reads it: an accepted form's fields (none if it sent no
/// object), a decline, or a cancel (as is any action MCP may add).
fn answer(result: ElicitResult) -> Answer {
    match result.action {
        ElicitationAction::Accept => match result.content {
            Some(Value::Object(fields)) => Answer::Accept(fields),
            _ => Answer::Accept(serde_json::Map::new()),
        },
        ElicitationAction::Decline => Answer::Decline,
        _ => Answer::Cancel,
    }
}
