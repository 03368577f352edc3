//! Reporting objects to reckon, as a real integration would: in the background, retried
//! briefly, and a refusal kept for the demo's diagnosis. Drafts go to the records API here;
//! refunds go as Stripe webhooks (`webhook.rs`) through the same sender.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::books::Draft;

/// Where and how the stub reports its objects. `None` in tests that only look at the stub.
#[derive(Clone, Debug)]
pub struct Reporter {
    /// reckon's API base, e.g. `http://127.0.0.1:8080`.
    pub api_base: String,
    /// Signs webhooks as Stripe does when set.
    pub stripe_secret: Option<String>,
}

/// The sending side of the stub: kept apart from the books so a delivery task never needs the
/// state lock (reports are sent while it is held: execution saves the key and reports in one
/// step).
pub(super) struct Reports {
    pub(super) to: Option<Reporter>,
    http: reqwest::Client,
    /// Report deliveries reckon refused or that could not be sent.
    failures: Mutex<Vec<String>>,
}

impl Reports {
    pub(super) fn new(to: Option<Reporter>) -> Reports {
        Reports {
            to,
            http: reqwest::Client::new(),
            failures: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn failures(&self) -> Vec<String> {
        // A poisoned list is still a list of strings: keep what it holds.
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The draft as a record of the records API, observed when it was created.
    pub(super) fn draft(self: &Arc<Self>, d: &Draft, delay: Duration) {
        let Some(reporter) = &self.to else {
            return;
        };
        let body = json!({
            "kind": "demo_draft",
            "source": "demo-bookkeeping",
            "object_id": d.id,
            "intent_id": d.intent_id,
            "idempotency_key": d.key,
            "status": d.status,
            "amount": d.amount,
            "currency": d.currency,
            "target": d.supplier,
            "created_at": crate::codec::rfc3339(d.created),
            "observed_at": crate::codec::rfc3339(d.created),
        })
        .to_string();
        let url = format!("{}/api/v1/records", reporter.api_base);
        self.deliver(url, body, None, delay, "record");
    }

    /// Sends one report in the background, retrying like Stripe does (briefly: this is a demo).
    pub(super) fn deliver(
        self: &Arc<Self>,
        url: String,
        body: String,
        signature: Option<String>,
        delay: Duration,
        what: &'static str,
    ) {
        let reports = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut last = String::new();
            for attempt in 0..5u32 {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
                let mut req = reports
                    .http
                    .post(&url)
                    .header("content-type", "application/json")
                    .timeout(Duration::from_secs(5))
                    .body(body.clone());
                if let Some(sig) = &signature {
                    req = req.header("stripe-signature", sig);
                }
                match req.send().await {
                    Ok(resp) if resp.status().is_success() => return,
                    // A 4xx will not change on retry: reckon refused the report.
                    Ok(resp) if resp.status().is_client_error() => {
                        let status = resp.status();
                        let text = resp.text().await.unwrap_or_default();
                        last = format!("{what} to {url}: {status} {text}");
                        break;
                    }
                    Ok(resp) => last = format!("{what} to {url}: {}", resp.status()),
                    Err(e) => last = format!("{what} to {url}: {e}"),
                }
            }
            tracing::warn!("stub downstream could not report: {last}");
            reports
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(last);
        });
    }
}
