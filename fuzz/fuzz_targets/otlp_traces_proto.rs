//! OTLP/HTTP trace bodies in protobuf (`application/x-protobuf`), as `:4318` decodes them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reckon::ingest::otlp::traces_from_protobuf_bytes;
use reckon_fuzz::{check_decoded, CONTRACTS};

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = traces_from_protobuf_bytes(data, &CONTRACTS) {
        check_decoded(d);
    }
});
