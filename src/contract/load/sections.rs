//! One contract, section by section, in the order a contract file reads (DESIGN.md
//! "Contracts"): who it is, its keys, its limits in time and attempts, the states of the
//! downstream's objects, the HTTP statuses it promises, and where the tool's arguments hold
//! what reckon compares. Each section checks its fields in a fixed order and returns the first
//! error, so which error a file with several gets never changes.
//!
//! `at` is the span of the whole `[[contract]]` table: where an error points when the field it
//! is about was left out.

use std::ops::Range;

use super::fields::{
    non_empty, opt_duration, opt_positive, pointer, positive_duration, status_list, string_list,
    Src,
};
use super::raw::{RawContract, SList};
use super::{ContractError, Registry};
use crate::contract::{default_mismatch_errors, Contract, Idempotency, ParamPointers};
use crate::model::Dur;

/// Who the contract is: a name and tools no earlier contract claimed.
pub(super) struct Identity {
    pub(super) name: String,
    pub(super) tools: Vec<String>,
    pub(super) record_kind: Option<String>,
}

pub(super) fn identity(
    src: &Src,
    r: &RawContract,
    reg: &Registry,
) -> Result<Identity, ContractError> {
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
    Ok(Identity {
        name,
        tools,
        record_kind,
    })
}

/// What the downstream does with a key, and the window in which a same-key retry is safe.
pub(super) struct Keys {
    pub(super) idempotency: Idempotency,
    pub(super) retry_margin: Dur,
    pub(super) key_retention: Option<Dur>,
}

pub(super) fn keys(
    src: &Src,
    r: &RawContract,
    at: &Range<usize>,
    defaults: &Contract,
) -> Result<Keys, ContractError> {
    let idempotency = match &r.idempotency {
        None => defaults.idempotency,
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

    let retry_margin = opt_duration(src, "retry_margin", &r.retry_margin, defaults.retry_margin)?;
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
                at.clone(),
                "key_retention",
                "required unless idempotency = \"none\": how long the downstream keeps a key bounds every safe retry",
            ))
        }
        (Some(v), _) => {
            let kr = positive_duration(src, "key_retention", v)?;
            if retry_margin >= kr {
                // Point at the margin when it was written, else at the retention it fails.
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
    Ok(Keys {
        idempotency,
        retry_margin,
        key_retention,
    })
}

/// How long things may take before reckon says so, and how many attempts an intent may make.
pub(super) struct Limits {
    pub(super) max_in_flight: Option<Dur>,
    pub(super) unknown_deadline: Dur,
    pub(super) pending_deadline: Dur,
    pub(super) orphan_grace: Dur,
    pub(super) max_attempts: Option<u32>,
}

pub(super) fn limits(
    src: &Src,
    r: &RawContract,
    defaults: &Contract,
) -> Result<Limits, ContractError> {
    let max_in_flight = r
        .max_in_flight
        .as_ref()
        .map(|v| positive_duration(src, "max_in_flight", v))
        .transpose()?;
    let unknown_deadline = opt_positive(
        src,
        "unknown_deadline",
        &r.unknown_deadline,
        defaults.unknown_deadline,
    )?;
    let pending_deadline = opt_positive(
        src,
        "pending_deadline",
        &r.pending_deadline,
        defaults.pending_deadline,
    )?;
    let orphan_grace = opt_duration(src, "orphan_grace", &r.orphan_grace, defaults.orphan_grace)?;

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
    Ok(Limits {
        max_in_flight,
        unknown_deadline,
        pending_deadline,
        orphan_grace,
        max_attempts,
    })
}

/// The downstream's object states: done (success), done (failure), not done yet.
pub(super) struct States {
    pub(super) success: Vec<String>,
    pub(super) failure: Vec<String>,
    pub(super) pending: Vec<String>,
}

pub(super) fn states(
    src: &Src,
    r: &RawContract,
    at: &Range<usize>,
    defaults: &Contract,
) -> Result<States, ContractError> {
    let list = |field: &str, raw: &Option<SList>, default: &[String]| {
        raw.as_ref()
            .map_or(Ok(default.to_vec()), |l| string_list(src, field, l))
    };
    let success = list(
        "success_states",
        &r.success_states,
        &defaults.success_states,
    )?;
    if success.is_empty() {
        let span = r.success_states.as_ref().map_or(at.clone(), |l| l.span());
        return Err(src.err(
            span,
            "success_states",
            "must list at least one state: otherwise nothing ever completes",
        ));
    }
    let failure = list(
        "failure_states",
        &r.failure_states,
        &defaults.failure_states,
    )?;
    let pending = list(
        "pending_states",
        &r.pending_states,
        &defaults.pending_states,
    )?;
    check_state_overlap(
        src,
        [
            ("success_states", &r.success_states, &success),
            ("failure_states", &r.failure_states, &failure),
            ("pending_states", &r.pending_states, &pending),
        ],
    )?;
    Ok(States {
        success,
        failure,
        pending,
    })
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

/// The HTTP statuses by which the downstream says "did not run" and "still running".
pub(super) struct Statuses {
    pub(super) not_executed: Vec<u16>,
    pub(super) conflict: Vec<u16>,
}

pub(super) fn statuses(
    src: &Src,
    r: &RawContract,
    at: &Range<usize>,
    defaults: &Contract,
) -> Result<Statuses, ContractError> {
    let (not_executed, ne_spans) = status_list(
        src,
        "not_executed_status",
        &r.not_executed_status,
        &defaults.not_executed_status,
    )?;
    let (conflict, cf_spans) = status_list(
        src,
        "conflict_status",
        &r.conflict_status,
        &defaults.conflict_status,
    )?;
    // A code in both lists would be "did not run" and "still running" at once. Point at the
    // explicitly written one (the other may be a default).
    for (i, code) in conflict.iter().enumerate() {
        if not_executed.contains(code) {
            let (field, span) = match (
                cf_spans.get(i),
                ne_spans.iter().zip(&not_executed).find(|(_, c)| *c == code),
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
    Ok(Statuses {
        not_executed,
        conflict,
    })
}

/// Where the tool's arguments hold what reckon compares and links by, and the errors by which
/// the downstream reports a key reused with other parameters.
pub(super) struct Arguments {
    pub(super) params: ParamPointers,
    pub(super) intent_id_pointer: Option<String>,
    pub(super) idempotency_key_pointer: Option<String>,
    pub(super) mismatch_errors: Vec<String>,
}

pub(super) fn arguments(src: &Src, r: &RawContract) -> Result<Arguments, ContractError> {
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
    Ok(Arguments {
        params,
        intent_id_pointer,
        idempotency_key_pointer,
        mismatch_errors,
    })
}
