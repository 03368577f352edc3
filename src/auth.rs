//! Who may do what (DESIGN.md "Access"). This module decides; the listeners only adapt: the
//! gRPC interceptor (`ingest::grpc`), the OTLP/HTTP middleware (`ingest::http`) and the API and
//! page middleware (`api::auth`) hand it the `authorization` header and map its answer through
//! the one error table (`ingest::error`).
//!
//! With no tokens configured everyone may do everything (local development). With tokens, every
//! request names one, as `Authorization: Bearer TOKEN` (what OpenTelemetry exporters send from
//! `OTEL_EXPORTER_OTLP_HEADERS`) or as HTTP Basic with the token as the password (what a browser
//! can send for the escalation pages). Roles:
//!
//! | role | may |
//! |---|---|
//! | `ingest` | export OTLP, post records (and Stripe events when no webhook secret is set) |
//! | `read` | read verdicts, escalations, the report, the pages (and `/metrics` unless it is open) |
//! | `operator` | everything `read` may, and claim and resolve escalations in its own name |
//!
//! `ingest` is apart on purpose: an exporter's token, sitting in every agent's environment, must
//! not read the audit trail, and a person's token must not be able to write evidence.
//!
//! A missing, malformed or unknown token gets one answer (`Unauthenticated`), so the answer says
//! nothing about which tokens exist. Tokens are kept only as SHA-256 digests and compared in
//! constant time, all of them every time.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shorter tokens are refused at start-up: a guessable token is no access control.
pub const MIN_TOKEN_BYTES: usize = 16;
const MAX_NAME_CHARS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Ingest,
    Read,
    Operator,
}

impl Role {
    pub fn parse(s: &str) -> Result<Role, TokenError> {
        match s.trim() {
            "ingest" => Ok(Role::Ingest),
            "read" => Ok(Role::Read),
            "operator" => Ok(Role::Operator),
            other => Err(TokenError::Role(other.to_string())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ingest => "ingest",
            Role::Read => "read",
            Role::Operator => "operator",
        }
    }

    /// The role lattice: `operator` includes `read`; `ingest` stands alone.
    pub fn allows(self, need: Need) -> bool {
        matches!(
            (self, need),
            (Role::Ingest, Need::Ingest)
                | (Role::Read | Role::Operator, Need::Read)
                | (Role::Operator, Need::Act)
        )
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a request asks to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Send evidence: OTLP exports, records, unsigned Stripe events.
    Ingest,
    /// Read the audit: verdicts, escalations, report, pages, metrics.
    Read,
    /// A person's action: claim or resolve an escalation.
    Act,
}

impl Need {
    fn as_str(self) -> &'static str {
        match self {
            Need::Ingest => "send evidence (needs an ingest token)",
            Need::Read => "read (needs a read or operator token)",
            Need::Act => "claim or resolve (needs an operator token)",
        }
    }
}

/// One `[[auth.token]]` entry: plain data from the config. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub name: String,
    pub role: Role,
    secret: String,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Token {
    /// Checks the name (recorded as who claimed or resolved, so it must read as a name) and the
    /// secret (long enough, and sendable in an HTTP header as is).
    pub fn new(name: &str, secret: &str, role: Role) -> Result<Token, TokenError> {
        let ok_name = !name.is_empty()
            && name.chars().count() <= MAX_NAME_CHARS
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
        if !ok_name {
            return Err(TokenError::Name(name.to_string()));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Charset);
        }
        if secret.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::Short);
        }
        Ok(Token {
            name: name.to_string(),
            role,
            secret: secret.to_string(),
        })
    }
}

/// Why a configured token was refused. No variant carries the secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("invalid token name {0:?}: 1 to 64 letters, digits, '.', '_', '-' or '@' (it is recorded as who claimed or resolved)")]
    Name(String),
    #[error(
        "a token must be at least {MIN_TOKEN_BYTES} bytes (make one with `openssl rand -hex 32`)"
    )]
    Short,
    #[error(
        "a token may hold only visible ASCII characters, no spaces (it travels in an HTTP header)"
    )]
    Charset,
    #[error("unknown role {0:?}: expected \"ingest\", \"read\" or \"operator\"")]
    Role(String),
    #[error(
        "give the token either inline (`token`) or by environment variable (`token_env`), not both"
    )]
    Both,
    #[error("give the token inline (`token`) or by environment variable (`token_env`)")]
    Neither,
    #[error("environment variable {0} is not set or empty")]
    Env(String),
    #[error("the same token is configured twice, for {0:?} and {1:?}: give every holder a token of its own")]
    Duplicate(String, String),
}

/// Who may read `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricsAccess {
    /// A `read` (or `operator`) token, like every other read: labels name tools and findings.
    #[default]
    Read,
    /// Anyone, for a Prometheus that cannot send a token.
    Open,
}

impl MetricsAccess {
    pub fn parse(s: &str) -> Option<MetricsAccess> {
        match s.trim() {
            "read" => Some(MetricsAccess::Read),
            "open" => Some(MetricsAccess::Open),
            _ => None,
        }
    }
}

/// The `[auth]` settings: plain data, as the config file gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthConfig {
    pub tokens: Vec<Token>,
    pub metrics: MetricsAccess,
}

impl AuthConfig {
    /// Refuses one token value given to two holders: who acted could not be told apart.
    pub fn check_unique(tokens: &[Token]) -> Result<(), TokenError> {
        for (i, a) in tokens.iter().enumerate() {
            if let Some(b) = tokens[..i].iter().find(|b| b.secret == a.secret) {
                return Err(TokenError::Duplicate(b.name.clone(), a.name.clone()));
            }
        }
        Ok(())
    }
}

/// Who a request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// No tokens are configured: everyone may do everything.
    Anyone,
    Token {
        name: Arc<str>,
        role: Role,
    },
}

impl Principal {
    /// The token's name, `None` when access is open.
    pub fn name(&self) -> Option<&str> {
        match self {
            Principal::Anyone => None,
            Principal::Token { name, .. } => Some(name),
        }
    }

    pub fn may(&self, need: Need) -> bool {
        match self {
            Principal::Anyone => true,
            Principal::Token { role, .. } => role.allows(need),
        }
    }

    /// The name a person's action is recorded under. With a token it is the token's name:
    /// `by` may be left out, and when given it must be that name (a request naming someone else
    /// is refused rather than silently recorded under another name). With open access it is
    /// `by` as sent (the escalation book refuses an empty one).
    pub fn acting_as(&self, by: Option<&str>) -> Result<String, AuthError> {
        let by = by.map(str::trim).filter(|b| !b.is_empty());
        match self {
            Principal::Anyone => Ok(by.unwrap_or("").to_string()),
            Principal::Token { name, .. } => match by {
                None => Ok(name.to_string()),
                Some(b) if b == &**name => Ok(name.to_string()),
                Some(_) => Err(AuthError::NotYou {
                    name: name.to_string(),
                }),
            },
        }
    }
}

/// Why a request was refused. `Unauthenticated` is one answer for a missing, malformed or
/// unknown token alike.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a valid token is required (Authorization: Bearer TOKEN)")]
    Unauthenticated,
    #[error("the token {name:?} ({role}) may not {}", need.as_str())]
    Forbidden {
        name: String,
        role: Role,
        need: Need,
    },
    #[error("this token acts as {name:?}: leave `by` out or send {name:?}")]
    NotYou { name: String },
}

struct Entry {
    name: Arc<str>,
    role: Role,
    digest: [u8; 32],
}

/// The access policy, built once at start-up.
pub struct Access {
    entries: Vec<Entry>,
    metrics: MetricsAccess,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("tokens", &self.entries.len())
            .field("metrics", &self.metrics)
            .finish()
    }
}

impl Access {
    pub fn new(config: &AuthConfig) -> Result<Access, TokenError> {
        AuthConfig::check_unique(&config.tokens)?;
        Ok(Access {
            entries: config
                .tokens
                .iter()
                .map(|t| Entry {
                    name: t.name.as_str().into(),
                    role: t.role,
                    digest: digest(t.secret.as_bytes()),
                })
                .collect(),
            metrics: config.metrics,
        })
    }

    /// Everyone may do everything (no tokens configured).
    pub fn open() -> Access {
        Access {
            entries: Vec::new(),
            metrics: MetricsAccess::Read,
        }
    }

    pub fn is_open(&self) -> bool {
        self.entries.is_empty()
    }

    /// Tokens per role, for the start-up log.
    pub fn count(&self, role: Role) -> usize {
        self.entries.iter().filter(|e| e.role == role).count()
    }

    /// What `/metrics` needs: `None` when anyone may scrape it.
    pub fn metrics_need(&self) -> Option<Need> {
        match self.metrics {
            MetricsAccess::Open => None,
            MetricsAccess::Read => (!self.is_open()).then_some(Need::Read),
        }
    }

    /// Who sent `authorization` (the header's raw value, `None` when absent), if it may do
    /// `need`.
    pub fn check(&self, authorization: Option<&[u8]>, need: Need) -> Result<Principal, AuthError> {
        let principal = self.authenticate(authorization)?;
        match &principal {
            Principal::Token { name, role } if !role.allows(need) => Err(AuthError::Forbidden {
                name: name.to_string(),
                role: *role,
                need,
            }),
            _ => Ok(principal),
        }
    }

    /// Who sent `authorization`, whatever it asks to do.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Principal, AuthError> {
        if self.is_open() {
            return Ok(Principal::Anyone);
        }
        let presented = authorization
            .and_then(credential)
            .ok_or(AuthError::Unauthenticated)?;
        let presented = digest(&presented);
        // Every entry is compared, with no early exit: the time taken says nothing about which
        // entry matched, or how many there are before it.
        let mut found: Option<&Entry> = None;
        for e in &self.entries {
            let equal: bool = e.digest.ct_eq(&presented).into();
            if equal && found.is_none() {
                found = Some(e);
            }
        }
        found
            .map(|e| Principal::Token {
                name: e.name.clone(),
                role: e.role,
            })
            .ok_or(AuthError::Unauthenticated)
    }
}

/// [`Access`] as one listener applies it: refusals are counted per listener
/// (`reckon_access_refused_total`). Cheap to clone into every adapter.
#[derive(Clone)]
pub struct Gate {
    access: Arc<Access>,
    metrics: Arc<crate::metrics::Metrics>,
    listener: &'static str,
}

impl Gate {
    pub fn new(
        access: Arc<Access>,
        metrics: Arc<crate::metrics::Metrics>,
        listener: &'static str,
    ) -> Gate {
        Gate {
            access,
            metrics,
            listener,
        }
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    /// [`Access::check`], counting a refusal.
    pub fn check(&self, authorization: Option<&[u8]>, need: Need) -> Result<Principal, AuthError> {
        self.access.check(authorization, need).inspect_err(|e| {
            let reason = match e {
                AuthError::Unauthenticated => "unauthenticated",
                _ => "permission_denied",
            };
            self.metrics.access_refused(self.listener, reason);
        })
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The token in an `Authorization` value: `Bearer TOKEN`, or `Basic base64(USER:TOKEN)` (the
/// user name is ignored: the token names its holder). Schemes are case-insensitive.
fn credential(header: &[u8]) -> Option<Vec<u8>> {
    let header = std::str::from_utf8(header).ok()?.trim();
    let (scheme, rest) = header.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return (!rest.is_empty()).then(|| rest.as_bytes().to_vec());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let colon = decoded.iter().position(|&b| b == b':')?;
        let password = decoded[colon + 1..].to_vec();
        return (!password.is_empty()).then_some(password);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const INGEST: &str = "ingest-0123456789abcdef";
    const READ: &str = "read-0123456789abcdef";
    const OPERATOR: &str = "operator-0123456789abcdef";

    fn access() -> Access {
        Access::new(&AuthConfig {
            tokens: vec![
                Token::new("agents", INGEST, Role::Ingest).unwrap(),
                Token::new("grafana", READ, Role::Read).unwrap(),
                Token::new("ana", OPERATOR, Role::Operator).unwrap(),
            ],
            metrics: MetricsAccess::Read,
        })
        .unwrap()
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    fn basic(user: &str, t: &str) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{t}"));
        format!("Basic {b64}").into_bytes()
    }

    #[test]
    fn open_access_lets_everyone_do_everything() {
        let a = Access::new(&AuthConfig::default()).unwrap();
        assert!(a.is_open());
        for need in [Need::Ingest, Need::Read, Need::Act] {
            assert_eq!(a.check(None, need), Ok(Principal::Anyone));
            assert_eq!(
                a.check(Some(b"Bearer whatever"), need),
                Ok(Principal::Anyone)
            );
        }
        assert_eq!(a.metrics_need(), None);
    }

    #[test]
    fn the_role_lattice() {
        let a = access();
        let allowed = |token: &str, need| a.check(Some(&bearer(token)), need).is_ok();
        // ingest: only evidence in.
        assert!(allowed(INGEST, Need::Ingest));
        assert!(!allowed(INGEST, Need::Read));
        assert!(!allowed(INGEST, Need::Act));
        // read: reads only.
        assert!(!allowed(READ, Need::Ingest));
        assert!(allowed(READ, Need::Read));
        assert!(!allowed(READ, Need::Act));
        // operator: reads and acts, sends no evidence.
        assert!(!allowed(OPERATOR, Need::Ingest));
        assert!(allowed(OPERATOR, Need::Read));
        assert!(allowed(OPERATOR, Need::Act));
        assert_eq!(
            a.check(Some(&bearer(READ)), Need::Act),
            Err(AuthError::Forbidden {
                name: "grafana".into(),
                role: Role::Read,
                need: Need::Act
            })
        );
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_get_one_answer() {
        let a = access();
        let near_miss = format!("{}x", &OPERATOR[..OPERATOR.len() - 1]);
        let cases: Vec<Option<Vec<u8>>> = vec![
            None,
            Some(b"".to_vec()),
            Some(b"Bearer".to_vec()),
            Some(b"Bearer ".to_vec()),
            Some(OPERATOR.as_bytes().to_vec()),
            Some(format!("Token {OPERATOR}").into_bytes()),
            Some(bearer(&near_miss)),
            Some(bearer(&OPERATOR[..OPERATOR.len() - 1])),
            Some(bearer(&format!("{OPERATOR}{OPERATOR}"))),
            Some(bearer("agents")),
            Some(b"Basic !!!not-base64".to_vec()),
            Some(basic("ana", "")),
            Some(b"Bearer \xff\xfe".to_vec()),
        ];
        for case in cases {
            let got = a.check(case.as_deref(), Need::Read);
            assert_eq!(got, Err(AuthError::Unauthenticated), "{case:?}");
            // The message is the same whatever was sent, and never echoes it.
            let msg = got.unwrap_err().to_string();
            assert_eq!(msg, AuthError::Unauthenticated.to_string());
        }
    }

    #[test]
    fn bearer_and_basic_name_the_same_holder() {
        let a = access();
        let want = Principal::Token {
            name: "ana".into(),
            role: Role::Operator,
        };
        assert_eq!(
            a.check(Some(&bearer(OPERATOR)), Need::Act),
            Ok(want.clone())
        );
        assert_eq!(
            a.check(Some(format!("bearer   {OPERATOR} ").as_bytes()), Need::Act),
            Ok(want.clone())
        );
        // The Basic user name is whatever the browser's prompt got; the token decides.
        assert_eq!(
            a.check(Some(&basic("someone", OPERATOR)), Need::Act),
            Ok(want.clone())
        );
        assert_eq!(a.check(Some(&basic("", OPERATOR)), Need::Read), Ok(want));
    }

    #[test]
    fn digests_are_compared_in_constant_time_over_every_entry() {
        // What can be checked from outside: the comparison is over digests (a prefix of the
        // token matching says nothing), and the last entry is found as the first is.
        let a = access();
        assert_eq!(a.entries.len(), 3);
        assert!(a.entries.iter().all(|e| e.digest != [0; 32]));
        assert_eq!(
            a.authenticate(Some(&bearer(OPERATOR))).unwrap().name(),
            Some("ana")
        );
        assert_eq!(
            a.authenticate(Some(&bearer(INGEST))).unwrap().name(),
            Some("agents")
        );
    }

    #[test]
    fn tokens_are_checked_when_configured() {
        assert_eq!(
            Token::new("ana", "short", Role::Read),
            Err(TokenError::Short)
        );
        assert_eq!(
            Token::new("ana", "has a space in it, long enough", Role::Read),
            Err(TokenError::Charset)
        );
        assert_eq!(
            Token::new("", INGEST, Role::Read),
            Err(TokenError::Name(String::new()))
        );
        assert!(matches!(
            Token::new("a b", INGEST, Role::Read),
            Err(TokenError::Name(_))
        ));
        assert!(Token::new("ana.lopez@ops", INGEST, Role::Read).is_ok());
        assert_eq!(Role::parse("admin"), Err(TokenError::Role("admin".into())));
        let dup = AuthConfig {
            tokens: vec![
                Token::new("a", INGEST, Role::Ingest).unwrap(),
                Token::new("b", INGEST, Role::Operator).unwrap(),
            ],
            metrics: MetricsAccess::Read,
        };
        assert_eq!(
            Access::new(&dup).unwrap_err(),
            TokenError::Duplicate("a".into(), "b".into())
        );
        // Two tokens for one name (a rotation) are fine.
        let rotation = AuthConfig {
            tokens: vec![
                Token::new("agents", INGEST, Role::Ingest).unwrap(),
                Token::new("agents", READ, Role::Ingest).unwrap(),
            ],
            metrics: MetricsAccess::Read,
        };
        assert!(Access::new(&rotation).is_ok());
    }

    #[test]
    fn secrets_never_show() {
        let t = Token::new("ana", OPERATOR, Role::Operator).unwrap();
        assert!(!format!("{t:?}").contains(OPERATOR));
        let a = access();
        assert!(!format!("{a:?}").contains(OPERATOR));
        let e = Access::new(&AuthConfig {
            tokens: vec![t.clone(), t],
            metrics: MetricsAccess::Read,
        })
        .unwrap_err();
        assert!(!e.to_string().contains(OPERATOR), "{e}");
    }

    #[test]
    fn actions_are_recorded_under_the_token_name() {
        let ana = Principal::Token {
            name: "ana".into(),
            role: Role::Operator,
        };
        assert_eq!(ana.acting_as(None).as_deref(), Ok("ana"));
        assert_eq!(ana.acting_as(Some(" ")).as_deref(), Ok("ana"));
        assert_eq!(ana.acting_as(Some("ana")).as_deref(), Ok("ana"));
        assert_eq!(
            ana.acting_as(Some("bob")),
            Err(AuthError::NotYou { name: "ana".into() })
        );
        assert_eq!(
            Principal::Anyone.acting_as(Some(" bob ")).as_deref(),
            Ok("bob")
        );
        assert_eq!(Principal::Anyone.acting_as(None).as_deref(), Ok(""));
    }

    #[test]
    fn metrics_need_read_unless_opened() {
        let mut cfg = AuthConfig {
            tokens: vec![Token::new("g", READ, Role::Read).unwrap()],
            metrics: MetricsAccess::Read,
        };
        assert_eq!(Access::new(&cfg).unwrap().metrics_need(), Some(Need::Read));
        cfg.metrics = MetricsAccess::Open;
        assert_eq!(Access::new(&cfg).unwrap().metrics_need(), None);
    }
}
