//! Refunds reported as Stripe reports them: an event per change, signed with the endpoint's
//! secret, posted to reckon's Stripe webhook.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::books::Refund;
use super::report::Reports;
use super::unix_now;

/// A Stripe event for the refund, signed when a secret is configured.
pub fn refund_event(event_id: &str, event_type: &str, refund: &Value, key: Option<&str>) -> Value {
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": unix_now().0.div_euclid(1_000_000_000),
        "type": event_type,
        "livemode": false,
        "pending_webhooks": 1,
        "data": {"object": refund},
        // Only the creating request carries the key; later changes are Stripe's own (null).
        "request": key.map(|k| json!({"id": format!("req_{event_id}"), "idempotency_key": k})),
    })
}

impl Reports {
    /// Sends `event_type` (`refund.created`, `.updated`, `.failed`) for the refund as it is now.
    pub(super) fn refund(self: &Arc<Self>, refund: &Refund, event_type: &str, delay: Duration) {
        let Some(reporter) = &self.to else {
            return;
        };
        let event_id = event_id();
        let key = if event_type == "refund.created" {
            refund.key.as_deref()
        } else {
            None
        };
        let body = refund_event(&event_id, event_type, &refund.json(), key).to_string();
        let url = format!("{}/api/v1/webhooks/stripe", reporter.api_base);
        let signature = reporter
            .stripe_secret
            .as_deref()
            .map(|s| stripe_signature(body.as_bytes(), s, unix_now().0 / 1_000_000_000));
        self.deliver(url, body, signature, delay, "webhook");
    }
}

/// Event ids come from their own counter: a refund is reported while the state lock is held
/// (execution saves the key and reports in one step), so numbering must not take that lock.
fn event_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(1);
    format!(
        "evt_{}{:08}",
        crate::demo::run_tag(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// `Stripe-Signature` as Stripe computes it (HMAC-SHA256 of `"{t}.{body}"`). Written here, on
/// the sender's side, rather than borrowed from reckon's verifier: a stub that shared the
/// verifier's code would agree with any mistake in it.
fn stripe_signature(body: &[u8], secret: &str, t: i64) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned against Python's `hmac` over the same input, not against reckon's verifier.
    #[test]
    fn the_signature_is_stripes_scheme() {
        assert_eq!(
            stripe_signature(br#"{"id":"evt_1"}"#, "whsec_demo", 1_700_000_000),
            "t=1700000000,v1=23325a61b4f7230b9b393ae50047056e354118190d0964e1414088ead50b4ce5"
        );
    }

    #[test]
    fn an_event_carries_the_refund_and_the_key_it_is_given() {
        let refund = json!({"id": "re_1"});
        let created = refund_event("evt_1", "refund.created", &refund, Some("k1"));
        assert_eq!(created["request"]["idempotency_key"], "k1");
        assert_eq!(created["data"]["object"], refund);
        let updated = refund_event("evt_2", "refund.updated", &refund, None);
        assert!(updated["request"].is_null());
    }
}
