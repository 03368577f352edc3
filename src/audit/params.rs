//! The parameters an effect is compared on, read from tool arguments by the contract's JSON
//! pointers.

use crate::contract::Contract;
use crate::model::{Attempt, AttemptClass, Decimal};
use serde_json::Value;

use super::objects::Object;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    pub target: Option<String>,
}

impl Params {
    /// Parameters of one attempt; empty when content capture was off or the pointers miss.
    pub fn of_attempt(a: &Attempt, c: &Contract) -> Params {
        let Some(args) = a
            .arguments
            .as_deref()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
        else {
            return Params::default();
        };
        let at = |p: &Option<String>| {
            p.as_deref()
                .and_then(|p| args.pointer(p))
                .filter(|v| !v.is_null())
        };
        Params {
            amount: at(&c.params.amount).and_then(|v| match v {
                Value::Number(n) => Decimal::parse(&n.to_string()),
                Value::String(s) => Decimal::parse(s),
                _ => None,
            }),
            currency: at(&c.params.currency).and_then(scalar_text),
            target: at(&c.params.target).and_then(scalar_text),
        }
    }

    /// The intent's parameters: those of its first attempt that was not rejected and carries
    /// any (a rejected attempt executed nothing: its input was the one that got fixed), else of
    /// its first attempt that carries any.
    pub fn of_intent(attempts: &[Attempt], classes: &[AttemptClass], c: &Contract) -> Params {
        let first = |executed_only: bool| {
            attempts
                .iter()
                .zip(classes)
                .filter(|(_, &k)| !executed_only || k != AttemptClass::Rejected)
                .map(|(a, _)| Params::of_attempt(a, c))
                .find(|p| !p.is_empty())
        };
        first(true).or_else(|| first(false)).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.amount.is_none() && self.currency.is_none() && self.target.is_none()
    }

    /// The fields known on both sides that differ. Unknown is never a mismatch.
    pub fn differences(&self, other: &Params) -> Vec<&'static str> {
        let mut out = Vec::new();
        if let (Some(a), Some(b)) = (&self.amount, &other.amount) {
            if a != b {
                out.push("amount");
            }
        }
        if let (Some(a), Some(b)) = (&self.currency, &other.currency) {
            if !a.eq_ignore_ascii_case(b) {
                out.push("currency");
            }
        }
        if let (Some(a), Some(b)) = (&self.target, &other.target) {
            if a.trim() != b.trim() {
                out.push("target");
            }
        }
        out
    }

    pub fn of_object(o: &Object) -> Params {
        Params {
            amount: o.amount,
            currency: o.currency.clone(),
            target: o.target.clone(),
        }
    }

    pub fn matches(&self, o: &Object) -> bool {
        self.differences(&Params::of_object(o)).is_empty()
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
