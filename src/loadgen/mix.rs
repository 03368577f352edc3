//! What the generator sends: a mix of span kinds, built as OTLP protobuf.

use std::fmt;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};

/// The kinds of traffic, each a share of every batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Non-tool spans (LLM calls, agent steps): recognised and dropped.
    Noise,
    /// A refund whose response returned a succeeded object: completed at once.
    Completed,
    /// A refund that timed out: stays open until a record settles it.
    Open,
    /// Records (`POST /api/v1/records`) that settle earlier open refunds.
    Records,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Noise, Kind::Completed, Kind::Open, Kind::Records];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Noise => "noise",
            Kind::Completed => "completed",
            Kind::Open => "open",
            Kind::Records => "records",
        }
    }
}

/// Weights per kind: `noise=70,completed=10,open=10,records=10`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    pub weights: [u32; 4],
}

impl Mix {
    pub fn only(kind: Kind) -> Mix {
        let mut weights = [0; 4];
        weights[kind as usize] = 1;
        Mix { weights }
    }

    pub fn parse(text: &str) -> Result<Mix, String> {
        let mut weights = [0u32; 4];
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: want KIND=WEIGHT"))?;
            let kind = Kind::ALL
                .into_iter()
                .find(|k| k.as_str() == name.trim())
                .ok_or_else(|| format!("{name:?}: kinds are noise, completed, open, records"))?;
            weights[kind as usize] = weight
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: the weight must be a whole number"))?;
        }
        if weights.iter().all(|&w| w == 0) {
            return Err("the mix is empty".into());
        }
        Ok(Mix { weights })
    }

    /// How many of each kind one batch of `n` carries (rounded down, the rest as the heaviest).
    pub fn plan(&self, n: usize) -> Plan {
        let total: u64 = self.weights.iter().map(|&w| w as u64).sum();
        let mut counts = [0usize; 4];
        for (c, &w) in counts.iter_mut().zip(&self.weights) {
            *c = (n as u64 * w as u64 / total.max(1)) as usize;
        }
        let heaviest = (0..4).max_by_key(|&i| self.weights[i]).unwrap_or(0);
        counts[heaviest] += n - counts.iter().sum::<usize>();
        Plan {
            noise: counts[0],
            completed: counts[1],
            open: counts[2],
            records: counts[3],
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = Kind::ALL
            .into_iter()
            .filter(|k| self.weights[*k as usize] > 0)
            .map(|k| format!("{}={}", k.as_str(), self.weights[k as usize]))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub noise: usize,
    pub completed: usize,
    pub open: usize,
    pub records: usize,
}

fn kv(k: &str, v: impl Into<String>) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn kv_int(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn ids(tag_hash: u64, n: u64) -> (Vec<u8>, Vec<u8>) {
    let mut trace = [0u8; 16];
    trace[..8].copy_from_slice(&tag_hash.to_be_bytes());
    trace[8..].copy_from_slice(&n.to_be_bytes());
    (trace.to_vec(), (n | 1 << 63).to_be_bytes().to_vec())
}

fn tag_hash(tag: &str) -> u64 {
    // FNV-1a: stable, and distinct runs get distinct trace ids.
    tag.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// One export carrying the plan's spans (records go to the API, not here). Returns the request,
/// the intent to follow to its verdict (with the state it must reach), and the open intents.
pub fn build(
    tag: &str,
    first: u64,
    plan: &Plan,
) -> (
    ExportTraceServiceRequest,
    Option<(String, &'static str)>,
    Vec<String>,
) {
    let h = tag_hash(tag);
    let end = now_nanos();
    let start = end - 300_000_000;
    let mut spans = Vec::with_capacity(plan.noise + plan.completed + plan.open);
    let mut followed = None;
    let mut opened = Vec::with_capacity(plan.open);
    let mut n = first;
    for _ in 0..plan.noise {
        let (trace_id, span_id) = ids(h, n);
        spans.push(Span {
            trace_id,
            span_id,
            name: "chat gpt-4o".into(),
            kind: 3,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes: vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.request.model", "gpt-4o"),
                kv_int("gen_ai.usage.input_tokens", 812),
                kv_int("gen_ai.usage.output_tokens", 64),
            ],
            ..Default::default()
        });
        n += 1;
    }
    for i in 0..plan.completed + plan.open {
        let completed = i < plan.completed;
        let (trace_id, span_id) = ids(h, n);
        let intent = format!("{tag}-{n}");
        let mut attributes = vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "issue_refund"),
            kv(
                "gen_ai.tool.call.arguments",
                r#"{"order_id":"1042","amount":"45.00","currency":"usd"}"#,
            ),
            kv("reckon.intent.id", intent.clone()),
            kv("reckon.idempotency_key", format!("key-{intent}")),
        ];
        if completed {
            attributes.extend([
                kv_int("http.response.status_code", 200),
                kv("reckon.downstream.object_id", format!("re-{intent}")),
                kv("reckon.downstream.status", "succeeded"),
                kv("reckon.outcome", "succeeded"),
            ]);
        } else {
            attributes.extend([kv("error.type", "timeout"), kv("reckon.outcome", "unknown")]);
        }
        spans.push(Span {
            trace_id,
            span_id,
            name: "execute_tool issue_refund".into(),
            kind: 3,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            status: (!completed).then(|| Status {
                code: status::StatusCode::Error as i32,
                ..Default::default()
            }),
            ..Default::default()
        });
        if followed.is_none() {
            followed = Some((
                intent.clone(),
                if completed { "completed" } else { "unknown" },
            ));
        }
        if !completed {
            opened.push(intent);
        }
        n += 1;
    }
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "reckon-loadgen")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "reckon.loadgen".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (request, followed, opened)
}

pub fn span_count(r: &ExportTraceServiceRequest) -> u64 {
    r.resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len() as u64)
        .sum()
}

/// NDJSON records that settle these open intents (their refund succeeded after all).
pub fn records_ndjson(intents: &[String]) -> Option<(String, u64)> {
    if intents.is_empty() {
        return None;
    }
    let observed = crate::codec::rfc3339(crate::model::Timestamp(now_nanos() as i64));
    let mut body = String::with_capacity(intents.len() * 220);
    for intent in intents {
        body.push_str(
            &serde_json::json!({
                "kind": "refund",
                "object_id": format!("re-{intent}"),
                "intent_id": intent,
                "idempotency_key": format!("key-{intent}"),
                "status": "succeeded",
                "amount": "45.00",
                "currency": "usd",
                "target": "1042",
                "observed_at": observed,
                "source": "loadgen",
            })
            .to_string(),
        );
        body.push('\n');
    }
    Some((body, intents.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_plan_whole_batches() {
        let m = Mix::parse("noise=70, completed=10,open=10,records=10").unwrap();
        assert_eq!(m.to_string(), "noise=70,completed=10,open=10,records=10");
        let p = m.plan(1000);
        assert_eq!(
            (p.noise, p.completed, p.open, p.records),
            (700, 100, 100, 100)
        );
        let p = Mix::parse("completed=1,open=2").unwrap().plan(10);
        assert_eq!(p.completed + p.open, 10);
        assert!(Mix::parse("").is_err());
        assert!(Mix::parse("bogus=1").is_err());
        assert!(Mix::parse("noise=x").is_err());
    }

    #[test]
    fn a_batch_carries_what_its_plan_says_with_unique_ids() {
        let plan = Mix::parse("noise=2,completed=1,open=1").unwrap().plan(8);
        let (req, followed, opened) = build("t", 100, &plan);
        assert_eq!(
            span_count(&req),
            (plan.noise + plan.completed + plan.open) as u64
        );
        assert_eq!(followed.map(|f| f.1), Some("completed"));
        assert_eq!(opened.len(), plan.open);
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        let mut seen = std::collections::HashSet::new();
        assert!(spans
            .iter()
            .all(|s| seen.insert((s.trace_id.clone(), s.span_id.clone()))));
    }
}
