//! Loading `contracts/*.toml` (DESIGN.md "Contracts").
//!
//! A contract is a claim about a downstream that decides whether reckon tells an executor "retry"
//! or "escalate", so a typo must never silently become a default: unknown fields are errors, and
//! every error names the file, the line and the field so an operator can fix it at start-up.
//!
//! Parsing is two-staged. serde + `toml` check the shape (types, unknown and missing fields); the
//! raw fields are kept as `toml::Spanned` so the semantic checks that follow (durations, windows,
//! overlaps, duplicates across files) can still point at the exact line.

use super::{default_mismatch_errors, Contract, Idempotency, ParamPointers};
use crate::model::Dur;
use crate::toml_source::{TomlFileError, TomlSource};
use serde::Deserialize;
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A contract file that cannot be read or does not hold a valid contract.
pub type ContractError = TomlFileError;

// ---------------------------------------------------------------------------------------------
// Durations
// ---------------------------------------------------------------------------------------------

/// Parses `90s`, `15m`, `24h`, `500ms`, `2d` and compounds such as `1h30m` (units largest first,
/// each at most once, so `30m1h` or `1h1h` are rejected as likely typos). Also `ns` and `us`.
/// Returns `None` for anything else, including a bare number: a contract window without a unit
/// is ambiguous, and guessing seconds vs. milliseconds is exactly the mistake to avoid.
pub fn parse_duration(s: &str) -> Option<Dur> {
    // Ordered largest first; the rank enforces "largest first, once each" in compounds.
    const UNITS: [(&str, i64); 7] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ];
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total: i64 = 0;
    let mut last_rank: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let rank = UNITS.iter().position(|(u, _)| *u == unit)?;
        if last_rank.is_some_and(|r| rank <= r) {
            return None;
        }
        last_rank = Some(rank);
        total = total.checked_add(n.checked_mul(UNITS[rank].1)?)?;
    }
    Some(Dur(total))
}

// ---------------------------------------------------------------------------------------------
// Raw shape (what serde checks)
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    // A file with only comments is allowed: it is how an operator parks a contract.
    #[serde(default)]
    contract: Vec<Spanned<RawContract>>,
}

type SList = Spanned<Vec<Spanned<String>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContract {
    name: Spanned<String>,
    tools: SList,
    record_kind: Option<Spanned<String>>,
    idempotency: Option<Spanned<String>>,
    key_retention: Option<Spanned<String>>,
    retry_margin: Option<Spanned<String>>,
    max_in_flight: Option<Spanned<String>>,
    unknown_deadline: Option<Spanned<String>>,
    pending_deadline: Option<Spanned<String>>,
    // i64 rather than u32 so a negative or zero value gets our message, not a serde one.
    max_attempts: Option<Spanned<i64>>,
    success_states: Option<SList>,
    failure_states: Option<SList>,
    pending_states: Option<SList>,
    not_executed_status: Option<Spanned<Vec<Spanned<i64>>>>,
    conflict_status: Option<Spanned<Vec<Spanned<i64>>>>,
    params: Option<RawParams>,
    intent_id: Option<Spanned<String>>,
    idempotency_key: Option<Spanned<String>>,
    mismatch_errors: Option<SList>,
    orphan_grace: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParams {
    amount: Option<Spanned<String>>,
    currency: Option<Spanned<String>>,
    target: Option<Spanned<String>>,
}

// ---------------------------------------------------------------------------------------------
// Error helpers
// ---------------------------------------------------------------------------------------------

/// The file being parsed, for errors that name file, line and field.
struct Src<'a>(TomlSource<'a>);

impl Src<'_> {
    fn line(&self, offset: usize) -> usize {
        self.0.line(offset)
    }

    fn err(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> ContractError {
        ContractError::Invalid {
            file: self.0.file.to_path_buf(),
            line: self.line(span.start),
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn toml_err(&self, e: &toml::de::Error) -> ContractError {
        let p = self.0.locate(e, Some("contract"));
        ContractError::Invalid {
            file: self.0.file.to_path_buf(),
            line: p.line,
            field: p.field,
            message: p.message,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Semantic checks
// ---------------------------------------------------------------------------------------------

/// Names and tools already claimed, with where, so a second claim (in this file or an earlier
/// one) can name both places.
#[derive(Default)]
struct Registry {
    names: HashMap<String, (PathBuf, usize)>,
    tools: HashMap<String, (String, PathBuf, usize)>,
}

fn duration(src: &Src, field: &str, v: &Spanned<String>) -> Result<Dur, ContractError> {
    match parse_duration(v.get_ref()) {
        Some(d) => Ok(d),
        None => Err(src.err(
            v.span(),
            field,
            format!("invalid duration {:?}: expected e.g. \"90s\", \"15m\", \"24h\", \"500ms\", \"2d\" or \"1h30m\"", v.get_ref()),
        )),
    }
}

fn positive_duration(src: &Src, field: &str, v: &Spanned<String>) -> Result<Dur, ContractError> {
    let d = duration(src, field, v)?;
    if d.0 <= 0 {
        return Err(src.err(v.span(), field, "must be longer than zero"));
    }
    Ok(d)
}

fn opt_duration(
    src: &Src,
    field: &str,
    v: &Option<Spanned<String>>,
    default: Dur,
) -> Result<Dur, ContractError> {
    v.as_ref().map_or(Ok(default), |v| duration(src, field, v))
}

fn opt_positive(
    src: &Src,
    field: &str,
    v: &Option<Spanned<String>>,
    default: Dur,
) -> Result<Dur, ContractError> {
    v.as_ref()
        .map_or(Ok(default), |v| positive_duration(src, field, v))
}

fn non_empty(src: &Src, field: &str, v: &Spanned<String>) -> Result<String, ContractError> {
    let s = v.get_ref().trim();
    if s.is_empty() {
        return Err(src.err(v.span(), field, "must not be empty"));
    }
    Ok(s.to_string())
}

/// A string list, each entry non-empty and listed once.
fn string_list(src: &Src, field: &str, list: &SList) -> Result<Vec<String>, ContractError> {
    let mut out: Vec<String> = Vec::with_capacity(list.get_ref().len());
    for item in list.get_ref() {
        let s = non_empty(src, field, item)?;
        if out.contains(&s) {
            return Err(src.err(item.span(), field, format!("{s:?} is listed twice")));
        }
        out.push(s);
    }
    Ok(out)
}

fn status_list(
    src: &Src,
    field: &str,
    list: &Option<Spanned<Vec<Spanned<i64>>>>,
    default: &[u16],
) -> Result<(Vec<u16>, Vec<Range<usize>>), ContractError> {
    let Some(list) = list else {
        return Ok((default.to_vec(), Vec::new()));
    };
    let mut out = Vec::new();
    let mut spans = Vec::new();
    for item in list.get_ref() {
        let code = *item.get_ref();
        if !(100..=599).contains(&code) {
            return Err(src.err(
                item.span(),
                field,
                format!("HTTP status {code} is outside 100..=599"),
            ));
        }
        if !out.contains(&(code as u16)) {
            out.push(code as u16);
            spans.push(item.span());
        }
    }
    Ok((out, spans))
}

/// RFC 6901: empty (the whole document) or `/`-separated tokens where `~` only escapes `0`/`1`.
fn pointer(
    src: &Src,
    field: &str,
    v: &Option<Spanned<String>>,
) -> Result<Option<String>, ContractError> {
    let Some(v) = v else { return Ok(None) };
    let p = v.get_ref();
    if !p.is_empty() && !p.starts_with('/') {
        return Err(src.err(
            v.span(),
            field,
            format!("JSON pointer {p:?} must start with '/' (e.g. \"/{p}\") or be empty"),
        ));
    }
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(src.err(
                v.span(),
                field,
                format!("JSON pointer {p:?}: '~' must be followed by 0 or 1"),
            ));
        }
    }
    Ok(Some(p.clone()))
}

/// States the three lists share would make an object both done and not done.
fn check_state_overlap(
    src: &Src,
    lists: [(&str, &Option<SList>, &Vec<String>); 3],
) -> Result<(), ContractError> {
    for (i, (field, raw, _)) in lists.iter().enumerate() {
        let Some(raw) = raw else { continue };
        for item in raw.get_ref() {
            let s = item.get_ref().trim();
            for (j, (other, _, values)) in lists.iter().enumerate() {
                if i != j && values.iter().any(|v| v == s) {
                    return Err(src.err(
                        item.span(),
                        field,
                        format!("state {s:?} is also listed in {other}: a state is success, failure or pending, not two"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn convert(
    src: &Src,
    raw: Spanned<RawContract>,
    reg: &mut Registry,
) -> Result<Contract, ContractError> {
    let at = raw.span();
    let r = raw.into_inner();
    let example = Contract::example("", "");

    let name = non_empty(src, "name", &r.name)?;
    if let Some((file, line)) = reg.names.get(&name) {
        return Err(src.err(
            r.name.span(),
            "name",
            format!(
                "duplicate contract name {name:?} (first defined at {}:{line})",
                file.display()
            ),
        ));
    }

    if r.tools.get_ref().is_empty() {
        return Err(src.err(r.tools.span(), "tools", "must list at least one tool"));
    }
    let tools = string_list(src, "tools", &r.tools)?;
    for (tool, item) in tools.iter().zip(r.tools.get_ref()) {
        if let Some((owner, file, line)) = reg.tools.get(tool) {
            return Err(src.err(
                item.span(),
                "tools",
                format!(
                    "tool {tool:?} is already covered by contract {owner:?} ({}:{line}): a tool has one contract",
                    file.display()
                ),
            ));
        }
    }

    let record_kind = r
        .record_kind
        .as_ref()
        .map(|k| non_empty(src, "record_kind", k))
        .transpose()?;

    let idempotency = match &r.idempotency {
        None => example.idempotency,
        Some(v) => match v.get_ref().as_str() {
            "replay" => Idempotency::Replay,
            "converge" => Idempotency::Converge,
            "none" => Idempotency::None,
            other => {
                return Err(src.err(
                    v.span(),
                    "idempotency",
                    format!(
                        "unknown value {other:?}: expected \"replay\", \"converge\" or \"none\""
                    ),
                ))
            }
        },
    };

    let retry_margin = opt_duration(src, "retry_margin", &r.retry_margin, example.retry_margin)?;
    let key_retention = match (&r.key_retention, idempotency) {
        (Some(v), Idempotency::None) => {
            return Err(src.err(
                v.span(),
                "key_retention",
                "the downstream keeps no keys with idempotency = \"none\": remove key_retention",
            ))
        }
        (None, Idempotency::None) => None,
        (None, _) => {
            return Err(src.err(
                at,
                "key_retention",
                "required unless idempotency = \"none\": how long the downstream keeps a key bounds every safe retry",
            ))
        }
        (Some(v), _) => {
            let kr = positive_duration(src, "key_retention", v)?;
            if retry_margin >= kr {
                let span = r.retry_margin.as_ref().map_or(v.span(), |m| m.span());
                let which = if r.retry_margin.is_some() { "" } else { " (the default)" };
                return Err(src.err(
                    span,
                    "retry_margin",
                    format!(
                        "retry_margin {retry_margin}{which} must be shorter than key_retention {kr}: no retry would ever be safe"
                    ),
                ));
            }
            Some(kr)
        }
    };

    let max_in_flight = r
        .max_in_flight
        .as_ref()
        .map(|v| positive_duration(src, "max_in_flight", v))
        .transpose()?;
    let unknown_deadline = opt_positive(
        src,
        "unknown_deadline",
        &r.unknown_deadline,
        example.unknown_deadline,
    )?;
    let pending_deadline = opt_positive(
        src,
        "pending_deadline",
        &r.pending_deadline,
        example.pending_deadline,
    )?;
    let orphan_grace = opt_duration(src, "orphan_grace", &r.orphan_grace, example.orphan_grace)?;

    let max_attempts = match &r.max_attempts {
        None => None,
        Some(v) => match u32::try_from(*v.get_ref()) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(src.err(
                    v.span(),
                    "max_attempts",
                    format!("must be between 1 and {}", u32::MAX),
                ))
            }
        },
    };

    let states = |field: &str,
                  raw: &Option<SList>,
                  default: Vec<String>|
     -> Result<Vec<String>, ContractError> {
        raw.as_ref()
            .map_or(Ok(default), |l| string_list(src, field, l))
    };
    let success_states = states("success_states", &r.success_states, example.success_states)?;
    if success_states.is_empty() {
        let span = r.success_states.as_ref().map_or(at.clone(), |l| l.span());
        return Err(src.err(
            span,
            "success_states",
            "must list at least one state: otherwise nothing ever completes",
        ));
    }
    let failure_states = states("failure_states", &r.failure_states, example.failure_states)?;
    let pending_states = states("pending_states", &r.pending_states, example.pending_states)?;
    check_state_overlap(
        src,
        [
            ("success_states", &r.success_states, &success_states),
            ("failure_states", &r.failure_states, &failure_states),
            ("pending_states", &r.pending_states, &pending_states),
        ],
    )?;

    let (not_executed_status, ne_spans) = status_list(
        src,
        "not_executed_status",
        &r.not_executed_status,
        &example.not_executed_status,
    )?;
    let (conflict_status, cf_spans) = status_list(
        src,
        "conflict_status",
        &r.conflict_status,
        &example.conflict_status,
    )?;
    // A code in both lists would be "did not run" and "still running" at once. Point at the
    // explicitly written one (the other may be a default).
    for (i, code) in conflict_status.iter().enumerate() {
        if not_executed_status.contains(code) {
            let (field, span) = match (
                cf_spans.get(i),
                ne_spans
                    .iter()
                    .zip(&not_executed_status)
                    .find(|(_, c)| *c == code),
            ) {
                (Some(s), _) => ("conflict_status", s.clone()),
                (None, Some((s, _))) => ("not_executed_status", s.clone()),
                (None, None) => ("conflict_status", at.clone()),
            };
            return Err(src.err(
                span,
                field,
                format!("HTTP status {code} is in both not_executed_status and conflict_status"),
            ));
        }
    }

    let params = match &r.params {
        None => ParamPointers::default(),
        Some(p) => ParamPointers {
            amount: pointer(src, "params.amount", &p.amount)?,
            currency: pointer(src, "params.currency", &p.currency)?,
            target: pointer(src, "params.target", &p.target)?,
        },
    };
    let intent_id_pointer = pointer(src, "intent_id", &r.intent_id)?;
    let idempotency_key_pointer = pointer(src, "idempotency_key", &r.idempotency_key)?;
    let mismatch_errors = match &r.mismatch_errors {
        None => default_mismatch_errors(),
        Some(l) => string_list(src, "mismatch_errors", l)?,
    };

    // Register only once the whole contract is valid.
    let line = src.line(r.name.span().start);
    reg.names
        .insert(name.clone(), (src.0.file.to_path_buf(), line));
    for (tool, item) in tools.iter().zip(r.tools.get_ref()) {
        reg.tools.insert(
            tool.clone(),
            (
                name.clone(),
                src.0.file.to_path_buf(),
                src.line(item.span().start),
            ),
        );
    }

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
        success_states,
        failure_states,
        pending_states,
        not_executed_status,
        conflict_status,
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

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[[contract]]
name = "a"
tools = ["t"]
key_retention = "24h"
"#;

    fn invalid(text: &str) -> (usize, String, String) {
        match parse_contracts(Path::new("contracts/x.toml"), text) {
            Err(ContractError::Invalid {
                file,
                line,
                field,
                message,
            }) => {
                assert_eq!(file, Path::new("contracts/x.toml"));
                (line, field, message)
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn manifest_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Some(Dur::secs(90)));
        assert_eq!(parse_duration("15m"), Some(Dur::minutes(15)));
        assert_eq!(parse_duration("24h"), Some(Dur::hours(24)));
        assert_eq!(parse_duration("500ms"), Some(Dur::millis(500)));
        assert_eq!(parse_duration("2d"), Some(Dur::hours(48)));
        assert_eq!(parse_duration("1h30m"), Some(Dur::minutes(90)));
        assert_eq!(parse_duration("1m30s500ms"), Some(Dur::millis(90_500)));
        assert_eq!(parse_duration(" 0s "), Some(Dur(0)));
        assert_eq!(parse_duration("250us"), Some(Dur(250_000)));
        for bad in [
            "",
            "90",
            "s",
            "1.5h",
            "-5m",
            "5 m",
            "30m1h",
            "1h1h",
            "5x",
            "1h30",
            "99999999999999999999d",
            "9999999999d",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn minimal_gets_defaults() {
        let cs = parse_contracts(Path::new("m.toml"), MINIMAL).unwrap();
        let mut want = Contract::example("a", "t");
        want.max_in_flight = None;
        want.max_attempts = None;
        assert_eq!(cs, vec![want.versioned()]);
    }

    #[test]
    fn design_example_loads() {
        let text = r#"
[[contract]]
name = "payments.refund"
tools = ["issue_refund"]
record_kind = "refund"
idempotency = "replay"
key_retention = "24h"
retry_margin = "1h"
max_in_flight = "60s"
unknown_deadline = "15m"
pending_deadline = "2h"
max_attempts = 5
success_states = ["succeeded"]
failure_states = ["failed", "canceled"]
pending_states = ["pending", "requires_action"]
not_executed_status = [400, 401, 403, 404, 422, 429]
conflict_status = [409]
intent_id = "/intent_id"
idempotency_key = "/idempotency_key"
mismatch_errors = ["idempotency_error"]
orphan_grace = "5m"
[contract.params]
amount = "/amount"
currency = "/currency"
target = "/order_id"
"#;
        let c = parse_contracts(Path::new("e.toml"), text)
            .unwrap()
            .remove(0);
        let mut want = Contract::example("payments.refund", "issue_refund");
        want.record_kind = Some("refund".into());
        want.params = ParamPointers {
            amount: Some("/amount".into()),
            currency: Some("/currency".into()),
            target: Some("/order_id".into()),
        };
        want.intent_id_pointer = Some("/intent_id".into());
        want.idempotency_key_pointer = Some("/idempotency_key".into());
        want.mismatch_errors = vec!["idempotency_error".into()];
        want.orphan_grace = Dur::minutes(5);
        assert_eq!(c, want.versioned());
    }

    /// A contract's version is a function of what it says: pinned here, so a change to the
    /// canonical form (which would re-version every contract of every deployment) is a
    /// deliberate edit of this test, not an accident. The same on every machine: SHA-256 of
    /// text built from the loaded values, nothing process-local (no std hasher, no map order).
    #[test]
    fn the_version_is_a_stable_hash_of_the_content() {
        let c = Contract::example("payments.refund", "issue_refund");
        // Computed independently (Python's hashlib over the same canonical text) when pinned.
        assert_eq!(c.version, "1221e338fd7b41cd");
        assert_eq!(c.version.len(), crate::contract::VERSION_LEN);
        assert_eq!(c.content_version(), c.version);
        let shipped = load_dir(&manifest_dir().join("contracts")).unwrap();
        let versions: Vec<&str> = shipped.iter().map(|c| c.version.as_str()).collect();
        let again = load_dir(&manifest_dir().join("contracts")).unwrap();
        assert_eq!(
            versions,
            again.iter().map(|c| c.version.as_str()).collect::<Vec<_>>(),
            "loading again gives the same versions"
        );
        let mut unique = versions.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            versions.len(),
            "each shipped contract its own"
        );
    }

    /// Layout, comments, field order, the order of set-like lists, defaults written out or
    /// left implicit, and the file's name change nothing; every edit that can change a verdict
    /// changes the version.
    #[test]
    fn the_version_follows_meaning_not_layout() {
        let version = |file: &str, text: &str| {
            parse_contracts(Path::new(file), text)
                .unwrap_or_else(|e| panic!("{e}"))
                .remove(0)
                .version
        };
        let base = version("a.toml", MINIMAL);
        let same = [
            "# a comment\n[[contract]]\nkey_retention = \"24h\"  # kept a day\ntools = [\"t\"]\nname = \"a\"\n",
            "[[contract]]\nname = \"a\"\ntools = [\"t\"]\nkey_retention = \"1d\"\n",
            "[[contract]]\nname = \"a\"\ntools = [\"t\"]\nkey_retention = \"23h60m\"\n",
            "[[contract]]\nname = \"a\"\ntools = [\"t\"]\nkey_retention = \"24h\"\nretry_margin = \"1h\"\nidempotency = \"replay\"\nfailure_states = [\"canceled\", \"failed\"]\nnot_executed_status = [429, 400, 401, 403, 404, 422]\n",
        ];
        for text in same {
            assert_eq!(version("b/other.toml", text), base, "{text}");
        }
        let edits = [
            "max_attempts = 1\n",
            "max_attempts = 5\n",
            "key_retention_x = 1\n",
            "retry_margin = \"2h\"\n",
            "max_in_flight = \"60s\"\n",
            "failure_states = [\"failed\"]\n",
            "pending_states = [\"pending\"]\n",
            "conflict_status = [409, 425]\n",
            "idempotency = \"converge\"\n",
            "record_kind = \"refund\"\n",
            "orphan_grace = \"11m\"\n",
            "intent_id = \"/intent\"\n",
            "mismatch_errors = [\"idempotency_error\"]\n",
            "[contract.params]\namount = \"/amount\"\n",
        ];
        let mut seen = vec![base.clone()];
        for extra in edits {
            let text = format!("{MINIMAL}{extra}");
            if extra.starts_with("key_retention_x") {
                assert!(parse_contracts(Path::new("a.toml"), &text).is_err());
                continue;
            }
            let v = version("a.toml", &text);
            assert!(!seen.contains(&v), "{extra:?} gave a version seen before");
            seen.push(v);
        }
        let renamed = MINIMAL.replace("name = \"a\"", "name = \"b\"");
        assert_ne!(version("a.toml", &renamed), base);
        let more_tools = MINIMAL.replace("[\"t\"]", "[\"t\", \"u\"]");
        let reordered = MINIMAL.replace("[\"t\"]", "[\"u\", \"t\"]");
        assert_ne!(version("a.toml", &more_tools), base);
        assert_eq!(
            version("a.toml", &more_tools),
            version("a.toml", &reordered)
        );
    }

    /// A contract changed field by field (as tests and embedders do) is versioned by what it
    /// says once it is put in a set.
    #[test]
    fn a_set_versions_what_its_contracts_say() {
        let example = Contract::example("payments.refund", "issue_refund");
        let mut strict = example.clone();
        strict.max_attempts = Some(1);
        assert_eq!(strict.version, example.version, "stale until versioned");
        let set = crate::contract::Contracts::new(vec![strict.clone()]);
        assert_ne!(set.contracts[0].version, example.version);
        assert_eq!(set.contracts[0].version, strict.content_version());
    }

    #[test]
    fn shipped_files_load() {
        let dir = manifest_dir().join("contracts");
        for (file, n) in [("refunds.toml", 2), ("drafts.toml", 1), ("email.toml", 1)] {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let cs = parse_contracts(&path, &text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(cs.len(), n, "{file}");
        }
        let all = load_dir(&dir).unwrap();
        let set = super::super::Contracts::new(all);
        let refund = set.for_tool("issue_refund").unwrap();
        assert_eq!(refund.name, "payments.refund");
        assert_eq!(refund.record_kind.as_deref(), Some("refund"));
        assert_eq!(refund.idempotency, Idempotency::Replay);
        assert_eq!(refund.key_retention, Some(Dur::hours(24)));
        assert_eq!(refund.retry_margin, Dur::hours(1));
        assert_eq!(refund.max_in_flight, Some(Dur::secs(60)));
        assert_eq!(refund.params.target.as_deref(), Some("/order_id"));
        let draft = set.for_tool("create_bill_draft").unwrap();
        assert_eq!(draft.record_kind.as_deref(), Some("draft"));
        assert_eq!(draft.params.target.as_deref(), Some("/supplier"));
        assert!(draft.key_retention.is_some());
        let email = set.for_tool("send_email").unwrap();
        assert_eq!(email.idempotency, Idempotency::None);
        assert_eq!(email.key_retention, None);
        assert_eq!(email.record_kind.as_deref(), Some("email"));
        assert_eq!(set.for_record_kind("draft").unwrap().name, draft.name);
        // Stripe API v2 beside v1: converging retries, keys kept 30 days, the same refund
        // objects; a record with no intent and no known key is judged under v1.
        let v2 = set.for_tool("issue_refund_v2").unwrap();
        assert_eq!(v2.name, "payments.refund_v2");
        assert_eq!(v2.idempotency, Idempotency::Converge);
        assert_eq!(v2.key_retention, Some(Dur::hours(24 * 30)));
        assert_eq!(v2.record_kind.as_deref(), Some("refund"));
        assert_eq!(
            set.for_record_kind("refund").unwrap().name,
            "payments.refund"
        );
    }

    #[test]
    fn syntax_error_names_line_and_key() {
        let (line, field, msg) = invalid("[[contract]]\nname = \"a\ntools = [\"t\"]\n");
        assert_eq!(line, 2, "{msg}");
        assert_eq!(field, "name");
    }

    #[test]
    fn unknown_field_is_an_error() {
        let (line, field, msg) = invalid(&format!("{MINIMAL}retention = \"24h\"\n"));
        assert_eq!((line, field.as_str()), (6, "retention"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");

        let (line, field, _) = invalid(&format!(
            "{MINIMAL}[contract.params]\namount = \"/a\"\ntraget = \"/t\"\n"
        ));
        assert_eq!((line, field.as_str()), (8, "params.traget"));

        let (line, field, _) = invalid("[[contracts]]\nname = \"a\"\n");
        assert_eq!((line, field.as_str()), (1, "contracts"));
    }

    #[test]
    fn wrong_type_names_field() {
        let (line, field, msg) = invalid(&format!("{MINIMAL}max_attempts = \"five\"\n"));
        assert_eq!((line, field.as_str()), (6, "max_attempts"), "{msg}");
        let (line, field, msg) = invalid(&format!(
            "{MINIMAL}success_states = [\n  \"ok\",\n  3,\n]\n"
        ));
        assert_eq!((line, field.as_str()), (8, "success_states"), "{msg}");
        let (line, field, _) =
            invalid("[[contract]]\nname = \"a\"\ntools = \"t\"\nkey_retention = \"1h\"\n");
        assert_eq!((line, field.as_str()), (3, "tools"));
    }

    #[test]
    fn missing_required_field() {
        let (line, field, msg) = invalid("\n[[contract]]\nname = \"a\"\nkey_retention = \"1h\"\n");
        assert_eq!(field, "tools", "{msg}");
        assert!(line == 2 || line == 3, "line {line}: {msg}");
        let (line, field, _) = invalid("\n[[contract]]\nname = \"a\"\ntools = [\"t\"]\n");
        assert_eq!((line, field.as_str()), (2, "key_retention"));
    }

    #[test]
    fn semantic_errors_name_exact_line() {
        let cases: &[(&str, usize, &str, &str)] = &[
            (
                "unknown_deadline = \"15 minutes\"",
                6,
                "unknown_deadline",
                "invalid duration",
            ),
            (
                "idempotency = \"at_most_once\"",
                6,
                "idempotency",
                "unknown value",
            ),
            (
                "retry_margin = \"24h\"",
                6,
                "retry_margin",
                "shorter than key_retention",
            ),
            (
                "max_in_flight = \"0s\"",
                6,
                "max_in_flight",
                "longer than zero",
            ),
            ("max_attempts = 0", 6, "max_attempts", "between 1"),
            (
                "not_executed_status = [400, 99]",
                6,
                "not_executed_status",
                "outside 100..=599",
            ),
            ("conflict_status = [600]", 6, "conflict_status", "outside"),
            ("conflict_status = [409, 422]", 6, "conflict_status", "both"),
            (
                "failure_states = [\"failed\",\n \"succeeded\"]",
                7,
                "failure_states",
                "also listed in success_states",
            ),
            (
                "pending_states = [\"pending\", \"pending\"]",
                6,
                "pending_states",
                "twice",
            ),
            ("success_states = []", 6, "success_states", "at least one"),
            (
                "intent_id = \"intent_id\"",
                6,
                "intent_id",
                "must start with '/'",
            ),
            ("idempotency_key = \"/a~2b\"", 6, "idempotency_key", "'~'"),
        ];
        for (extra, want_line, want_field, want_msg) in cases {
            let (line, field, msg) = invalid(&format!("{MINIMAL}{extra}\n"));
            assert_eq!(
                (line, field.as_str()),
                (*want_line, *want_field),
                "{extra}: {msg}"
            );
            assert!(msg.contains(want_msg), "{extra}: {msg}");
        }
        let (line, field, _) = invalid(&format!(
            "{MINIMAL}[contract.params]\ntarget = \"order_id\"\n"
        ));
        assert_eq!((line, field.as_str()), (7, "params.target"));
        // The default margin (1h) against a short retention: pointed at key_retention's line.
        let (line, field, msg) =
            invalid("[[contract]]\nname = \"a\"\ntools = [\"t\"]\nkey_retention = \"30m\"\n");
        assert_eq!((line, field.as_str()), (4, "retry_margin"));
        assert!(msg.contains("default"), "{msg}");
        // A retention claimed for a downstream without keys.
        let (line, field, _) =
            invalid("[[contract]]\nname = \"a\"\ntools = [\"t\"]\nidempotency = \"none\"\nkey_retention = \"1h\"\n");
        assert_eq!((line, field.as_str()), (5, "key_retention"));
        let (line, field, _) =
            invalid("[[contract]]\nname = \" \"\ntools = [\"t\"]\nkey_retention = \"1h\"\n");
        assert_eq!((line, field.as_str()), (2, "name"));
        let (line, field, _) =
            invalid("[[contract]]\nname = \"a\"\ntools = []\nkey_retention = \"1h\"\n");
        assert_eq!((line, field.as_str()), (3, "tools"));
    }

    #[test]
    fn duplicates_within_a_file() {
        let (line, field, msg) = invalid(&format!("{MINIMAL}\n[[contract]]\nname = \"b\"\ntools = [\"u\", \"t\"]\nidempotency = \"none\"\n"));
        assert_eq!((line, field.as_str()), (9, "tools"), "{msg}");
        assert!(msg.contains("\"a\""), "{msg}");
        let (line, field, _) = invalid(&format!(
            "{MINIMAL}\n[[contract]]\nname = \"a\"\ntools = [\"u\"]\nidempotency = \"none\"\n"
        ));
        assert_eq!((line, field.as_str()), (8, "name"));
    }

    #[test]
    fn load_dir_checks_across_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.toml"), MINIMAL).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        std::fs::write(
            dir.path().join("b.toml"),
            "# second file\n[[contract]]\nname = \"b\"\ntools = [\"t\"]\nidempotency = \"none\"\n",
        )
        .unwrap();
        match load_dir(dir.path()) {
            Err(ContractError::Invalid {
                file,
                line,
                field,
                message,
            }) => {
                assert_eq!(file, dir.path().join("b.toml"));
                assert_eq!((line, field.as_str()), (4, "tools"));
                assert!(message.contains("a.toml:4"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::write(
            dir.path().join("b.toml"),
            "[[contract]]\nname = \"b\"\ntools = [\"u\"]\nidempotency = \"none\"\n",
        )
        .unwrap();
        let names: Vec<_> = load_dir(dir.path())
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn missing_dir_is_named() {
        let err = load_dir(Path::new("/nonexistent/reckon-contracts")).unwrap_err();
        assert!(
            matches!(&err, ContractError::Io { file, .. } if file == Path::new("/nonexistent/reckon-contracts"))
        );
        assert!(err.to_string().contains("/nonexistent/reckon-contracts"));
    }

    #[test]
    fn empty_file_has_no_contracts() {
        assert_eq!(
            parse_contracts(Path::new("e.toml"), "# parked\n").unwrap(),
            vec![]
        );
    }
}
