//! OTLP log bodies in JSON.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reckon::ingest::otlp::logs_from_json;
use reckon_fuzz::check_decoded;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = logs_from_json(data) {
        check_decoded(d);
    }
});
