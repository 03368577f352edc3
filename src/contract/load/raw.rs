//! The raw shape of a contract file: what serde and `toml` check (types, unknown and missing
//! fields). Values are kept `Spanned` so the checks that follow can point at their line.

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    // A file with only comments is allowed: it is how an operator parks a contract.
    #[serde(default)]
    pub(super) contract: Vec<Spanned<RawContract>>,
}

pub(super) type SList = Spanned<Vec<Spanned<String>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawContract {
    pub(super) name: Spanned<String>,
    pub(super) tools: SList,
    pub(super) record_kind: Option<Spanned<String>>,
    pub(super) idempotency: Option<Spanned<String>>,
    pub(super) key_retention: Option<Spanned<String>>,
    pub(super) retry_margin: Option<Spanned<String>>,
    pub(super) max_in_flight: Option<Spanned<String>>,
    pub(super) unknown_deadline: Option<Spanned<String>>,
    pub(super) pending_deadline: Option<Spanned<String>>,
    // i64 rather than u32 so a negative or zero value gets our message, not a serde one.
    pub(super) max_attempts: Option<Spanned<i64>>,
    pub(super) success_states: Option<SList>,
    pub(super) failure_states: Option<SList>,
    pub(super) pending_states: Option<SList>,
    pub(super) not_executed_status: Option<Spanned<Vec<Spanned<i64>>>>,
    pub(super) conflict_status: Option<Spanned<Vec<Spanned<i64>>>>,
    pub(super) params: Option<RawParams>,
    pub(super) intent_id: Option<Spanned<String>>,
    pub(super) idempotency_key: Option<Spanned<String>>,
    pub(super) mismatch_errors: Option<SList>,
    pub(super) orphan_grace: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParams {
    pub(super) amount: Option<Spanned<String>>,
    pub(super) currency: Option<Spanned<String>>,
    pub(super) target: Option<Spanned<String>>,
}
