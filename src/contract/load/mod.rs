//! Loading `contracts/*.toml` (DESIGN.md "Contracts").
//!
//! A contract is a claim about a downstream that decides whether reckon tells an executor "retry"
//! or "escalate", so a typo must never silently become a default: unknown fields are errors, and
//! every error names the file, the line and the field so an operator can fix it at start-up.
//!
//! Parsing is two-staged. serde + `toml` check the shape (types, unknown and missing fields); the
//! raw fields are kept as `toml::Spanned` so the semantic checks that follow (durations, windows,
//! overlaps, duplicates across files) can still point at the exact line.
//!
//! The parts: `raw.rs` (the shape serde checks), `fields.rs` (one field at a time, and the
//! errors naming file, line and field), `sections.rs` (a contract section by section); here,
//! the files, the names and tools claimed across them, and the contract put together.

mod fields;
mod raw;
mod sections;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::Contract;
use crate::toml_source::{TomlFileError, TomlSource};
use fields::Src;
use raw::{RawContract, RawFile};
use sections::{Arguments, Identity, Keys, Limits, States, Statuses};

/// A contract file that cannot be read or does not hold a valid contract.
pub type ContractError = TomlFileError;

/// Names and tools already claimed, with where, so a second claim (in this file or an earlier
/// one) can name both places.
#[derive(Default)]
struct Registry {
    names: HashMap<String, (PathBuf, usize)>,
    tools: HashMap<String, (String, PathBuf, usize)>,
}

impl Registry {
    /// Claims the contract's name and tools. Only for a contract found valid as a whole: a
    /// refused one claims nothing.
    fn register(&mut self, src: &Src, r: &RawContract, name: &str, tools: &[String]) {
        let line = src.line(r.name.span().start);
        self.names
            .insert(name.to_string(), (src.0.file.to_path_buf(), line));
        for (tool, item) in tools.iter().zip(r.tools.get_ref()) {
            self.tools.insert(
                tool.clone(),
                (
                    name.to_string(),
                    src.0.file.to_path_buf(),
                    src.line(item.span().start),
                ),
            );
        }
    }
}

/// One `[[contract]]` table, its sections checked in file order, defaults from DESIGN.md's
/// example.
fn convert(
    src: &Src,
    raw: Spanned<RawContract>,
    reg: &mut Registry,
) -> Result<Contract, ContractError> {
    let at = raw.span();
    let r = raw.into_inner();
    let defaults = Contract::example("", "");

    let Identity {
        name,
        tools,
        record_kind,
    } = sections::identity(src, &r, reg)?;
    let Keys {
        idempotency,
        retry_margin,
        key_retention,
    } = sections::keys(src, &r, &at, &defaults)?;
    let Limits {
        max_in_flight,
        unknown_deadline,
        pending_deadline,
        orphan_grace,
        max_attempts,
    } = sections::limits(src, &r, &defaults)?;
    let States {
        success,
        failure,
        pending,
    } = sections::states(src, &r, &at, &defaults)?;
    let Statuses {
        not_executed,
        conflict,
    } = sections::statuses(src, &r, &at, &defaults)?;
    let Arguments {
        params,
        intent_id_pointer,
        idempotency_key_pointer,
        mismatch_errors,
    } = sections::arguments(src, &r)?;

    reg.register(src, &r, &name, &tools);

    Ok(Contract {
        name,
        tools,
        record_kind,
        idempotency,
        key_retention,
        retry_margin,
        max_in_flight,
        unknown_deadline,
        pending_deadline,
        max_attempts,
        success_states: success,
        failure_states: failure,
        pending_states: pending,
        not_executed_status: not_executed,
        conflict_status: conflict,
        params,
        intent_id_pointer,
        idempotency_key_pointer,
        mismatch_errors,
        orphan_grace,
        version: String::new(),
    }
    .versioned())
}

fn parse_with(file: &Path, text: &str, reg: &mut Registry) -> Result<Vec<Contract>, ContractError> {
    let src = Src(TomlSource { file, text });
    let raw: RawFile = toml::from_str(text).map_err(|e| src.toml_err(&e))?;
    raw.contract
        .into_iter()
        .map(|c| convert(&src, c, reg))
        .collect()
}

/// Parses one contract file's text. `file` is only used to name it in errors. Names and tools
/// must be unique within the file; `load_dir` also checks them across files.
pub fn parse_contracts(file: &Path, text: &str) -> Result<Vec<Contract>, ContractError> {
    parse_with(file, text, &mut Registry::default())
}

/// Loads every `*.toml` in `dir`, in file-name order (so errors and precedence are the same on
/// every machine). A missing or unreadable directory is an error naming it: running with no
/// contracts would audit nothing while looking healthy.
pub fn load_dir(dir: &Path) -> Result<Vec<Contract>, ContractError> {
    fn io(file: &Path) -> impl FnOnce(std::io::Error) -> ContractError + '_ {
        move |source| ContractError::Io {
            file: file.to_path_buf(),
            source,
        }
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    let mut reg = Registry::default();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(io(&file))?;
        out.extend(parse_with(&file, &text, &mut reg)?);
    }
    Ok(out)
}
