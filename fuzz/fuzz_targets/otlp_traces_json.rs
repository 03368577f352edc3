//! OTLP/HTTP trace bodies in JSON, through reckon's tolerant decoder.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reckon::ingest::otlp::traces_from_json;
use reckon_fuzz::{check_decoded, CONTRACTS};

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = traces_from_json(data, &CONTRACTS) {
        check_decoded(d);
    }
});
