//! Someone gets paged: escalation changes go out to Alertmanager and to signed webhooks
//! (DESIGN.md "Notifications").
//!
//! - [`Target`]: a `[[notify]]` table of the config file, as plain data.
//! - [`outbox`]: the durable outbox as a deterministic state machine (which items are due, what
//!   an attempt makes of one, capped exponential backoff); time is an input.
//! - [`events`]: what one escalation change enqueues for each target (the webhook's JSON body
//!   with the evidence bundle, the Alertmanager alert), computed by the engine while it holds
//!   the verdict, and written in the same durable write as the change.
//! - [`alertmanager`]: the alert for an escalation (labels, annotations, times).
//! - [`sign`]: `Reckon-Signature` (Stripe's scheme).
//! - [`deliver`]: the edge: the background task that sends due items over HTTP, records each
//!   attempt in the store, and re-sends every unresolved escalation to Alertmanager.

pub mod alertmanager;
pub mod deliver;
pub mod events;
pub mod outbox;
pub mod sign;

use std::fmt;
use std::time::Duration;

use sha2::{Digest, Sha256};

pub use outbox::{OutboxItem, OutboxState, Policy};

use crate::contract::Contract;
use crate::model::{Escalation, Timestamp, Verdict};

/// Where notifications go.
#[derive(Clone, PartialEq, Eq)]
pub enum TargetKind {
    /// An Alertmanager base URL (`http://alertmanager:9093`): reckon POSTs `/api/v2/alerts`,
    /// and re-sends every unresolved escalation each `resend_interval` with `endsAt` four of
    /// them ahead (as Prometheus does with its `--rules.alert.resend-delay`).
    Alertmanager {
        url: String,
        resend_interval: Duration,
    },
    /// A URL reckon POSTs each event to, signed with `secret`.
    Webhook { url: String, secret: String },
}

/// One `[[notify]]` table.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// Names the target in delivery ids and logs: `name` from the config, else the kind and a
    /// hash of the URL (`webhook-1a2b3c4d`), so reordering the tables changes nothing.
    pub name: String,
    pub kind: TargetKind,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("kind", &self.kind_str())
            .field("url", &self.url())
            .field(
                "secret",
                &match self.kind {
                    TargetKind::Webhook { .. } => Some("<redacted>"),
                    TargetKind::Alertmanager { .. } => None,
                },
            )
            .finish()
    }
}

/// A `[[notify]]` table that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("unknown kind {0:?}: expected \"alertmanager\" or \"webhook\"")]
    Kind(String),
    #[error(
        "{0:?} is not an http:// URL with a host (TLS is not built in: put a TLS-terminating \
         proxy in front of an https receiver)"
    )]
    Url(String),
    #[error("a webhook needs a non-empty secret (receivers verify Reckon-Signature with it)")]
    Secret,
    #[error("an alertmanager target takes no secret")]
    UnexpectedSecret,
    #[error("only an alertmanager target is re-sent (resend_interval)")]
    UnexpectedResend,
    #[error("resend_interval must be between 1s and 1h")]
    Resend,
    #[error("name {0:?}: use letters, digits, '-', '_' and '.' (at most 64)")]
    Name(String),
    #[error("two [[notify]] targets are named {0:?}")]
    Duplicate(String),
}

fn check_url(url: &str) -> Result<String, TargetError> {
    let u = url.trim().trim_end_matches('/');
    let host = u
        .strip_prefix("http://")
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(h) if !h.is_empty() && !h.starts_with(':') && !u.contains(char::is_whitespace) => {
            Ok(u.to_string())
        }
        _ => Err(TargetError::Url(url.to_string())),
    }
}

fn check_name(name: &str) -> Result<String, TargetError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(TargetError::Name(name.to_string()))
    }
}

/// How often an unresolved escalation is re-sent to Alertmanager by default.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(45);

impl Target {
    /// A target from a `[[notify]]` table's fields.
    pub fn new(
        kind: &str,
        url: &str,
        secret: Option<&str>,
        name: Option<&str>,
    ) -> Result<Target, TargetError> {
        let url = check_url(url)?;
        let kind = match kind.trim() {
            "alertmanager" => {
                if secret.is_some() {
                    return Err(TargetError::UnexpectedSecret);
                }
                TargetKind::Alertmanager {
                    url,
                    resend_interval: DEFAULT_RESEND_INTERVAL,
                }
            }
            "webhook" => match secret {
                Some(s) if !s.trim().is_empty() => TargetKind::Webhook {
                    url,
                    secret: s.to_string(),
                },
                _ => return Err(TargetError::Secret),
            },
            other => return Err(TargetError::Kind(other.to_string())),
        };
        let name = match name {
            Some(n) => check_name(n.trim())?,
            None => {
                let kind_str = match &kind {
                    TargetKind::Alertmanager { .. } => "alertmanager",
                    TargetKind::Webhook { .. } => "webhook",
                };
                let url = match &kind {
                    TargetKind::Alertmanager { url, .. } | TargetKind::Webhook { url, .. } => url,
                };
                let digest = Sha256::digest(url.as_bytes());
                format!("{kind_str}-{}", hex::encode(&digest[..4]))
            }
        };
        Ok(Target { name, kind })
    }

    pub fn kind_str(&self) -> &'static str {
        match self.kind {
            TargetKind::Alertmanager { .. } => "alertmanager",
            TargetKind::Webhook { .. } => "webhook",
        }
    }

    pub fn url(&self) -> &str {
        match &self.kind {
            TargetKind::Alertmanager { url, .. } | TargetKind::Webhook { url, .. } => url,
        }
    }

    /// An Alertmanager target re-sent every `every` instead of [`DEFAULT_RESEND_INTERVAL`].
    pub fn with_resend_interval(mut self, every: Duration) -> Result<Target, TargetError> {
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&every) {
            return Err(TargetError::Resend);
        }
        match &mut self.kind {
            TargetKind::Alertmanager {
                resend_interval, ..
            } => *resend_interval = every,
            TargetKind::Webhook { .. } => return Err(TargetError::UnexpectedResend),
        }
        Ok(self)
    }
}

/// Names must tell targets apart: the first duplicate is an error.
pub fn check_unique(targets: &[Target]) -> Result<(), TargetError> {
    let mut seen = std::collections::HashSet::new();
    for t in targets {
        if !seen.insert(t.name.as_str()) {
            return Err(TargetError::Duplicate(t.name.clone()));
        }
    }
    Ok(())
}

/// What the engine needs to enqueue notifications: the targets, and a way to wake the
/// delivery task once new items are durable.
#[derive(Debug)]
pub struct Notifier {
    targets: Vec<Target>,
    wake: tokio::sync::Notify,
}

impl Notifier {
    pub fn new(targets: Vec<Target>) -> Notifier {
        Notifier {
            targets,
            wake: tokio::sync::Notify::new(),
        }
    }

    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The outbox items that announce `e` (a changed escalation) to every target. `verdict` is
    /// the intent's verdict when the change was made, `contract` the one it was judged by.
    pub fn items(
        &self,
        e: &Escalation,
        verdict: Option<&Verdict>,
        contract: Option<&Contract>,
        now: Timestamp,
    ) -> Vec<OutboxItem> {
        events::items_for(&self.targets, e, verdict, contract, now)
    }

    /// New items are durable: the delivery task should look.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) async fn woken(&self) {
        self.wake.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_checked_and_named() {
        let am = Target::new("alertmanager", "http://am:9093/", None, None).unwrap();
        assert_eq!(am.url(), "http://am:9093");
        assert!(
            am.name.starts_with("alertmanager-") && am.name.len() == 21,
            "{}",
            am.name
        );
        assert_eq!(
            Target::new("alertmanager", "http://am:9093", None, None).unwrap(),
            am,
            "the default name depends on the URL only"
        );
        let hook = Target::new("webhook", "http://h/x", Some("s"), Some("pager")).unwrap();
        assert_eq!(hook.name, "pager");
        assert!(!format!("{hook:?}").contains("\"s\""), "{hook:?}");
        assert_eq!(
            Target::new("webhook", "http://h/x", None, None),
            Err(TargetError::Secret)
        );
        assert_eq!(
            Target::new("webhook", "http://h/x", Some(" "), None),
            Err(TargetError::Secret)
        );
        assert_eq!(
            Target::new("alertmanager", "http://h", Some("s"), None),
            Err(TargetError::UnexpectedSecret)
        );
        assert!(matches!(
            Target::new("pagerduty", "http://h", None, None),
            Err(TargetError::Kind(_))
        ));
        for bad in [
            "https://h",
            "h:9093",
            "http://",
            "http:///x",
            "http://:80",
            "http://a b",
        ] {
            assert!(
                matches!(
                    Target::new("alertmanager", bad, None, None),
                    Err(TargetError::Url(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Target::new("alertmanager", "http://h", None, Some("a b")),
            Err(TargetError::Name(_))
        ));
        assert_eq!(
            check_unique(&[hook.clone(), am.clone(), hook.clone()]),
            Err(TargetError::Duplicate("pager".into()))
        );
        assert_eq!(check_unique(&[hook.clone(), am.clone()]), Ok(()));
        let quick = am
            .clone()
            .with_resend_interval(Duration::from_secs(2))
            .unwrap();
        assert!(matches!(
            quick.kind,
            TargetKind::Alertmanager { resend_interval, .. } if resend_interval == Duration::from_secs(2)
        ));
        assert_eq!(
            hook.with_resend_interval(Duration::from_secs(2)),
            Err(TargetError::UnexpectedResend)
        );
        assert_eq!(
            am.with_resend_interval(Duration::from_millis(10)),
            Err(TargetError::Resend)
        );
    }
}
