//! OTLP log bodies in protobuf: downstream records sent as log records.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reckon::ingest::otlp::logs_from_protobuf_bytes;
use reckon_fuzz::check_decoded;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = logs_from_protobuf_bytes(data) {
        check_decoded(d);
    }
});
