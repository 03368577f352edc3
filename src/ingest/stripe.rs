//! `POST /api/v1/webhooks/stripe`: Stripe refund events as record observations.
//!
//! Stripe is the downstream's own word on a refund, which outranks anything the executor said,
//! so a forged event could close an intent that never settled. With a configured secret the
//! `Stripe-Signature` header is checked before the body is believed (`verify_signature`), then
//! `parse_event` maps the four refund event types to a `RecordObservation`. Other event types are
//! `Ignored`: Stripe sends whatever the endpoint subscribes to, and answering them with an error
//! would only make Stripe retry them for days.

use super::bounds::{TimeError, TimeWindow};
use crate::model::{Amount, Dur, RecordObservation, Timestamp};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Stripe's libraries default to five minutes between signing and verification.
pub const DEFAULT_TOLERANCE: Dur = Dur::minutes(5);

/// Observations from this module carry this `source`.
pub const SOURCE: &str = "stripe";

/// The event types that carry a refund object in `data.object`.
pub const REFUND_EVENTS: [&str; 4] = [
    "refund.created",
    "refund.updated",
    "refund.failed",
    "charge.refund.updated",
];

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StripeError {
    #[error("missing Stripe-Signature header")]
    MissingHeader,
    #[error("malformed Stripe-Signature header: {0}")]
    MalformedHeader(String),
    #[error("Stripe-Signature header has no v1 signature")]
    NoV1Signature,
    #[error("no v1 signature in Stripe-Signature matches the body (wrong secret, or the body was altered)")]
    SignatureMismatch,
    #[error("Stripe-Signature timestamp {timestamp} is more than {tolerance} from now ({now}): stale or replayed")]
    TimestampOutsideTolerance {
        timestamp: i64,
        now: i64,
        tolerance: Dur,
    },
    #[error("event body is not JSON: {0}")]
    InvalidJson(String),
    #[error("event is missing `{0}`")]
    MissingField(String),
    #[error("event field `{path}`: expected {expected}, got {got}")]
    WrongType {
        path: String,
        expected: &'static str,
        got: String,
    },
    /// A time outside the bounds every ingested time must meet (`ingest::bounds`).
    #[error("event field `{path}`: {error}")]
    Time {
        path: &'static str,
        error: TimeError,
    },
}

/// What a webhook body turned into.
// One value per webhook request, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StripeOutcome {
    /// A refund event: one observation of the refund object.
    Record {
        /// Stripe's event id (`evt_...`), for logs. Ingest identity is the observation's own
        /// (source, object_id, status, observed_at), so a redelivered event stays one observation.
        event_id: Option<String>,
        event_type: String,
        record: RecordObservation,
    },
    /// An event type reckon does not audit; acknowledge it so Stripe stops sending it.
    Ignored(String),
}

/// The signature header for `body` signed with `secret` at unix second `t`, as Stripe sends it.
/// For the demo's stub downstream and for tests.
pub fn sign(body: &[u8], secret: &str, t: i64) -> String {
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, t, body).finalize().into_bytes())
    )
}

fn mac(secret: &str, t: i64, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// Checks a `Stripe-Signature` header (`t=...,v1=...[,v1=...][,v0=...]`) against the raw body.
/// An absent header is passed as `""`. Any `v1` that matches passes (Stripe sends several while a
/// secret is being rolled); `v0` is Stripe's test scheme and never accepted. The comparison is
/// constant-time. The timestamp is checked after the signature, so a mismatch is reported as a
/// mismatch even when stale, and a validly signed event outside `tolerance` (either direction:
/// a replay, or a skewed clock) is refused.
pub fn verify_signature(
    header: &str,
    body: &[u8],
    secret: &str,
    now: Timestamp,
    tolerance: Dur,
) -> Result<(), StripeError> {
    let header = header.trim();
    if header.is_empty() {
        return Err(StripeError::MissingHeader);
    }
    let mut t: Option<i64> = None;
    let mut v1: Vec<&str> = Vec::new();
    for part in header.split(',') {
        let Some((k, v)) = part.split_once('=') else {
            return Err(StripeError::MalformedHeader(format!(
                "element {:?} is not key=value",
                part.trim()
            )));
        };
        match k.trim() {
            // Stripe's libraries use the first `t`; a second one is not something Stripe sends.
            "t" if t.is_none() => {
                let secs = v.trim().parse::<i64>().map_err(|_| {
                    StripeError::MalformedHeader(format!(
                        "timestamp {:?} is not unix seconds",
                        v.trim()
                    ))
                })?;
                t = Some(secs);
            }
            "t" => {
                return Err(StripeError::MalformedHeader(
                    "more than one timestamp".into(),
                ))
            }
            "v1" => v1.push(v.trim()),
            // v0 and schemes Stripe may add later are not ours to check.
            _ => {}
        }
    }
    let t = t.ok_or_else(|| StripeError::MalformedHeader("no t= timestamp".into()))?;
    if v1.is_empty() {
        return Err(StripeError::NoV1Signature);
    }
    let expected = mac(secret, t, body);
    // A v1 that is not hex cannot match; it is treated like any other non-matching signature.
    let matched = v1
        .iter()
        .filter_map(|s| hex::decode(s).ok())
        .any(|sig| expected.clone().verify_slice(&sig).is_ok());
    if !matched {
        return Err(StripeError::SignatureMismatch);
    }
    let signed_at = t.checked_mul(1_000_000_000);
    let within =
        signed_at.is_some_and(|ns| (now.0 as i128 - ns as i128).abs() <= tolerance.0 as i128);
    if !within {
        return Err(StripeError::TimestampOutsideTolerance {
            timestamp: t,
            now: now.0.div_euclid(1_000_000_000),
            tolerance,
        });
    }
    Ok(())
}

/// Maps a Stripe event to a refund observation. Required: `type`, `created`, `data.object.id`,
/// `.status`, `.amount` (minor units, as Stripe sends them: none for zero-decimal currencies) and
/// `.currency`. The link to the intent is `data.object.metadata.intent_id`; the key is
/// `request.idempotency_key` (`request` is null for Dashboard or automatic changes, and a bare
/// request-id string before API version 2017-05-25: no key in either case). `created` (the
/// observation time) and `data.object.created` must lie in `window` (the receive time's bounds).
pub fn parse_event(body: &[u8], window: &TimeWindow) -> Result<StripeOutcome, StripeError> {
    let event: Value =
        serde_json::from_slice(body).map_err(|e| StripeError::InvalidJson(e.to_string()))?;
    if !event.is_object() {
        return Err(wrong(&["event"], "an object", &event));
    }
    let event_type = req_str(&event, &["type"])?;
    if !REFUND_EVENTS.contains(&event_type.as_str()) {
        return Ok(StripeOutcome::Ignored(event_type));
    }
    let event_id = opt_str(&event, &["id"])?;
    let observed_at = unix_secs(&event, &["created"])?;

    let object =
        present(&event, &["data", "object"]).ok_or_else(|| missing(&["data", "object"]))?;
    if !object.is_object() {
        return Err(wrong(&["data", "object"], "an object", object));
    }
    // These four event types always carry a refund; anything else means a changed API.
    if let Some(kind) = opt_str(&event, &["data", "object", "object"])? {
        if kind != "refund" {
            return Err(StripeError::WrongType {
                path: "data.object.object".into(),
                expected: "\"refund\"",
                got: format!("{kind:?}"),
            });
        }
    }
    let object_id = req_str(&event, &["data", "object", "id"])?;
    let status = req_str(&event, &["data", "object", "status"])?;
    let amount = req_i64(&event, &["data", "object", "amount"])?;
    let currency = req_str(&event, &["data", "object", "currency"])?;
    let created_at = match present(&event, &["data", "object", "created"]) {
        Some(_) => Some(unix_secs(&event, &["data", "object", "created"])?),
        None => None,
    };
    let target = match opt_str(&event, &["data", "object", "metadata", "order_id"])? {
        Some(t) => Some(t),
        None => opt_str(&event, &["data", "object", "metadata", "target"])?,
    };
    let intent_id = opt_str(&event, &["data", "object", "metadata", "intent_id"])?;
    // Object identity is (kind, id). A Stripe refund is kind `refund` unless the caller named the
    // contract's record kind in metadata (for a contract whose `record_kind` is not `refund`).
    let kind = opt_str(&event, &["data", "object", "metadata", "reckon_kind"])?
        .unwrap_or_else(|| "refund".to_string());
    let idempotency_key = match present(&event, &["request"]) {
        Some(Value::Object(_)) => opt_str(&event, &["request", "idempotency_key"])?,
        _ => None,
    };
    for (path, at) in [
        ("created", Some(observed_at)),
        ("data.object.created", created_at),
    ] {
        if let Some(at) = at {
            window
                .check(at)
                .map_err(|error| StripeError::Time { path, error })?;
        }
    }

    Ok(StripeOutcome::Record {
        event_id,
        event_type,
        record: RecordObservation {
            source: SOURCE.to_string(),
            kind: Some(kind),
            object_id,
            intent_id,
            idempotency_key,
            status,
            amount: Some(Amount::Minor(amount as i128)),
            currency: Some(currency),
            target,
            created_at,
            observed_at,
        },
    })
}

/// The value at `path`; `None` when absent or `null` (Stripe sends `null` for unset fields).
fn present<'v>(root: &'v Value, path: &[&str]) -> Option<&'v Value> {
    let v = path.iter().try_fold(root, |v, k| v.get(k))?;
    (!v.is_null()).then_some(v)
}

fn missing(path: &[&str]) -> StripeError {
    StripeError::MissingField(path.join("."))
}

fn wrong(path: &[&str], expected: &'static str, got: &Value) -> StripeError {
    let mut got = got.to_string();
    if got.len() > 40 {
        got = format!("{}...", got.chars().take(37).collect::<String>());
    }
    StripeError::WrongType {
        path: path.join("."),
        expected,
        got,
    }
}

/// An optional string; empty counts as absent (Stripe metadata values are often `""`).
fn opt_str(root: &Value, path: &[&str]) -> Result<Option<String>, StripeError> {
    match present(root, path) {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(wrong(path, "a string", other)),
    }
}

fn req_str(root: &Value, path: &[&str]) -> Result<String, StripeError> {
    opt_str(root, path)?.ok_or_else(|| missing(path))
}

fn req_i64(root: &Value, path: &[&str]) -> Result<i64, StripeError> {
    let v = present(root, path).ok_or_else(|| missing(path))?;
    v.as_i64().ok_or_else(|| wrong(path, "an integer", v))
}

fn unix_secs(root: &Value, path: &[&str]) -> Result<Timestamp, StripeError> {
    let secs = req_i64(root, path)?;
    secs.checked_mul(1_000_000_000)
        .map(Timestamp)
        .ok_or_else(|| {
            wrong(
                path,
                "unix seconds",
                present(root, path).unwrap_or(&Value::Null),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Decimal;

    const SECRET: &str = "whsec_test_5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH";
    const T: i64 = 1_761_739_200;
    const NOW: Timestamp = Timestamp::from_secs(T + 30);

    fn w() -> TimeWindow {
        TimeWindow::default_at(NOW)
    }

    /// A `refund.updated` as Stripe sends it (API version 2024-10-28.acacia), trimmed of nothing
    /// that matters: unknown fields must be tolerated.
    fn event(event_type: &str, status: &str, amount: i64, currency: &str, request: &str) -> String {
        format!(
            r#"{{
  "id": "evt_3QK8ZbLkdIwHu7ix0V1nQZ2c",
  "object": "event",
  "api_version": "2024-10-28.acacia",
  "created": 1761739260,
  "data": {{
    "object": {{
      "id": "re_3QK8ZbLkdIwHu7ix0hV7dJzN",
      "object": "refund",
      "amount": {amount},
      "balance_transaction": "txn_3QK8ZbLkdIwHu7ix0iPL3hs1",
      "charge": "ch_3QK8ZbLkdIwHu7ix0Wc8HJ6R",
      "created": 1761739200,
      "currency": "{currency}",
      "destination_details": {{"card": {{"reference_status": "pending", "type": "refund"}}, "type": "card"}},
      "metadata": {{"intent_id": "int-1042-a", "order_id": "1042"}},
      "payment_intent": "pi_3QK8ZbLkdIwHu7ix0lU8Pm4T",
      "reason": "requested_by_customer",
      "receipt_number": null,
      "source_transfer_reversal": null,
      "status": "{status}",
      "transfer_reversal": null
    }},
    "previous_attributes": {{"status": "pending"}}
  }},
  "livemode": false,
  "pending_webhooks": 1,
  "request": {request},
  "type": "{event_type}"
}}"#
        )
    }

    fn refund(event_type: &str, status: &str) -> String {
        event(
            event_type,
            status,
            4500,
            "usd",
            r#"{"id": "req_Ab12Cd34", "idempotency_key": "key-1042-a"}"#,
        )
    }

    fn record(body: &str) -> RecordObservation {
        match parse_event(body.as_bytes(), &w()).unwrap() {
            StripeOutcome::Record { record, .. } => record,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn good_signature() {
        let body = refund("refund.updated", "succeeded");
        let header = sign(body.as_bytes(), SECRET, T);
        assert!(header.starts_with(&format!("t={T},v1=")));
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Ok(())
        );
        // Upper-case hex is the same signature (the same bytes): found by the stripe fuzz
        // target, whose first invariant compared the text.
        let header = header
            .to_ascii_uppercase()
            .replace("T=", "t=")
            .replace("V1=", "v1=");
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Ok(())
        );
    }

    #[test]
    fn known_vector() {
        // Computed independently: printf '%s' '1761739200.{}' | openssl dgst -sha256 -hmac 'whsec_x'
        assert_eq!(
            sign(b"{}", "whsec_x", T),
            "t=1761739200,v1=ea295ed79146e45a5db5ed2d0c38bb5d45e74a2ccc868a5cf5f402722b204c6f"
        );
    }

    #[test]
    fn bad_signature() {
        let body = refund("refund.updated", "succeeded");
        let header = sign(body.as_bytes(), "whsec_other", T);
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Err(StripeError::SignatureMismatch)
        );
        // An altered body fails with the right secret.
        let header = sign(body.as_bytes(), SECRET, T);
        let altered = body.replace("4500", "450000");
        assert_eq!(
            verify_signature(&header, altered.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Err(StripeError::SignatureMismatch)
        );
        // Non-hex signature material is a mismatch, not a crash.
        let header = format!("t={T},v1=zz-not-hex");
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Err(StripeError::SignatureMismatch)
        );
    }

    #[test]
    fn stale_and_future_timestamps() {
        let body = refund("refund.updated", "succeeded");
        let header = sign(body.as_bytes(), SECRET, T);
        let late = Timestamp::from_secs(T + 301);
        assert!(matches!(
            verify_signature(&header, body.as_bytes(), SECRET, late, DEFAULT_TOLERANCE),
            Err(StripeError::TimestampOutsideTolerance { timestamp: T, .. })
        ));
        let early = Timestamp::from_secs(T - 301);
        assert!(matches!(
            verify_signature(&header, body.as_bytes(), SECRET, early, DEFAULT_TOLERANCE),
            Err(StripeError::TimestampOutsideTolerance { .. })
        ));
        let edge = Timestamp::from_secs(T + 300);
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, edge, DEFAULT_TOLERANCE),
            Ok(())
        );
    }

    #[test]
    fn any_v1_matches_and_v0_is_ignored() {
        let body = refund("refund.created", "pending");
        let good = sign(body.as_bytes(), SECRET, T);
        let good_sig = good.split_once(",v1=").unwrap().1;
        let old_sig = sign(body.as_bytes(), "whsec_rolled_away", T);
        let old_sig = old_sig.split_once(",v1=").unwrap().1;
        let header = format!("t={T},v1={old_sig},v1={good_sig},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39");
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Ok(())
        );
        // Only a v0 (Stripe's test-mode scheme) is not enough.
        let header = format!("t={T},v0={good_sig}");
        assert_eq!(
            verify_signature(&header, body.as_bytes(), SECRET, NOW, DEFAULT_TOLERANCE),
            Err(StripeError::NoV1Signature)
        );
    }

    #[test]
    fn header_errors() {
        let b = b"{}";
        let v = |h: &str| verify_signature(h, b, SECRET, NOW, DEFAULT_TOLERANCE);
        assert_eq!(v(""), Err(StripeError::MissingHeader));
        assert_eq!(v("  "), Err(StripeError::MissingHeader));
        assert!(matches!(v("garbage"), Err(StripeError::MalformedHeader(_))));
        assert!(
            matches!(v("v1=abcd"), Err(StripeError::MalformedHeader(m)) if m.contains("timestamp"))
        );
        assert!(matches!(
            v("t=soon,v1=abcd"),
            Err(StripeError::MalformedHeader(_))
        ));
        assert!(matches!(
            v("t=1,t=2,v1=abcd"),
            Err(StripeError::MalformedHeader(_))
        ));
        assert_eq!(v(&format!("t={T}")), Err(StripeError::NoV1Signature));
        // A timestamp that overflows nanoseconds is outside any tolerance, not a panic.
        let big = format!("t={},v1=00", i64::MAX);
        assert!(v(&big).is_err());
        let header = sign(b, SECRET, i64::MAX);
        assert!(matches!(
            v(&header),
            Err(StripeError::TimestampOutsideTolerance { .. })
        ));
    }

    #[test]
    fn each_refund_event_type() {
        for (ty, status) in [
            ("refund.created", "pending"),
            ("refund.updated", "succeeded"),
            ("refund.failed", "failed"),
            ("charge.refund.updated", "canceled"),
        ] {
            let body = refund(ty, status);
            let out = parse_event(body.as_bytes(), &w()).unwrap();
            let StripeOutcome::Record {
                event_id,
                event_type,
                record,
            } = out
            else {
                panic!("{ty}")
            };
            assert_eq!(event_id.as_deref(), Some("evt_3QK8ZbLkdIwHu7ix0V1nQZ2c"));
            assert_eq!(event_type, ty);
            assert_eq!(
                record,
                RecordObservation {
                    source: "stripe".into(),
                    kind: Some("refund".into()),
                    object_id: "re_3QK8ZbLkdIwHu7ix0hV7dJzN".into(),
                    intent_id: Some("int-1042-a".into()),
                    idempotency_key: Some("key-1042-a".into()),
                    status: status.into(),
                    amount: Some(Amount::Minor(4500)),
                    currency: Some("usd".into()),
                    target: Some("1042".into()),
                    created_at: Some(Timestamp::from_secs(1_761_739_200)),
                    observed_at: Timestamp::from_secs(1_761_739_260),
                }
            );
            assert_eq!(
                record.amount.unwrap().to_major(record.currency.as_deref()),
                Decimal::parse("45.00").unwrap()
            );
        }
    }

    #[test]
    fn zero_decimal_currency() {
        let body = event("refund.created", "succeeded", 4500, "jpy", "null");
        let r = record(&body);
        assert_eq!(r.amount, Some(Amount::Minor(4500)));
        // ¥4500 is 4500 yen, not 45.00.
        assert_eq!(
            r.amount.unwrap().to_major(r.currency.as_deref()),
            Decimal::parse("4500").unwrap()
        );
    }

    #[test]
    fn request_shapes() {
        assert_eq!(
            record(&event("refund.created", "pending", 1, "usd", "null")).idempotency_key,
            None
        );
        // Before API version 2017-05-25, `request` was the bare request id.
        assert_eq!(
            record(&event(
                "refund.created",
                "pending",
                1,
                "usd",
                r#""req_old""#
            ))
            .idempotency_key,
            None
        );
        let body = event(
            "refund.created",
            "pending",
            1,
            "usd",
            r#"{"id": null, "idempotency_key": null}"#,
        );
        assert_eq!(record(&body).idempotency_key, None);
    }

    #[test]
    fn metadata_target_fallback_and_absent_metadata() {
        let body = refund("refund.updated", "succeeded").replace(
            r#""metadata": {"intent_id": "int-1042-a", "order_id": "1042"}"#,
            r#""metadata": {"target": "INV-204", "intent_id": ""}"#,
        );
        let r = record(&body);
        assert_eq!(
            (r.target.as_deref(), r.intent_id.as_deref()),
            (Some("INV-204"), None)
        );
        let body = refund("refund.updated", "succeeded").replace(
            r#""metadata": {"intent_id": "int-1042-a", "order_id": "1042"}"#,
            r#""metadata": {}"#,
        );
        assert_eq!(record(&body).target, None);
    }

    #[test]
    fn ignored_types() {
        for ty in [
            "charge.succeeded",
            "payment_intent.created",
            "charge.refunded",
            "customer.created",
        ] {
            let body = format!(
                r#"{{"id": "evt_1", "type": "{ty}", "data": {{"object": {{"id": "x"}}}}}}"#
            );
            assert_eq!(
                parse_event(body.as_bytes(), &w()),
                Ok(StripeOutcome::Ignored(ty.to_string()))
            );
        }
    }

    #[test]
    fn times_outside_the_bounds_are_refused_naming_the_field() {
        let base = refund("refund.updated", "succeeded");
        let cases = [
            (
                r#""created": 1761739260,"#,
                r#""created": 0,"#,
                "created",
                "1970-01-01T00:00:00.000000000Z is before 2000-01-01",
            ),
            (
                r#""created": 1761739260,"#,
                r#""created": 7258118400,"#,
                "created",
                "2200-01-01T00:00:00.000000000Z is after 2025-10-29T13:00:30.000000000Z",
            ),
            (
                r#""created": 1761739200,"#,
                r#""created": -86400,"#,
                "data.object.created",
                "1969-12-31T00:00:00.000000000Z is before",
            ),
        ];
        for (from, to, field, want) in cases {
            let body = base.replacen(from, to, 1);
            assert_ne!(body, base);
            let e = parse_event(body.as_bytes(), &w()).unwrap_err();
            assert!(
                matches!(&e, StripeError::Time { path, .. } if *path == field),
                "{e}"
            );
            assert!(
                e.to_string()
                    .starts_with(&format!("event field `{field}`: {want}")),
                "{e}"
            );
        }
        // An event an hour old (a retried delivery) is fine; one from a clock an hour ahead too.
        for secs in [T - 3600, T + 30 + 3600] {
            let body = base.replacen(
                r#""created": 1761739260,"#,
                &format!(r#""created": {secs},"#),
                1,
            );
            assert!(parse_event(body.as_bytes(), &w()).is_ok());
        }
    }

    #[test]
    fn errors_name_the_json_path() {
        let base = refund("refund.updated", "succeeded");
        let cases = [
            (
                base.replace(r#""status": "succeeded","#, ""),
                StripeError::MissingField("data.object.status".into()),
            ),
            (
                base.replace(r#""id": "re_3QK8ZbLkdIwHu7ix0hV7dJzN","#, r#""id": null,"#),
                StripeError::MissingField("data.object.id".into()),
            ),
            (
                base.replace(r#""currency": "usd","#, ""),
                StripeError::MissingField("data.object.currency".into()),
            ),
            (
                base.replace(r#""created": 1761739260,"#, ""),
                StripeError::MissingField("created".into()),
            ),
            (
                r#"{"data": {}}"#.to_string(),
                StripeError::MissingField("type".into()),
            ),
            (
                r#"{"type": "refund.created", "created": 1}"#.to_string(),
                StripeError::MissingField("data.object".into()),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(parse_event(body.as_bytes(), &w()), Err(want));
        }
        let e = parse_event(
            base.replace(r#""amount": 4500"#, r#""amount": "45.00""#)
                .as_bytes(),
            &w(),
        )
        .unwrap_err();
        assert!(
            matches!(&e, StripeError::WrongType { path, .. } if path == "data.object.amount"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "event field `data.object.amount`: expected an integer, got \"45.00\""
        );
        let e = parse_event(
            base.replace(r#""object": "refund""#, r#""object": "charge""#)
                .as_bytes(),
            &w(),
        )
        .unwrap_err();
        assert!(
            matches!(&e, StripeError::WrongType { path, .. } if path == "data.object.object"),
            "{e}"
        );
        assert!(matches!(
            parse_event(b"{\"type\": ", &w()),
            Err(StripeError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_event(b"[1]", &w()),
            Err(StripeError::WrongType { .. })
        ));
    }
}
