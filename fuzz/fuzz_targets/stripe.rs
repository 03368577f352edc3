//! Stripe webhooks: the first line of the input is the `Stripe-Signature` header, the rest the
//! body. Neither may panic; a body signed with the secret at the receive time must verify, and
//! any other header must not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reckon::ingest::stripe::{
    parse_event, sign, verify_signature, StripeOutcome, DEFAULT_TOLERANCE,
};
use reckon_fuzz::{window, NOW};

const SECRET: &str = "whsec_fuzz";

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let header = String::from_utf8_lossy(header);
    let now_secs = NOW.0 / 1_000_000_000;
    let good = sign(body, SECRET, now_secs);
    let verdict = verify_signature(&header, body, SECRET, NOW, DEFAULT_TOLERANCE);
    if verdict.is_ok() {
        // Only the right MAC passes: the fuzzer cannot forge one, so the header must carry it
        // (in either case of hex digits: the same bytes).
        let mac = good.split_once(",v1=").map(|(_, m)| m).unwrap_or_default();
        assert!(
            header.to_ascii_lowercase().contains(mac),
            "accepted a forged signature: {header:?}"
        );
    }
    assert_eq!(
        verify_signature(&good, body, SECRET, NOW, DEFAULT_TOLERANCE),
        Ok(())
    );
    assert!(verify_signature(&good, body, "whsec_other", NOW, DEFAULT_TOLERANCE).is_err());

    let w = window();
    if let Ok(StripeOutcome::Record { record, .. }) = parse_event(body, &w) {
        assert!(w.check(record.observed_at).is_ok(), "{record:?}");
        assert!(!record.object_id.is_empty(), "{record:?}");
    }
});
