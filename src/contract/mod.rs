//! Contracts: what a downstream promises for a tool (DESIGN.md "Contracts").
//!
//! `Contract` is plain data the audit core reads; `load` turns `contracts/*.toml` into it.
//! Every contract carries its `version`, a hash of what it says (not of how its file is
//! written), so a verdict can name the contract version it was computed under.

mod duration;
mod load;

pub use duration::parse_duration;
pub use load::{load_dir, parse_contracts, ContractError};

use crate::model::Dur;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idempotency {
    /// Same key returns the saved response, 5xx included (Stripe API v1).
    Replay,
    /// Same key drives the operation to completion and returns the updated result (Stripe API v2).
    Converge,
    /// The downstream accepts no key: a repeat is a second action.
    None,
}

impl Idempotency {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Converge => "converge",
            Self::None => "none",
        }
    }
}

/// JSON pointers into the tool arguments for the parameters an effect is compared on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamPointers {
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub target: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contract {
    pub name: String,
    pub tools: Vec<String>,
    pub record_kind: Option<String>,
    pub idempotency: Idempotency,
    /// How long the downstream keeps a key; `None` with `idempotency = "none"`.
    pub key_retention: Option<Dur>,
    pub retry_margin: Dur,
    /// How long a sent request can still commit; `None`: unbounded.
    pub max_in_flight: Option<Dur>,
    pub unknown_deadline: Dur,
    pub pending_deadline: Dur,
    pub max_attempts: Option<u32>,
    pub success_states: Vec<String>,
    pub failure_states: Vec<String>,
    pub pending_states: Vec<String>,
    pub not_executed_status: Vec<u16>,
    pub conflict_status: Vec<u16>,
    pub params: ParamPointers,
    /// Where to read the intent id from the arguments when the span lacks `reckon.intent.id`.
    pub intent_id_pointer: Option<String>,
    /// Where to read the idempotency key from the arguments when the span lacks it.
    pub idempotency_key_pointer: Option<String>,
    /// `error.type` values by which the downstream reports a key reused with other parameters.
    pub mismatch_errors: Vec<String>,
    /// How long a record may wait for its intent before it is an orphan.
    pub orphan_grace: Dur,
    /// [`Contract::content_version`] of the fields above: set when the contract is built (the
    /// loader, [`Contract::example`]) and again by [`Contracts::new`], so a contract changed
    /// field by field (tests do) is versioned by what it says when it is put to use.
    pub version: String,
}

impl Contract {
    /// A contract with the defaults of DESIGN.md's example, for the given tool.
    pub fn example(name: &str, tool: &str) -> Contract {
        Contract {
            name: name.to_string(),
            tools: vec![tool.to_string()],
            record_kind: None,
            idempotency: Idempotency::Replay,
            key_retention: Some(Dur::hours(24)),
            retry_margin: Dur::hours(1),
            max_in_flight: Some(Dur::secs(60)),
            unknown_deadline: Dur::minutes(15),
            pending_deadline: Dur::hours(2),
            max_attempts: Some(5),
            success_states: vec!["succeeded".into()],
            failure_states: vec!["failed".into(), "canceled".into()],
            pending_states: vec!["pending".into(), "requires_action".into()],
            not_executed_status: vec![400, 401, 403, 404, 422, 429],
            conflict_status: vec![409],
            params: ParamPointers::default(),
            intent_id_pointer: None,
            idempotency_key_pointer: None,
            mismatch_errors: default_mismatch_errors(),
            orphan_grace: Dur::minutes(10),
            version: String::new(),
        }
        .versioned()
    }

    /// The contract with its `version` computed from what it says now.
    pub fn versioned(mut self) -> Contract {
        self.version = self.content_version();
        self
    }

    /// The contract's version (`contract_version` in verdicts): the first 16 hex digits of the
    /// SHA-256 of its canonical form. The canonical form is what the contract means once
    /// loaded: defaults filled in, durations in nanoseconds, the lists that are sets sorted; not
    /// its file name, comments, layout or the order fields were written in. So the same content
    /// gives the same version across restarts, machines and reformatting, and any edit that can
    /// change a verdict gives another.
    pub fn content_version(&self) -> String {
        use sha2::{Digest, Sha256};
        use std::fmt::Write as _;
        // Every field but `version`, spelled out so a new field is a compile error here (and
        // then changes every version, deliberately: the contract says something new).
        let Contract {
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
            version: _,
        } = self;
        fn set<T: Ord + Clone + serde::Serialize>(items: &[T]) -> String {
            let mut v = items.to_vec();
            v.sort();
            v.dedup();
            json(&v)
        }
        fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
            // Strings, numbers, lists and null: serde_json cannot fail on these.
            serde_json::to_string(v).unwrap_or_default()
        }
        let ns = |d: &Dur| d.0.to_string();
        let opt_ns = |d: &Option<Dur>| d.as_ref().map_or("null".to_string(), ns);
        let fields: [(&str, String); 22] = [
            ("name", json(name)),
            ("tools", set(tools)),
            ("record_kind", json(record_kind)),
            ("idempotency", json(idempotency.as_str())),
            ("key_retention", opt_ns(key_retention)),
            ("retry_margin", ns(retry_margin)),
            ("max_in_flight", opt_ns(max_in_flight)),
            ("unknown_deadline", ns(unknown_deadline)),
            ("pending_deadline", ns(pending_deadline)),
            ("max_attempts", json(max_attempts)),
            ("success_states", set(success_states)),
            ("failure_states", set(failure_states)),
            ("pending_states", set(pending_states)),
            ("not_executed_status", set(not_executed_status)),
            ("conflict_status", set(conflict_status)),
            ("params.amount", json(&params.amount)),
            ("params.currency", json(&params.currency)),
            ("params.target", json(&params.target)),
            ("intent_id", json(intent_id_pointer)),
            ("idempotency_key", json(idempotency_key_pointer)),
            ("mismatch_errors", set(mismatch_errors)),
            ("orphan_grace", ns(orphan_grace)),
        ];
        let mut canonical = String::from("reckon contract 1\n");
        for (k, v) in fields {
            let _ = writeln!(canonical, "{k}={v}");
        }
        let digest = Sha256::digest(canonical.as_bytes());
        let mut out = String::with_capacity(VERSION_LEN);
        for b in &digest[..VERSION_LEN / 2] {
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    pub fn is_success(&self, status: &str) -> bool {
        self.success_states.iter().any(|s| s == status)
    }
    pub fn is_failure(&self, status: &str) -> bool {
        self.failure_states.iter().any(|s| s == status)
    }
    pub fn is_terminal(&self, status: &str) -> bool {
        self.is_success(status) || self.is_failure(status)
    }

    /// The last instant a same-key retry is safe: first attempt + retention - margin.
    pub fn safe_retry_until(
        &self,
        first_attempt: crate::model::Timestamp,
    ) -> Option<crate::model::Timestamp> {
        match self.idempotency {
            Idempotency::None => None,
            _ => self
                .key_retention
                .map(|r| first_attempt + r - self.retry_margin),
        }
    }
}

/// Hex digits in a contract version: 64 bits, no collision among the versions one deployment
/// will ever see.
pub const VERSION_LEN: usize = 16;

pub fn default_mismatch_errors() -> Vec<String> {
    vec![
        "idempotency_error".into(),
        "idempotency_key_mismatch".into(),
        "key_reuse_mismatch".into(),
    ]
}

/// All loaded contracts, looked up by tool name and by record kind.
#[derive(Clone, Debug, Default)]
pub struct Contracts {
    pub contracts: Vec<Contract>,
}

impl Contracts {
    /// The set in force from now on; every contract is versioned by what it says.
    pub fn new(contracts: Vec<Contract>) -> Self {
        Contracts {
            contracts: contracts.into_iter().map(Contract::versioned).collect(),
        }
    }
    pub fn for_tool(&self, tool: &str) -> Option<&Contract> {
        self.contracts
            .iter()
            .find(|c| c.tools.iter().any(|t| t == tool))
    }
    pub fn for_record_kind(&self, kind: &str) -> Option<&Contract> {
        self.contracts
            .iter()
            .find(|c| c.record_kind.as_deref() == Some(kind))
    }
    pub fn by_name(&self, name: &str) -> Option<&Contract> {
        self.contracts.iter().find(|c| c.name == name)
    }
}
