//! Push notifications: each state change of a task POSTed to the webhooks its clients
//! configured, as A2A's `StreamResponse` (`{"statusUpdate": {..}}`, `application/a2a+json`).
//!
//! **What is pushed.** A task's state changes, each once: working as a turn starts, then where
//! it ends (input-required, completed, failed, canceled). The answer's chunks are not: a
//! webhook per token would flood the receiver, which reads the answer with `GetTask` once told
//! (A2A's own pattern for push). A status carries its message, so an input-required push says
//! which calls wait.
//!
//! **Where configs live.** In the agent's session store, beside the tasks and scoped like them
//! (the caller's identity, the agent; a "session" per task, under the agent's name and a
//! control character no agent name holds), so that every process sharing the store knows
//! them: a config made through one process is used by the process that runs the task's next
//! turn. The process running a turn reads the task's configs at each state change.
//!
//! **Delivery.** Each webhook gets `Authorization: {scheme} {credentials}` when the config has
//! `authentication`, and `X-A2A-Notification-Token` when it has a `token`. A delivery that
//! fails (no answer within the timeout, a 5xx, 408 or 429) is tried again after a backoff
//! that doubles, a bounded number of times; another 4xx is the receiver's refusal and is not
//! retried. A task's notifications go out in order, one after the other, whichever turn they
//! come from. Redirects are not followed.
//!
//! **Addresses.** Webhook URLs are refused when they name loopback, private, link-local or
//! unspecified addresses (`localhost` too), as A2A asks against request forgery; a server on
//! a private network allows them with [`PushNotifications::allow_private_addresses`]. Host
//! names are not resolved when a config is made.

mod configs;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use bidi_flow::text::{pointer, reason};
use bidi_session::Scoped;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{StatusCode, Url};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use configs::{PushConfig, check, save, store_of};
pub(crate) use configs::{create, delete, get, list};

use super::types::{Event, RpcError, StatusUpdate, Task};
use super::{Call, Saved};

/// How an [`A2a`](crate::A2a) server pushes its tasks' state changes to the webhooks clients
/// configure. On by default, with the defaults below; [`disabled`](Self::disabled) turns
/// it off (the card then says `pushNotifications: false`, and the methods are refused).
///
/// Each state change (working, input-required, completed, failed, canceled) is POSTed once,
/// in order, as A2A's `StreamResponse` (`{"statusUpdate": ..}`, `application/a2a+json`), with
/// `Authorization: {scheme} {credentials}` when the config has `authentication` and
/// `X-A2A-Notification-Token` when it has a `token`. The answer's chunks are not pushed: the
/// receiver reads the task with `GetTask` once told. A delivery that gets no answer within
/// the [`timeout`](Self::timeout), a 5xx, 408 or 429 is tried again after a
/// [`backoff`](Self::backoff) that doubles, up to [`attempts`](Self::attempts) times; any other
/// 4xx is the receiver's refusal; a notification not taken is logged to stderr
/// (`bidi_flow::log`, the webhook's host only). Redirects are not followed, and webhooks on
/// loopback, private or link-local addresses are refused unless
/// [allowed](Self::allow_private_addresses) (host names are not resolved when a config is
/// made).
///
/// ```
/// use std::time::Duration;
/// use bidi_a2a::{A2a, PushNotifications};
///
/// let a2a = A2a::new().push_notifications(
///     PushNotifications::new()
///         .timeout(Duration::from_secs(5))
///         .attempts(5)
///         // Webhooks on this network's own addresses (refused by default).
///         .allow_private_addresses(),
/// );
/// # drop(a2a);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct PushNotifications {
    enabled: bool,
    timeout: Duration,
    attempts: u32,
    backoff: Duration,
    private: bool,
}

impl Default for PushNotifications {
    fn default() -> Self {
        Self {
            enabled: true,
            timeout: Duration::from_secs(10),
            attempts: 3,
            backoff: Duration::from_secs(1),
            private: false,
        }
    }
}

impl PushNotifications {
    /// Push notifications with the defaults: a 10-second timeout, 3 attempts, a first retry
    /// after a second, public addresses only.
    pub fn new() -> Self {
        Self::default()
    }

    /// No push notifications.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }

    /// How long a delivery waits for the webhook's answer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many times a notification is tried at most (at least once).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// How long the first retry waits; each later one waits twice as long as the one before.
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// Allows webhooks on loopback, private and link-local addresses.
    pub fn allow_private_addresses(mut self) -> Self {
        self.private = true;
        self
    }

    pub(crate) fn private_allowed(&self) -> bool {
        self.private
    }
}

/// The header of a config's token.
const TOKEN: &str = "x-a2a-notification-token";

/// What sends a server's notifications: its settings, its HTTP client, and the order of each
/// task's notifications.
#[derive(Debug)]
pub(crate) struct Pusher {
    settings: PushNotifications,
    http: reqwest::Client,
    /// Each task's turn to notify: held by the notifier of one turn of the task at a time.
    order: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Pusher {
    /// The pusher of `settings`; `None` if they are disabled.
    pub(crate) fn new(settings: PushNotifications) -> Option<Arc<Self>> {
        if !settings.enabled {
            return None;
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .ok()?;
        Some(Arc::new(Self {
            settings,
            http,
            order: Mutex::new(HashMap::new()),
        }))
    }

    pub(crate) fn settings(&self) -> &PushNotifications {
        &self.settings
    }

    /// A notifier of one turn's state changes, whose task's configs are in `store`; `inline`,
    /// the config of the message that started the turn, is saved for its task first, as the
    /// turn starts (the receiver returned hears when; it is dropped unheard if the turn never
    /// starts).
    pub(crate) fn notifier(
        self: &Arc<Self>,
        store: Scoped,
        inline: Option<PushConfig>,
    ) -> (Notifier, Option<oneshot::Receiver<()>>) {
        let (updates, received) = mpsc::unbounded_channel();
        let (inline, saved) = match inline {
            Some(config) => {
                let (saved, heard) = oneshot::channel();
                (Some((config, saved)), Some(heard))
            }
            None => (None, None),
        };
        tokio::spawn(Arc::clone(self).notify(store, inline, received));
        (Notifier(updates), saved)
    }

    /// Sends each update to the task's webhooks, after the notifications of the task's
    /// earlier turns.
    async fn notify(
        self: Arc<Self>,
        store: Scoped,
        mut inline: Option<(PushConfig, oneshot::Sender<()>)>,
        mut updates: mpsc::UnboundedReceiver<(StatusUpdate, u64)>,
    ) {
        let mut turn = None;
        while let Some((update, at)) = updates.recv().await {
            if let Some((config, saved)) = inline.take() {
                // A config that cannot be saved is not used (the task's record is the store),
                // and the operator is told.
                if let Err(error) = save(&store, &update.task_id, config, 0).await {
                    bidi_flow::log::line(format!(
                        "[bidi-a2a] a message's push notification config was not saved: {:?}",
                        error.message
                    ));
                }
                let _ = saved.send(());
            }
            if turn.is_none() {
                turn = Some(self.order_of(&update.task_id).lock_owned().await);
            }
            let Ok(configs) = configs::load(&store, &update.task_id).await else {
                continue;
            };
            let event = Event::StatusUpdate(update);
            // Plain data: it always serializes.
            let body = serde_json::to_vec(&event).unwrap_or_default();
            // A config made after the change is not told of it.
            for kept in configs.iter().filter(|kept| kept.since <= at) {
                self.deliver(&kept.config, &body).await;
            }
        }
    }

    /// The lock that orders task `task`'s notifications.
    fn order_of(&self, task: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut order = self
            .order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lock) = order.get(task).and_then(Weak::upgrade) {
            return lock;
        }
        order.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        order.insert(task.to_owned(), Arc::downgrade(&lock));
        lock
    }

    /// POSTs `body` to `config`'s webhook, trying again as the settings say: whether it was
    /// taken. A notification the webhook did not take is logged (its host, not its URL,
    /// whose query may hold secrets).
    async fn deliver(&self, config: &PushConfig, body: &[u8]) -> bool {
        let mut wait = self.settings.backoff;
        let mut outcome = String::new();
        for attempt in 0..self.settings.attempts {
            if attempt > 0 {
                tokio::time::sleep(wait).await;
                wait = wait.saturating_mul(2);
            }
            let mut request = self
                .http
                .post(&config.url)
                .timeout(self.settings.timeout)
                .header(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/a2a+json"),
                )
                .body(body.to_vec());
            if let Some(authorization) = config.authorization() {
                request = request.header(AUTHORIZATION, authorization);
            }
            if !config.token.is_empty() {
                request = request.header(TOKEN, &config.token);
            }
            match request.send().await {
                Ok(answer) if answer.status().is_success() => return true,
                Ok(answer) => {
                    outcome = format!("answered {}", answer.status());
                    if !retried(answer.status()) {
                        break;
                    }
                }
                Err(error) if error.is_timeout() => outcome = "no answer in time".to_owned(),
                Err(_) => outcome = "not reached".to_owned(),
            }
        }
        let host = Url::parse(&config.url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_default();
        bidi_flow::log::line(format!(
            "[bidi-a2a] a push notification to {host:?} was not delivered: {outcome}"
        ));
        false
    }
}

/// Whether a webhook's answer asks to be tried again: it failed, or was too busy.
fn retried(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// The state changes of one turn of a task, for its webhooks (sent in the background, in
/// order; dropping the notifier lets the last ones go out).
#[derive(Debug)]
pub(crate) struct Notifier(mpsc::UnboundedSender<(StatusUpdate, u64)>);

impl Notifier {
    /// The task is at `update` now.
    pub(crate) fn status(&self, update: StatusUpdate) {
        let now = bidi_http::time::unix_millis(SystemTime::now());
        // The notifier's task ends only when this sender is dropped.
        let _ = self.0.send((update, now));
    }
}

/// Where a message's own config is in the request.
const INLINE: &str = "/params/configuration/taskPushNotificationConfig";

/// The notifier of the turn a message starts: `None` if the server sends no push
/// notifications or the agent keeps no tasks; `inline` is the message's own config, saved for
/// the task it starts or continues (`Saved` says when).
///
/// # Errors
///
/// A config where the server sends no notifications (-32003), or for an agent that keeps no
/// tasks (-32004); one whose fields are wrong (-32602).
pub(crate) fn notifier(
    call: &Call<'_>,
    inline: Option<Value>,
) -> Result<(Option<Notifier>, Saved), RpcError> {
    let inline = inline.filter(|config| !config.is_null());
    let Some(pusher) = &call.pushing.0 else {
        return match inline {
            Some(_) => Err(RpcError::no_push()),
            None => Ok((None, None)),
        };
    };
    let inline = match inline {
        Some(config) => {
            call.keeps_sessions("a push notification config")?;
            let config: PushConfig = serde_path_to_error::deserialize(config).map_err(|error| {
                let path = format!("{INLINE}{}", pointer(error.path()));
                RpcError::invalid_params(&path, reason(&error.into_inner().to_string()))
            })?;
            check(&config, pusher.settings().private_allowed(), INLINE)?;
            Some(config)
        }
        None if call.agent.agent().is_client_managed() => return Ok((None, None)),
        None => None,
    };
    let (notifier, saved) = pusher.notifier(store_of(call), inline);
    Ok((Some(notifier), saved))
}

/// Tells task `task`'s webhooks where it stands now, when that did not come from a turn (a
/// task canceled while it waited for input).
pub(crate) fn notify(call: &Call<'_>, task: &Task) {
    if let Some(pusher) = &call.pushing.0 {
        let (notifier, _) = pusher.notifier(store_of(call), None);
        notifier.status(StatusUpdate {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            status: task.status.clone(),
        });
    }
}

/// Why webhook `url` is refused, if it is: not an http or https URL, an address `private`
/// does not allow, https without TLS built in.
pub(crate) fn refusal(url: &str, private: bool) -> Option<String> {
    let Ok(parsed) = Url::parse(url) else {
        return Some("a webhook is an absolute http or https URL".to_owned());
    };
    match parsed.scheme() {
        "http" => {}
        "https" if cfg!(feature = "native-tls") => {}
        "https" => {
            return Some(
                "this agent sends no https webhooks (it was built without TLS): use http"
                    .to_owned(),
            );
        }
        _ => return Some("a webhook is an http or https URL".to_owned()),
    }
    let Some(host) = parsed.host_str().filter(|host| !host.is_empty()) else {
        return Some("a webhook's URL names a host".to_owned());
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let local = match bare.parse::<IpAddr>() {
        Ok(ip) => is_local(ip),
        Err(_) => {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    };
    (local && !private).then(|| {
        "a webhook on a loopback, private or link-local address is refused by this agent".to_owned()
    })
}

/// Whether `ip` is loopback, private, link-local, unspecified or broadcast.
fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => {
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
                // 100.64.0.0/10, shared address space.
                || (ip.octets()[0] == 100 && ip.octets()[1] & 0xc0 == 64)
        }
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => is_local(IpAddr::V4(v4)),
            None => {
                ip.is_loopback()
                    || ip.is_unspecified()
                    // fc00::/7, unique local; fe80::/10, link-local.
                    || ip.segments()[0] & 0xfe00 == 0xfc00
                    || ip.segments()[0] & 0xffc0 == 0xfe80
                    || ip == Ipv6Addr::UNSPECIFIED
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_on_local_addresses_are_refused_unless_allowed() {
        for local in [
            "http://127.0.0.1:9/hook",
            "http://localhost/hook",
            "http://api.localhost./hook",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://0.0.0.0/",
            "http://100.64.0.1/",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
        ] {
            assert!(refusal(local, false).is_some(), "{local}");
            assert_eq!(refusal(local, true), None, "{local}");
        }
        for public in [
            "http://example.com/hook",
            "http://8.8.8.8/",
            "http://[2001:db8::1]/",
        ] {
            assert_eq!(refusal(public, false), None, "{public}");
        }
        for bad in [
            "",
            "hook",
            "ftp://example.com/",
            "file:///etc/passwd",
            "http://",
        ] {
            assert!(refusal(bad, true).is_some(), "{bad}");
        }
    }

    #[test]
    fn only_failures_and_busy_answers_are_tried_again() {
        for status in [500, 502, 503, 408, 429] {
            assert!(retried(StatusCode::from_u16(status).unwrap()), "{status}");
        }
        for status in [400, 401, 403, 404, 410] {
            assert!(!retried(StatusCode::from_u16(status).unwrap()), "{status}");
        }
    }
}
