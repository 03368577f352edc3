//! The loader through its public functions: what loads, what a version follows, and the file,
//! line and field every refusal names.

use super::*;
use crate::contract::{Idempotency, ParamPointers};
use crate::model::Dur;

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
    let (line, field, msg) = invalid(&format!(
        "{MINIMAL}\n[[contract]]\nname = \"b\"\ntools = [\"u\", \"t\"]\nidempotency = \"none\"\n"
    ));
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
