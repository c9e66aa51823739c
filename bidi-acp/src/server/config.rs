//! A session's configuration options (`configOptions`, `session/set_config_option`): the one a
//! bidi agent has is `model`, offered when the agent has models to choose from
//! (`LlmAgentBuilder::model_choice`), its values the models' names.
//!
//! The choice is the session's (`LlmSession::chosen_model`, in the store): every turn of the
//! session calls the model chosen, whichever front end or process runs it, and
//! `session/load` of it in another editor shows it. `session/new`, `session/load`,
//! `session/resume` and `session/fork` answer the options; `session/set_config_option`
//! answers them all again, and tells the session's `config_option_update` where it is open.
//! An unknown option or value is `-32602` naming the field; a session whose turn runs is busy.

use agent_client_protocol_schema::v1::{
    ConfigOptionUpdate, Error, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOption, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse,
};
use bidi_llm::LlmAgent;
use bidi_session::StoreError;

use super::session::{store_failed, stored_llm};
use super::{Backend, Shared, busy, no_session};
use crate::codec;

/// The id of the model option.
const MODEL: &str = "model";

/// The options of a session whose turns call the model named `current`: none unless the
/// agent offers more than one model.
pub(super) fn options(agent: &LlmAgent, current: &str) -> Option<Vec<SessionConfigOption>> {
    let models = agent.models();
    if models.len() < 2 {
        return None;
    }
    let choices: Vec<SessionConfigSelectOption> = models
        .iter()
        .map(|name| SessionConfigSelectOption::new(name.to_string(), name.to_string()))
        .collect();
    let model = SessionConfigOption::select(MODEL, "Model", current.to_owned(), choices)
        .description("The model that answers the session's prompts".to_owned())
        .category(SessionConfigOptionCategory::Model);
    Some(vec![model])
}

/// `session/set_config_option`.
///
/// # Errors
///
/// An option or a value the agent does not have, a session that does not exist, one whose
/// turn runs, or the store failing.
pub(super) async fn set(
    shared: &Shared,
    request: SetSessionConfigOptionRequest,
) -> Result<SetSessionConfigOptionResponse, Error> {
    let Backend::Llm(agent) = &shared.agent else {
        return Err(unknown_option(&request));
    };
    if &*request.config_id.0 != MODEL || agent.models().len() < 2 {
        return Err(unknown_option(&request));
    }
    let Some(name) = request.value.as_value_id() else {
        return Err(codec::invalid_params(
            "value",
            "the model option takes a model's name",
        ));
    };
    let name = name.0.to_string();
    if !agent.models().contains(&name.as_str()) {
        let offered = agent.models().join("`, `");
        return Err(codec::invalid_params(
            "value",
            format!(
                "no model `{}`: this agent offers `{offered}`",
                bidi_flow::text::cap(&name)
            ),
        ));
    }
    let id = &request.session_id.0;
    let session = stored_llm(shared, agent, id)
        .await?
        .ok_or_else(|| no_session(&request.session_id))?;
    let current = session
        .update(|state| {
            // The name was checked: the agent offers it.
            let _ = agent.choose_model(state, &name);
            agent.model_of(state).to_owned()
        })
        .await
        .map_err(|error| match error {
            StoreError::Running { .. } => busy(
                &request.session_id,
                "a prompt turn runs; set the option once it ends",
            ),
            error => store_failed(&error),
        })?;
    let options = options(agent, &current).unwrap_or_default();
    if shared.sessions().contains_key(id) {
        let update = SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(options.clone()));
        let _ = shared.update(&request.session_id, update).await;
    }
    Ok(SetSessionConfigOptionResponse::new(options))
}

/// `-32602`: the agent has no option of the request's id.
fn unknown_option(request: &SetSessionConfigOptionRequest) -> Error {
    let id = bidi_flow::text::cap(&request.config_id.0).into_owned();
    codec::invalid_params("configId", format!("this agent has no option `{id}`"))
}
