//! The config file (`reckon.toml`): any text is settings or an error naming a line of it.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use reckon::config::file::{parse_file, ConfigFileError};
use reckon::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_file(Path::new("/etc/reckon/reckon.toml"), text) {
        Ok(file) => {
            let mut cfg = Config::default();
            file.apply(&mut cfg);
            assert!(cfg.max_request_bytes > 0 && cfg.max_concurrent_exports > 0);
        }
        Err(ConfigFileError::Invalid { line, .. }) => {
            assert!(line >= 1 && line <= text.lines().count() + 1, "line {line}");
        }
        Err(_) => {}
    }
});
