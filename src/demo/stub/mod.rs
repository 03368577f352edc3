//! A stub downstream that keeps real state: the first note's payment service (refunds, Stripe
//! v1 replay and v2 converge), the second note's bookkeeping service (bill drafts) and an email
//! provider that accepts no key.
//!
//! The refund contract is the note's assumptions A to E, enforced here and nowhere else:
//! - A: once execution begins, a same-key repeat with the same parameters gets the saved response,
//!   500s included (`/v1/refunds`). Under `/v2/refunds` (converge) a repeat instead drives failed
//!   work to completion and returns the object as it is now.
//! - B: a same-key request arriving while the first executes gets 409 and is not saved.
//! - C: a reused key with other parameters is refused (400 `idempotency_error`).
//! - D: keys are kept for `key_retention`, then pruned: a late repeat executes again.
//! - E: refunds settle asynchronously (pending, then succeeded or failed), reported by webhook.
//!
//! Drafts differ where the second note says so: a same-key request arriving while the first runs
//! waits for it and observes its result (test 5), and a changed payload is 422
//! `idempotency_key_mismatch` (test 4).
//!
//! Like a real integration, the stub reports its objects to reckon itself: Stripe-shaped, signed
//! webhooks for refunds and the records API for drafts. Emails are not reported: the point of
//! the `none` downstream is that nothing but the caller's own timeout is known.
//!
//! Scenarios steer one request at a time with `x-demo-*` headers (see [`Knobs`]), so concurrent
//! scenarios never share a switch.
//!
//! The parts, one concern each: `knobs` (the per-request switches), `books` (objects and keys
//! as plain data, and the rules above as functions of them, time passed in), `http` (the
//! endpoints: validation, responses, timing), `report` (sending reports in the background; drafts
//! as records) and `webhook` (refunds as Stripe events, and their signature).

mod books;
mod http;
mod knobs;
mod report;
mod webhook;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::model::Timestamp;
use books::Books;
use report::Reports;

pub use books::StubObject;
pub use http::to_minor;
pub use knobs::{Knobs, Settle};
pub use report::Reporter;
pub use webhook::refund_event;

/// How long the stub keeps an idempotency key: `key_retention` in `contracts/demo.toml`.
pub const KEY_RETENTION: Duration = Duration::from_secs(8);

#[derive(Debug, thiserror::Error)]
pub enum StubError {
    #[error("cannot bind the stub downstream: {0}")]
    Bind(#[source] std::io::Error),
}

/// What the handlers and the settlement tasks share.
struct Shared {
    books: Mutex<Books>,
    reports: Arc<Reports>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Books> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters to a demo; keep serving rather than poisoning every later request.
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running stub: its address and the objects it holds.
pub struct Stub {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Stub {
    /// Binds 127.0.0.1:0 and serves until dropped.
    pub async fn start(retention: Duration, reporter: Option<Reporter>) -> Result<Stub, StubError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(StubError::Bind)?;
        let addr = listener.local_addr().map_err(StubError::Bind)?;
        let shared = Arc::new(Shared {
            books: Mutex::new(Books::new(super::run_tag(), retention)),
            reports: Arc::new(Reports::new(reporter)),
        });
        let app = http::router(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("stub downstream stopped: {e}");
            }
        });
        Ok(Stub { addr, shared, task })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every object linked to `intent_id` (refunds by metadata, drafts and emails by field).
    pub fn objects_for(&self, intent_id: &str) -> Vec<StubObject> {
        self.shared.lock().objects_for(intent_id)
    }

    /// Reports reckon refused or that never arrived.
    pub fn report_failures(&self) -> Vec<String> {
        self.shared.reports.failures()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Both clocks, read once for a step that creates an object.
fn now() -> books::Now {
    books::Now {
        wall: unix_now(),
        mono: std::time::Instant::now(),
    }
}

/// The stub's own wall clock (it is a separate program; reckon's clock rule does not bind it).
fn unix_now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp(d.as_nanos() as i64)
}
