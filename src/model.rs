//! Plain data shared by every module: the events reckon ingests and the verdicts it derives.
//!
//! Nothing here knows a wire format, a database or a clock. Edges (ingest, store, api) convert to
//! and from these types; the audit core computes on them.

use std::fmt;

/// A closed set of named values: the enum, `ALL` in declaration order, `as_str` (the name every
/// document, table and label uses) and `parse`, from one list, so a new value cannot miss one.
macro_rules! named {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }
    };
}

/// Unix time in nanoseconds. Every instant in reckon is one of these; `now` is always passed in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub const fn from_secs(secs: i64) -> Self {
        Timestamp(secs * 1_000_000_000)
    }
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms * 1_000_000)
    }
    pub fn nanos(self) -> i64 {
        self.0
    }
    pub fn saturating_add(self, d: Dur) -> Self {
        Timestamp(self.0.saturating_add(d.0))
    }
    pub fn saturating_sub(self, d: Dur) -> Self {
        Timestamp(self.0.saturating_sub(d.0))
    }
}

impl std::ops::Add<Dur> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Dur) -> Timestamp {
        self.saturating_add(d)
    }
}

impl std::ops::Sub<Dur> for Timestamp {
    type Output = Timestamp;
    fn sub(self, d: Dur) -> Timestamp {
        self.saturating_sub(d)
    }
}

/// A span of time in nanoseconds (contract windows, deadlines).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub i64);

impl Dur {
    pub const fn secs(s: i64) -> Self {
        Dur(s * 1_000_000_000)
    }
    pub const fn millis(ms: i64) -> Self {
        Dur(ms * 1_000_000)
    }
    pub const fn minutes(m: i64) -> Self {
        Dur(m * 60 * 1_000_000_000)
    }
    pub const fn hours(h: i64) -> Self {
        Dur(h * 3600 * 1_000_000_000)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        const UNITS: [(i64, &str); 5] = [
            (3_600_000_000_000, "h"),
            (60_000_000_000, "m"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1, "ns"),
        ];
        for (size, unit) in UNITS {
            if n != 0 && n % size == 0 {
                return write!(f, "{}{unit}", n / size);
            }
        }
        write!(f, "{n}ns")
    }
}

/// A decimal amount, exact: `mantissa * 10^-scale`. Compared by value, so `45`, `45.0` and
/// `45.00` are equal.
#[derive(Clone, Copy, Debug)]
pub struct Decimal {
    pub mantissa: i128,
    pub scale: u32,
}

impl Decimal {
    pub fn parse(s: &str) -> Option<Decimal> {
        let s = s.trim();
        let (neg, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        // Plain decimals only, plus the exponent form a float serializer may produce (4.5e1).
        let (base, exp) = match digits.find(['e', 'E']) {
            Some(i) => (&digits[..i], digits[i + 1..].parse::<i32>().ok()?),
            None => (digits, 0),
        };
        // No amount needs more than this; a wild exponent is refused before it costs anything.
        if !(-40..=40).contains(&exp) {
            return None;
        }
        let (int, frac) = match base.split_once('.') {
            Some((i, f)) => (i, f),
            None => (base, ""),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut mantissa: i128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add((b - b'0') as i128)?;
        }
        let mut scale = i32::try_from(frac.len()).ok()?.checked_sub(exp)?;
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        if scale > 30 {
            return None;
        }
        Some(Decimal {
            mantissa: if neg { -mantissa } else { mantissa },
            scale: scale as u32,
        })
    }

    pub fn from_minor(minor: i128, exponent: u32) -> Decimal {
        Decimal {
            mantissa: minor,
            scale: exponent,
        }
    }

    fn normalized(self) -> (i128, u32) {
        let (mut m, mut s) = (self.mantissa, self.scale);
        while s > 0 && m % 10 == 0 {
            m /= 10;
            s -= 1;
        }
        (m, s)
    }
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.normalized() == other.normalized()
    }
}
impl Eq for Decimal {}
impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let (a, sa) = self.normalized();
        let (b, sb) = other.normalized();
        let s = sa.max(sb);
        let scale = |m: i128, from: u32| m.saturating_mul(10i128.saturating_pow(s - from));
        scale(a, sa).cmp(&scale(b, sb))
    }
}
impl std::hash::Hash for Decimal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.normalized().hash(state)
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (m, s) = (self.mantissa, self.scale);
        if s == 0 {
            return write!(f, "{m}");
        }
        let sign = if m < 0 { "-" } else { "" };
        let digits = m.unsigned_abs().to_string();
        let s = s as usize;
        let padded = if digits.len() <= s {
            format!("{}{digits}", "0".repeat(s - digits.len() + 1))
        } else {
            digits
        };
        let (i, fr) = padded.split_at(padded.len() - s);
        write!(f, "{sign}{i}.{fr}")
    }
}

/// How many minor units a currency's major unit has (ISO 4217 as Stripe applies it).
pub fn currency_exponent(currency: &str) -> u32 {
    const ZERO_DECIMAL: [&str; 16] = [
        "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV",
        "XAF", "XOF", "XPF",
    ];
    const THREE_DECIMAL: [&str; 5] = ["BHD", "JOD", "KWD", "OMR", "TND"];
    let upper = currency.trim().to_ascii_uppercase();
    if ZERO_DECIMAL.contains(&upper.as_str()) {
        0
    } else if THREE_DECIMAL.contains(&upper.as_str()) {
        3
    } else {
        2
    }
}

/// A downstream amount as reported. Stripe reports minor units; tool arguments and the records
/// API use major units. The audit converts with the currency before comparing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Amount {
    Major(Decimal),
    Minor(i128),
}

impl Amount {
    pub fn to_major(self, currency: Option<&str>) -> Decimal {
        match self {
            Amount::Major(d) => d,
            Amount::Minor(m) => {
                Decimal::from_minor(m, currency.map(currency_exponent).unwrap_or(2))
            }
        }
    }
}

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// The identity of a span: (trace_id, span_id). Re-sent spans carry the same one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpanRef {
    pub trace_id: TraceId,
    pub span_id: SpanId,
}

impl SpanRef {
    pub fn trace_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
    pub fn span_hex(&self) -> String {
        hex::encode(self.span_id)
    }
}

named!(
    /// What the executor concluded and told the model (`reckon.outcome`). A claim, never evidence.
    pub enum ReportedOutcome {
        Succeeded = "succeeded",
        Failed = "failed",
        Pending = "pending",
        Unknown = "unknown",
        Rejected = "rejected",
    }
);

/// One send of an intent's write to the downstream, as seen in a tool span.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attempt {
    pub span: SpanRef,
    pub intent_id: String,
    pub tool: String,
    pub start: Timestamp,
    pub end: Timestamp,
    pub idempotency_key: Option<String>,
    pub http_status: Option<u16>,
    /// semconv `error.type`
    pub error_type: Option<String>,
    /// The span's status was ERROR. Never evidence of failure on its own.
    pub span_error: bool,
    pub object_id: Option<String>,
    pub object_status: Option<String>,
    pub reported_outcome: Option<ReportedOutcome>,
    /// The tool call's arguments as JSON text, when content capture was on.
    pub arguments: Option<String>,
}

/// What instrumentations write in place of redacted content, as reckon keeps it in
/// [`Attempt::arguments`] (a JSON string): the audit reads no parameters from it, and the verdict
/// says the content was redacted rather than absent.
pub const REDACTED_ARGUMENTS: &str = "__REDACTED__";
pub const REDACTED_ARGUMENTS_JSON: &str = "\"__REDACTED__\"";

/// What a span carried of the tool call's arguments: parameter checks need them captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgumentsSeen {
    Captured,
    /// Content capture wrote a redaction marker: the call's arguments are unknown.
    Redacted,
    /// Content capture was off: the span carries no arguments.
    Absent,
}

impl ArgumentsSeen {
    pub fn as_str(self) -> &'static str {
        match self {
            ArgumentsSeen::Captured => "captured",
            ArgumentsSeen::Redacted => "redacted",
            ArgumentsSeen::Absent => "absent",
        }
    }
}

/// [`Attempt::effective_status`] of its two fields, for forms of an attempt other than
/// [`Attempt`] (the ledger's).
pub fn effective_status(http_status: Option<u16>, error_type: Option<&str>) -> Option<u16> {
    http_status.or_else(|| {
        error_type
            .and_then(|e| e.trim().parse::<u16>().ok())
            .filter(|s| (500..=599).contains(s))
    })
}

impl Attempt {
    pub fn arguments_seen(&self) -> ArgumentsSeen {
        match self.arguments.as_deref() {
            None => ArgumentsSeen::Absent,
            Some(REDACTED_ARGUMENTS_JSON) => ArgumentsSeen::Redacted,
            Some(_) => ArgumentsSeen::Captured,
        }
    }

    /// The downstream's HTTP status: the span's, or, when it has none, a semconv `error.type`
    /// of `500`..`599` (some instrumentations only record the status there).
    pub fn effective_status(&self) -> Option<u16> {
        effective_status(self.http_status, self.error_type.as_deref())
    }

    /// The downstream answered with a server error (5xx).
    pub fn server_error(&self) -> bool {
        self.effective_status()
            .is_some_and(|s| (500..=599).contains(&s))
    }
}

/// The keys and objects some events name: what else to load from the store with them (the
/// records that carry those keys or observe those objects).
pub fn keys_and_objects(events: &[Event]) -> (Vec<String>, Vec<String>) {
    let mut keys: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut objects: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for e in events {
        match e {
            Event::Attempt(a) => {
                keys.extend(a.idempotency_key.clone());
                objects.extend(a.object_id.clone());
            }
            Event::Readback(r) => objects.extend(r.object_ids.iter().cloned()),
            Event::Record(r) => {
                keys.extend(r.idempotency_key.clone());
                objects.insert(r.object_id.clone());
            }
        }
    }
    (keys.into_iter().collect(), objects.into_iter().collect())
}

/// An observation of the downstream's state for an intent (a read span, `reckon.action = read`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Readback {
    pub span: SpanRef,
    pub intent_id: String,
    pub tool: String,
    /// When the read ran (the span's start: the snapshot is no older than this).
    pub at: Timestamp,
    pub end: Timestamp,
    /// The objects found; empty when the read found none.
    pub object_ids: Vec<String>,
    /// What the executor concluded from this read, if it said.
    pub reported_outcome: Option<ReportedOutcome>,
}

/// One observation of a downstream object (a refund, a draft) by the downstream's own report.
/// Identity: (source, object_id, status, observed_at).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordObservation {
    /// Where the observation came from: `api`, `stripe`, `otlp`, ...
    pub source: String,
    /// The downstream object kind (`refund`, `draft`): matched to a contract's `record_kind`.
    pub kind: Option<String>,
    pub object_id: String,
    pub intent_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub status: String,
    pub amount: Option<Amount>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub created_at: Option<Timestamp>,
    pub observed_at: Timestamp,
}

impl RecordObservation {
    /// What makes two observations one (DESIGN.md: every store keeps the first copy of an
    /// identity): the same source saw the same object in the same status at the same instant.
    pub fn identity(&self) -> (&str, &str, &str, Timestamp) {
        (
            &self.source,
            &self.object_id,
            &self.status,
            self.observed_at,
        )
    }
}

/// Everything reckon ingests, after decoding.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    Attempt(Attempt),
    Readback(Readback),
    Record(RecordObservation),
}

impl Event {
    /// The instant the event happened, for ordering and time filters.
    pub fn at(&self) -> Timestamp {
        match self {
            Event::Attempt(a) => a.start,
            Event::Readback(r) => r.at,
            Event::Record(r) => r.observed_at,
        }
    }

    /// The routes this event travels by (DESIGN.md "Memory and history"): the intent it names
    /// (`i:`), the key it carries (`k:`), the objects it returns, lists or observes (`o:`).
    /// `Ledger::routes` gives the routes that reach an intent.
    pub fn routes(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(3);
        match self {
            Event::Attempt(a) => {
                out.push(format!("i:{}", a.intent_id));
                out.extend(a.idempotency_key.iter().map(|k| format!("k:{k}")));
                out.extend(a.object_id.iter().map(|o| format!("o:{o}")));
            }
            Event::Readback(r) => {
                out.push(format!("i:{}", r.intent_id));
                out.extend(r.object_ids.iter().map(|o| format!("o:{o}")));
            }
            Event::Record(r) => {
                out.extend(r.intent_id.iter().map(|i| format!("i:{i}")));
                out.extend(r.idempotency_key.iter().map(|k| format!("k:{k}")));
                out.push(format!("o:{}", r.object_id));
            }
        }
        out
    }
}

named!(
    /// How one attempt ended, decided from evidence (DESIGN.md "Attempt classes").
    pub enum AttemptClass {
        Rejected = "rejected",
        Conflict = "conflict",
        Succeeded = "succeeded",
        Failed = "failed",
        Recorded = "recorded",
        Unknown = "unknown",
    }
);

named!(
    pub enum IntentState {
        Completed = "completed",
        FailedAfterExecution = "failed_after_execution",
        Pending = "pending",
        FailedBeforeExecution = "failed_before_execution",
        Unknown = "unknown",
    }
);

impl IntentState {
    /// Settled: nothing more will happen to it without a new event.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::FailedAfterExecution | Self::FailedBeforeExecution
        )
    }
}

named!(
    pub enum Decision {
        None = "none",
        FixInput = "fix_input",
        Wait = "wait",
        RetrySameKey = "retry_same_key",
        Reconcile = "reconcile",
        NewIntent = "new_intent",
        Escalate = "escalate",
    }
);

named!(
    pub enum Severity {
        Medium = "medium",
        High = "high",
        Critical = "critical",
    }
);

impl Severity {
    /// High and critical findings escalate.
    pub fn escalates(self) -> bool {
        self >= Severity::High
    }
}

named!(
    /// The catalogue of DESIGN.md "Findings".
    pub enum FindingKind {
        DuplicateEffect = "duplicate_effect",
        EffectMismatch = "effect_mismatch",
        KeyReuseMismatch = "key_reuse_mismatch",
        NewKeyRetry = "new_key_retry",
        ExpiredKeyRetry = "expired_key_retry",
        NoIdempotencyContract = "no_idempotency_contract",
        UnresolvedUnknown = "unresolved_unknown",
        ReplayedServerError = "replayed_server_error",
        MisreportedOutcome = "misreported_outcome",
        ResendWhilePending = "resend_while_pending",
        ResendAfterTerminal = "resend_after_terminal",
        InconclusiveReadbackActedOn = "inconclusive_readback_acted_on",
        StuckPending = "stuck_pending",
        RetryBudgetExceeded = "retry_budget_exceeded",
        OrphanRecord = "orphan_record",
        KeySharedAcrossIntents = "key_shared_across_intents",
    }
);

impl FindingKind {
    pub fn severity(self) -> Severity {
        match self {
            Self::DuplicateEffect => Severity::Critical,
            Self::EffectMismatch
            | Self::KeyReuseMismatch
            | Self::NewKeyRetry
            | Self::ExpiredKeyRetry
            | Self::NoIdempotencyContract
            | Self::UnresolvedUnknown
            | Self::ReplayedServerError
            | Self::KeySharedAcrossIntents => Severity::High,
            _ => Severity::Medium,
        }
    }
}

/// A named breach or risk. `(kind, subject)` identifies it across re-audits, so an escalation
/// can tell a finding it has seen from a new one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    /// When the finding became true.
    pub at: Timestamp,
    /// What it is about: an object id, a key, a span id.
    pub subject: String,
    pub detail: String,
}

impl Finding {
    pub fn new(
        kind: FindingKind,
        at: Timestamp,
        subject: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Finding {
            kind,
            severity: kind.severity(),
            at,
            subject: subject.into(),
            detail: detail.into(),
        }
    }
}

/// An attempt as the verdict shows it: the span's facts plus its class.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptView {
    pub span: SpanRef,
    pub start: Timestamp,
    pub end: Timestamp,
    pub idempotency_key: Option<String>,
    pub class: AttemptClass,
    pub http_status: Option<u16>,
    pub error_type: Option<String>,
    pub object_id: Option<String>,
    pub object_status: Option<String>,
    pub reported_outcome: Option<ReportedOutcome>,
    /// Whether the span carried the call's arguments (parameter checks need them).
    pub arguments: ArgumentsSeen,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReadbackView {
    pub span: SpanRef,
    pub at: Timestamp,
    pub object_ids: Vec<String>,
}

/// A downstream object linked to the intent, folded from its observations.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectView {
    pub object_id: String,
    pub status: String,
    /// In the major unit of the tool's arguments.
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
}

/// The audit result for one intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub intent_id: String,
    pub tool: Option<String>,
    pub contract: Option<String>,
    /// The version of `contract` the verdict was computed under (`Contract::version`); empty
    /// when no contract covers the intent's tool.
    pub contract_version: String,
    pub idempotency_keys: Vec<String>,
    /// What the intent's parameters say the effect applies to (the contract's `params.target`:
    /// an order id, a recipient), read from the arguments of its first executed attempt; `None`
    /// with content capture off or no such pointer. What `GET /api/v1/intents?target=` finds
    /// it by, beside its objects' targets.
    pub target: Option<String>,
    pub state: IntentState,
    /// When the intent reached `state`, from evidence, if it is settled (completed, failed after
    /// or before execution); `None` while pending or unknown. What time to settle counts.
    pub settled_at: Option<Timestamp>,
    pub decision: Decision,
    /// Until when a retry with the same key is safe under the contract.
    pub safe_retry_until: Option<Timestamp>,
    /// Set by the escalation book, not by the audit.
    pub escalation_id: Option<String>,
    pub attempts: Vec<AttemptView>,
    pub readbacks: Vec<ReadbackView>,
    pub objects: Vec<ObjectView>,
    pub findings: Vec<Finding>,
    /// High and critical findings that held after an earlier prefix of the evidence in event
    /// time and not in `findings` (DESIGN.md "Findings"): the escalation book counts them as
    /// held, so whether one opened an escalation does not depend on arrival order. Derived from
    /// the same evidence as `findings`; not stored (the escalation is), but part of the
    /// fingerprint, so the verdict handed out is the one a recomputation gives.
    pub held_before: Vec<Finding>,
    /// The next instant at which this verdict can change with no new event.
    pub next_change: Option<Timestamp>,
    /// The `now` the verdict was computed for.
    pub audited_at: Timestamp,
    /// Time of the first event: for time filters.
    pub first_seen: Timestamp,
    /// Time of the latest event.
    pub last_event: Timestamp,
    /// Where the intent sits in the listings (`GET /api/v1/intents` pages newest first by
    /// `(listed_at, intent_id)`): `first_seen` as its first verdict had it, and never changed
    /// after, so a walk of the pages meets every intent exactly once even when late evidence
    /// moves `first_seen` earlier. The audit sets it to `first_seen`; the engine keeps the
    /// value the intent was first written with. Not part of the fingerprint (it never changes).
    pub listed_at: Timestamp,
}

/// One way later evidence can reach a settled intent (DESIGN.md "Memory and history"): its id
/// (`i:{id}`), a key it sent or its objects' records carry (`k:{key}`), an object it may see
/// (`o:{object}`). Settled intents are not kept in memory; the store finds them by these.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    pub route: String,
    pub intent_id: String,
}

named!(
    /// What an intent is looked up by (`GET /api/v1/intents?target=&object_id=&key=`; the
    /// stores' `reckon_intent_lookup`).
    pub enum LookupKind {
        /// The intent's parameter target or its objects' (an order id).
        Target = "target",
        /// A downstream object linked to it or named by its responses.
        Object = "object",
        /// An idempotency key it sent.
        Key = "key",
    }
);

/// Intent ids of the pseudo-intents that orphan records (linked to no intent yet) are audited
/// under: `orphan:{object_id}`.
pub const ORPHAN_PREFIX: &str = "orphan:";

impl Verdict {
    /// A hash of everything but `audited_at`: two verdicts with the same fingerprint say the
    /// same, so the second need not be written. Deterministic across processes (a fixed-seed
    /// hasher), so a stored fingerprint can be compared after a restart; a future build that
    /// hashes differently only writes each verdict once more. A new contract version counts:
    /// the stored row must say which contract it was judged under.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        // Every field but `audited_at`, spelled out so a new field is a compile error here.
        let Verdict {
            intent_id,
            tool,
            contract,
            contract_version,
            idempotency_keys,
            target,
            state,
            settled_at,
            decision,
            safe_retry_until,
            escalation_id,
            attempts,
            readbacks,
            objects,
            findings,
            held_before,
            next_change,
            audited_at: _,
            first_seen,
            last_event,
            listed_at: _,
        } = self;
        let mut h = foldhash::fast::FixedState::default().build_hasher();
        intent_id.hash(&mut h);
        tool.hash(&mut h);
        contract.hash(&mut h);
        contract_version.hash(&mut h);
        idempotency_keys.hash(&mut h);
        // Only when there is one: a verdict with none hashes as it did before targets were
        // kept, so a store of such verdicts is not all rewritten by the build that added it.
        if let Some(target) = target {
            target.hash(&mut h);
        }
        state.hash(&mut h);
        // Only when there is one, like `target`: an unsettled verdict hashes as before.
        if let Some(settled_at) = settled_at {
            settled_at.hash(&mut h);
        }
        decision.hash(&mut h);
        safe_retry_until.hash(&mut h);
        escalation_id.hash(&mut h);
        attempts.hash(&mut h);
        readbacks.hash(&mut h);
        objects.hash(&mut h);
        findings.hash(&mut h);
        held_before.hash(&mut h);
        next_change.hash(&mut h);
        first_seen.hash(&mut h);
        last_event.hash(&mut h);
        h.finish()
    }

    /// Terminal and at rest ([`Verdict::rest`]): the intent is done. Its raw events may expire
    /// after the retention.
    pub fn is_settled(&self) -> bool {
        self.rest() == Rest::Settled
    }

    /// Whether only new evidence can change this verdict, and so where the intent may live
    /// (DESIGN.md "Memory and history"). Time alone changes nothing once no deadline is booked,
    /// and nobody has to act while no escalation is open: such an intent leaves memory, is not
    /// loaded at start-up, and comes back when an event reaches it by intent id, key or object,
    /// whether it is terminal or not. An orphan record's pseudo-intent past its grace rests too
    /// (quiet whatever its state: a claim by key or object is what it waits for), found by its
    /// object and its records' keys.
    pub fn rest(&self) -> Rest {
        if self.next_change.is_some() || self.decision == Decision::Escalate {
            return Rest::Open;
        }
        if self.intent_id.starts_with(ORPHAN_PREFIX) {
            return Rest::Quiet;
        }
        match self.state {
            // Failed, but a send whose outcome is open may still have made an effect of its
            // own (the audit says reconcile; once a person resolved its escalation, none): a
            // late record is what it waits for, so its raw events are kept.
            IntentState::FailedAfterExecution if self.decision != Decision::NewIntent => {
                Rest::Quiet
            }
            IntentState::Completed
            | IntentState::FailedAfterExecution
            | IntentState::FailedBeforeExecution => Rest::Settled,
            IntentState::Pending | IntentState::Unknown => Rest::Quiet,
        }
    }
}

/// Where a verdict leaves its intent ([`Verdict::rest`]); stored with the verdict as its
/// `settled` column, by these numbers: start-up loads the `Open` ones, retention expires the
/// raw events of the `Settled` ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// A deadline is booked (an orphan record's grace, too) or an escalation is open: kept in
    /// memory, loaded at start-up.
    Open = 0,
    /// Terminal: out of memory until evidence touches it; raw events may expire.
    Settled = 1,
    /// Unknown or pending with nothing booked and nobody asked to act (its key's retention
    /// passed, a person resolved its escalation), or an orphan record past its grace: out of
    /// memory like a settled intent, but its raw events are kept whatever the retention, since
    /// a late record, or the claim of its object, is what it waits for.
    Quiet = 2,
}

impl Rest {
    /// Out of memory until evidence touches it.
    pub fn may_leave_memory(self) -> bool {
        self != Rest::Open
    }
}

named!(
    pub enum EscalationStatus {
        Open = "open",
        Claimed = "claimed",
        Resolved = "resolved",
        /// Late evidence showed that the findings behind it never held, before anyone claimed
        /// or resolved it (DESIGN.md "Findings"): out of the queue, its notifications resolved.
        Withdrawn = "withdrawn",
    }
);

impl EscalationStatus {
    /// Someone still has to act on it: open or claimed (what the unresolved gauge counts).
    pub fn unresolved(self) -> bool {
        matches!(self, EscalationStatus::Open | EscalationStatus::Claimed)
    }
}

named!(
    /// The person's action an override was part of.
    pub enum OverrideAction {
        Claim = "claim",
        Resolve = "resolve",
    }
);

/// A person who claimed or resolved an escalation someone else held (`"override": true`):
/// who, when, with which action, and who held it then.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Override {
    pub by: String,
    pub at: Timestamp,
    pub action: OverrideAction,
    /// Who held it (its `claimed_by`) when it was taken over.
    pub held_by: String,
}

/// An item in the queue for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Escalation {
    pub id: String,
    pub intent_id: String,
    /// Its intent's tool when it was opened (`None`: an orphan record's, which no tool call
    /// made): what the queue, the gauges and `?tool=` go by without reading the verdict.
    pub tool: Option<String>,
    pub status: EscalationStatus,
    /// Its earliest finding's time (event time): late evidence can move it earlier.
    pub opened_at: Timestamp,
    /// Where it sits in the queue's pages (newest first by `(listed_at, id)`): `opened_at` as
    /// it was when the escalation was created, never changed after, so a walk of the pages
    /// meets every escalation exactly once.
    pub listed_at: Timestamp,
    /// The most severe finding it holds.
    pub severity: Severity,
    /// The findings that opened or joined it, as they read then: kept even when later evidence
    /// removes them from the verdict, so the person sees why it was opened.
    pub findings: Vec<Finding>,
    /// The evidence a resolution covered (see `escalation::evidence_of`): a new attempt or object
    /// beyond it that brings a high or critical finding opens a new escalation.
    pub covered: Vec<String>,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<Timestamp>,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<Timestamp>,
    pub resolution: Option<String>,
    pub note: Option<String>,
    /// Every claim or resolution that took it over from someone else who held it, oldest first.
    pub overrides: Vec<Override>,
    /// Bumped on every change: the row version for stores that keep the latest.
    pub version: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_compare_by_value() {
        assert_eq!(Decimal::parse("45"), Decimal::parse("45.00"));
        assert_eq!(Decimal::parse("4.5e1"), Decimal::parse("45"));
        assert_eq!(
            Decimal::parse("-0.10").map(|d| d.to_string()),
            Some("-0.10".into())
        );
        assert_eq!(
            Amount::Minor(4500).to_major(Some("usd")),
            Decimal::parse("45").unwrap()
        );
        assert_eq!(
            Amount::Minor(4500).to_major(Some("JPY")),
            Decimal::parse("4500").unwrap()
        );
        assert_eq!(
            Amount::Minor(4500).to_major(Some("kwd")),
            Decimal::parse("4.5").unwrap()
        );
    }

    #[test]
    fn hostile_decimals_are_refused_at_once() {
        for s in [
            "0e2147483647",
            "0e-2147483648",
            "1e99999",
            "",
            ".",
            "1.2.3",
            "e5",
            "12x",
            "1e",
            "99999999999999999999999999999999999999999999",
        ] {
            assert_eq!(Decimal::parse(s), None, "{s:?}");
        }
        assert!(Decimal::parse("0e40").is_some());
    }
}
