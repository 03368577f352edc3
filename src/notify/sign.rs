//! `Reckon-Signature: t={unix seconds},v1={hex HMAC-SHA256 of "t.body"}`: Stripe's scheme, so a
//! receiver can reuse what it already does for Stripe. The signed string is the decimal
//! timestamp, a dot, and the raw body bytes; the key is the webhook's secret as UTF-8 bytes. A
//! retry is signed again with its own `t` over the same body.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &str, t: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length: this cannot fail.
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// The `Reckon-Signature` header value for `body` sent at unix second `t`.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, t, body).finalize().into_bytes())
    )
}

/// Why a signature was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("malformed Reckon-Signature header")]
    Malformed,
    #[error("signature does not match")]
    Mismatch,
    #[error("timestamp {t} is more than {tolerance} s from now ({now})")]
    Stale { t: i64, now: i64, tolerance: i64 },
}

/// What a receiver does (the README's Python verifier is the same check): the header's `v1`
/// must be the HMAC of `t.body` (compared in constant time), and `t` within `tolerance` seconds
/// of `now`. For reckon's own tests and for receivers written in Rust.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance: i64,
) -> Result<(), SignatureError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = Some(v.parse::<i64>().map_err(|_| SignatureError::Malformed)?),
            Some(("v1", v)) => v1.push(v),
            _ => {}
        }
    }
    let t = t.ok_or(SignatureError::Malformed)?;
    if v1.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let ok = v1.iter().any(|v| match hex::decode(v) {
        Ok(bytes) => mac(secret, t, body).verify_slice(&bytes).is_ok(),
        Err(_) => false,
    });
    if !ok {
        return Err(SignatureError::Mismatch);
    }
    if now.saturating_sub(t).saturating_abs() > tolerance {
        return Err(SignatureError::Stale { t, now, tolerance });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_independent_hmac() {
        // printf '%s' '1761739200.{"id":"x"}' | openssl dgst -sha256 -hmac 'whsec_reckon'
        assert_eq!(
            sign("whsec_reckon", 1_761_739_200, br#"{"id":"x"}"#),
            "t=1761739200,v1=d2dc19e881e79c72889335058de62fc9cfc403cca454253714a6eb5f1a80bea0"
        );
    }

    #[test]
    fn verifies_what_it_signs_and_nothing_else() {
        let body = br#"{"id":"esc_1:1:hook","type":"escalation.opened"}"#;
        let h = sign("s3cret", 1_000, body);
        assert_eq!(verify("s3cret", &h, body, 1_010, 300), Ok(()));
        assert_eq!(
            verify("other", &h, body, 1_010, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("s3cret", &h, b"{}", 1_010, 300),
            Err(SignatureError::Mismatch)
        );
        assert!(matches!(
            verify("s3cret", &h, body, 2_000, 300),
            Err(SignatureError::Stale { .. })
        ));
        // The timestamp is signed: moving it breaks the signature.
        let moved = h.replacen("t=1000", "t=1001", 1);
        assert_eq!(
            verify("s3cret", &moved, body, 1_010, 300),
            Err(SignatureError::Mismatch)
        );
        for bad in [
            "",
            "t=x,v1=00",
            "v1=00",
            "t=1000",
            "t=1000,v1=zz",
            "t=-9223372036854775808,v1=00",
        ] {
            assert!(verify("s3cret", bad, body, 1_000, 300).is_err(), "{bad}");
        }
    }
}
