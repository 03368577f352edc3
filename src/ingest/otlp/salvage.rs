//! A request prost refused whole, taken apart item by item.
//!
//! prost refuses a whole message when one `string` field in it holds invalid UTF-8 (or one
//! item is otherwise malformed), so one exporter's bad span would refuse every span of its
//! export. When the whole decode fails, this walks the request's protobuf framing (the
//! wire format, not the messages): every span (or log record) is decoded alone, and so is
//! every resource and scope; a span that does not decode is cut out (and refused, named by
//! its ids), a resource or scope that does not decode is cut out with all its spans. What is
//! left is re-encoded byte for byte as it came and decoded again by the caller. A body whose
//! framing itself is broken (a length past the end, a group) is not salvaged: the caller
//! answers the original error.
//!
//! Traces and logs share the shape: the request's field 1 is a repeated `Resource*`, whose
//! field 1 is the `Resource`, field 2 a repeated `Scope*`, field 3 the schema URL; a `Scope*`
//! has the scope in field 1, the items in field 2, its schema URL in field 3.

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

/// One field of a message as it is on the wire.
struct Field<'a> {
    number: u64,
    /// Length-delimited payload (wire type 2), else `None`.
    payload: Option<&'a [u8]>,
    /// The whole field, key included, to copy as it came.
    raw: &'a [u8],
}

fn varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of one message, or `None` when its framing is broken.
fn fields(buf: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let start = at;
        let key = varint(buf, &mut at)?;
        let number = key >> 3;
        let payload = match key & 7 {
            0 => {
                varint(buf, &mut at)?;
                None
            }
            1 => {
                at = at.checked_add(8).filter(|&e| e <= buf.len())?;
                None
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|&e| e <= buf.len())?;
                let p = &buf[at..end];
                at = end;
                Some(p)
            }
            5 => {
                at = at.checked_add(4).filter(|&e| e <= buf.len())?;
                None
            }
            _ => return None,
        };
        if number == 0 {
            return None;
        }
        out.push(Field {
            number,
            payload,
            raw: &buf[start..at],
        });
    }
    Some(out)
}

fn put_len(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
    prost::encoding::encode_key(
        number as u32,
        prost::encoding::WireType::LengthDelimited,
        out,
    );
    prost::encoding::encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// What kind of item a request carries, and how to name one that does not decode.
pub(crate) trait Item: Message + Default {
    /// "span" or "log record".
    const NOUN: &'static str;
    /// Field numbers of the item's trace id and span id (bytes).
    const IDS: (u64, u64);
}

impl Item for opentelemetry_proto::tonic::trace::v1::Span {
    const NOUN: &'static str = "span";
    const IDS: (u64, u64) = (1, 2);
}

impl Item for opentelemetry_proto::tonic::logs::v1::LogRecord {
    const NOUN: &'static str = "log record";
    const IDS: (u64, u64) = (9, 10);
}

/// The ids an undecodable item carries, for its reason ("span 00f0... of trace 5b8e...").
fn name<M: Item>(item: &[u8]) -> String {
    let (mut trace, mut span) = (None, None);
    for f in fields(item).unwrap_or_default() {
        if f.number == M::IDS.0 {
            trace = f.payload;
        } else if f.number == M::IDS.1 {
            span = f.payload;
        }
    }
    match (span, trace) {
        (Some(s), Some(t)) if !s.is_empty() => {
            format!("{} {} of trace {}", M::NOUN, hex::encode(s), hex::encode(t))
        }
        _ => format!("a {} without ids", M::NOUN),
    }
}

fn why(e: &prost::DecodeError) -> String {
    // prost says "invalid string value: data is not UTF-8 encoded" with the path of messages.
    e.to_string()
}

/// A schema URL (field 3 of a resource or scope group) must be UTF-8 too.
fn utf8_ok(f: &Field<'_>) -> bool {
    f.payload.is_none_or(|p| std::str::from_utf8(p).is_ok())
}

/// What [`salvage`] cut out: how many items, and the reasons of the first
/// [`super::MAX_REASONS`] (a body of a million broken spans must not become a million strings).
#[derive(Debug, Default)]
pub(crate) struct Cut {
    pub items: u64,
    pub reasons: Vec<String>,
}

impl Cut {
    fn push(&mut self, reason: impl FnOnce() -> String) {
        self.items += 1;
        if self.reasons.len() < super::MAX_REASONS {
            self.reasons.push(reason());
        }
    }
}

/// The request without the items, scopes and resources that do not decode on their own, and
/// what was cut out. `None` when the framing is broken or nothing was cut (then the whole
/// request's error stands).
pub(crate) fn salvage<M: Item>(body: &[u8]) -> Option<(Vec<u8>, Cut)> {
    let mut cut = Cut::default();
    let mut out = Vec::with_capacity(body.len());
    for group in fields(body)? {
        let (1, Some(group_body)) = (group.number, group.payload) else {
            out.extend_from_slice(group.raw);
            continue;
        };
        let parts = fields(group_body)?;
        let bad_resource = parts.iter().find_map(|f| match (f.number, f.payload) {
            (1, Some(p)) => Resource::decode(p).err().map(|e| why(&e)),
            (3, _) if !utf8_ok(f) => Some("schema_url is not UTF-8".into()),
            _ => None,
        });
        let mut kept = Vec::with_capacity(group_body.len());
        for part in &parts {
            let (2, Some(scope_body)) = (part.number, part.payload) else {
                kept.extend_from_slice(part.raw);
                continue;
            };
            let scope_parts = fields(scope_body)?;
            let bad_scope = bad_resource
                .clone()
                .map(|r| format!("its resource: {r}"))
                .or_else(|| {
                    scope_parts
                        .iter()
                        .find_map(|f| match (f.number, f.payload) {
                            (1, Some(p)) => InstrumentationScope::decode(p)
                                .err()
                                .map(|e| format!("its scope: {}", why(&e))),
                            (3, _) if !utf8_ok(f) => {
                                Some("its scope's schema_url is not UTF-8".into())
                            }
                            _ => None,
                        })
                });
            let mut scope_kept = Vec::with_capacity(scope_body.len());
            for f in &scope_parts {
                match (f.number, f.payload) {
                    (2, Some(item)) => {
                        let bad = match &bad_scope {
                            Some(b) => Some(b.clone()),
                            None => M::decode(item).err().map(|e| why(&e)),
                        };
                        match bad {
                            Some(b) => cut.push(|| format!("{}: {b}", name::<M>(item))),
                            None => scope_kept.extend_from_slice(f.raw),
                        }
                    }
                    _ => scope_kept.extend_from_slice(f.raw),
                }
            }
            if bad_scope.is_none() {
                put_len(&mut kept, 2, &scope_kept);
            }
        }
        if bad_resource.is_none() {
            put_len(&mut out, 1, &kept);
        }
    }
    (cut.items > 0).then_some((out, cut))
}
