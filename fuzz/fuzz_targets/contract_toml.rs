//! Contract files (`contracts/*.toml`): any text is a list of contracts or an error naming a
//! line of that text.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use reckon::codec::ContractDoc;
use reckon::contract::{parse_contracts, ContractError, Contracts};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_contracts(Path::new("fuzz.toml"), text) {
        Ok(list) => {
            for c in &list {
                serde_json::to_string(&ContractDoc::from_contract(c))
                    .expect("a contract serializes");
            }
            let all = Contracts::new(list.clone());
            for c in &list {
                for t in &c.tools {
                    assert!(all.for_tool(t).is_some());
                }
            }
        }
        Err(ContractError::Invalid { line, .. }) => {
            assert!(line >= 1 && line <= text.lines().count() + 1, "line {line}");
        }
        Err(e) => panic!("parsing text did I/O: {e}"),
    }
});
