//! Tool-span recognition (DESIGN.md "Recognising tool spans") and conversion to events.
//!
//! Almost every span an agent exports is not a tool call (LLM calls, HTTP clients, framework
//! internals), so the decision "not a tool span" is made first, over the borrowed prost span
//! (its name and attribute keys) without allocating. Only tool spans get a full attribute scan
//! and owned data.

use std::borrow::Cow;
use std::fmt::Display;

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use serde_json::Value as J;

use super::attr;
use super::value::{find, int_of, json_of, json_text, nanos, str_of, text_of};
use super::Outcome;
use crate::contract::{Contract, Contracts};
use crate::ingest::limits;
use crate::model::{
    Attempt, Event, Readback, ReportedOutcome, SpanRef, Timestamp, REDACTED_ARGUMENTS,
    REDACTED_ARGUMENTS_JSON,
};

/// Span name prefix of the OTel GenAI execute-tool span (`execute_tool {gen_ai.tool.name}`).
const EXECUTE_TOOL: &str = "execute_tool";

pub(crate) fn span_to_event(span: &Span, contracts: &Contracts) -> Outcome {
    // Ids are checked on every span, tool or not: a span without a valid identity is malformed
    // OTLP whatever it describes, and the check costs two length comparisons.
    let id = match span_ref(span) {
        Ok(id) => id,
        Err(e) => return Outcome::Rejected(format!("span '{}': {e}", clip(&span.name))),
    };
    if !is_tool_span(span) {
        return Outcome::Dropped;
    }
    tool_span_to_event(span, id, contracts)
}

fn span_ref(span: &Span) -> Result<SpanRef, String> {
    let trace_id: [u8; 16] = span
        .trace_id
        .as_slice()
        .try_into()
        .map_err(|_| format!("trace id has {} bytes, want 16", span.trace_id.len()))?;
    let span_id: [u8; 8] = span
        .span_id
        .as_slice()
        .try_into()
        .map_err(|_| format!("span id has {} bytes, want 8", span.span_id.len()))?;
    // All-zero ids are the W3C "invalid" value: two such spans would collide on identity.
    if trace_id == [0; 16] || span_id == [0; 8] {
        return Err("all-zero trace or span id".into());
    }
    Ok(SpanRef { trace_id, span_id })
}

/// The hot path. Keys are dispatched on their first byte so that the usual attribute
/// (`http.*`, `net.*`, `service.*`, `llm.*`...) costs one byte comparison.
///
/// A span is a tool span when an emitter convention marks it as one (whatever another marks it
/// as: instrumentations mark the spans they make, so a tool mark is the word of the one that made
/// the span, and dropping a real write would hide its effects), or when no convention marks it
/// as anything else and it carries the executor's `reckon.intent.id` with
/// `reckon.idempotency_key` or `reckon.action`.
///
/// `reckon.intent.id` alone does not make a tool span: baggage processors copy it onto every
/// span of a trace (agent steps, HTTP client spans). Nor do `reckon.*` attributes on a span its
/// own convention marks as something else (a model call, an agent run, a workflow): baggage
/// processors copy the key too, and a chat span is never a write, nor a read-back (DESIGN.md
/// "Recognising tool spans"; the read-back decision in ARCHITECTURE.md).
fn is_tool_span(span: &Span) -> bool {
    let name = span.name.as_str();
    if name == "ai.toolCall" || name == "running tool" || is_execute_tool_name(name) {
        return true;
    }
    let mut other = is_vercel_non_tool_name(name);
    let (mut intent, mut executor) = (false, false);
    for kv in &span.attributes {
        let key = kv.key.as_bytes();
        let mark = match key.first() {
            Some(b'g') if key == b"gen_ai.operation.name" => {
                Convention::GenAi.mark(kv.value.as_ref())
            }
            Some(b'm') if key == b"mcp.method.name" => Convention::Mcp.mark(kv.value.as_ref()),
            Some(b'o') if key == b"openinference.span.kind" => {
                Convention::OpenInference.mark(kv.value.as_ref())
            }
            Some(b't') if key == b"traceloop.span.kind" => {
                Convention::Traceloop.mark(kv.value.as_ref())
            }
            // Laminar (`@observe(span_type="TOOL")`) and Langfuse (`as_type="tool"`).
            Some(b'l') if key == b"lmnr.span.type" => Convention::Laminar.mark(kv.value.as_ref()),
            Some(b'l') if key == b"langfuse.observation.type" => {
                Convention::Langfuse.mark(kv.value.as_ref())
            }
            Some(b'a') if key == b"ai.operationId" => Convention::Vercel.mark(kv.value.as_ref()),
            Some(b'r') => {
                if key == attr::INTENT_ID.as_bytes() {
                    intent |= kv.value.as_ref().is_some_and(has_text);
                } else if key == attr::IDEMPOTENCY_KEY.as_bytes() || key == attr::ACTION.as_bytes()
                {
                    executor |= kv.value.as_ref().is_some_and(has_text);
                }
                Mark::Unmarked
            }
            _ => Mark::Unmarked,
        };
        match mark {
            Mark::Tool => return true,
            Mark::Other => other = true,
            Mark::Unmarked => {}
        }
    }
    !other && intent && executor
}

/// What one convention's marker says a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// A tool call.
    Tool,
    /// Something else by name: a model call, an agent run, a workflow step, a retrieval.
    Other,
    /// Nothing: no value, a blank one, or the convention's generic kind (`UNKNOWN`, a Langfuse
    /// `span`, a Laminar `DEFAULT`), which says what the span is not no more than an HTTP
    /// client span does. An executor's span wrapped by a default decorator stays its own.
    Unmarked,
}

/// The conventions that mark what a span is, each by one attribute.
#[derive(Clone, Copy, Debug)]
enum Convention {
    /// `gen_ai.operation.name`: `execute_tool`; else `chat`, `text_completion`, `embeddings`,
    /// `generate_content`, `invoke_agent`, `create_agent`...
    GenAi,
    /// `mcp.method.name`: `tools/call`; else `tools/list`, `resources/read`, `initialize`...
    Mcp,
    /// `openinference.span.kind`: `TOOL`; else `LLM`, `CHAIN`, `AGENT`, `RETRIEVER`,
    /// `EMBEDDING`, `RERANKER`, `GUARDRAIL`, `EVALUATOR`, `PROMPT`; `UNKNOWN` is generic.
    OpenInference,
    /// `traceloop.span.kind`: `tool`; else `workflow`, `task`, `agent`; `unknown` is generic.
    Traceloop,
    /// `lmnr.span.type`: `TOOL`; else `LLM`, `PIPELINE`, `EXECUTOR`, `EVALUATOR`...; `DEFAULT`
    /// is generic.
    Laminar,
    /// `langfuse.observation.type`: `tool`; else `generation`, `agent`, `chain`, `retriever`,
    /// `embedding`, `evaluator`, `guardrail`; `span` and `event` are generic.
    Langfuse,
    /// Vercel AI SDK's `ai.operationId`: `ai.toolCall`; else `ai.generateText`,
    /// `ai.streamText`, their `.doGenerate`/`.doStream` calls, `ai.embed`...
    Vercel,
}

impl Convention {
    fn tool(self) -> &'static str {
        match self {
            Convention::GenAi => EXECUTE_TOOL,
            Convention::Mcp => "tools/call",
            Convention::OpenInference | Convention::Traceloop | Convention::Langfuse => "tool",
            Convention::Laminar => "TOOL",
            Convention::Vercel => "ai.toolCall",
        }
    }

    fn generic(self) -> &'static [&'static str] {
        match self {
            Convention::OpenInference | Convention::Traceloop => &["unknown"],
            Convention::Laminar => &["default"],
            Convention::Langfuse => &["span", "event"],
            Convention::GenAi | Convention::Mcp | Convention::Vercel => &[],
        }
    }

    /// Kinds compare without case: OpenInference writes `TOOL`, hand-rolled emitters `tool`.
    fn mark(self, value: Option<&AnyValue>) -> Mark {
        let Some(v) = value
            .and_then(str_of)
            .map(str::trim)
            .filter(|v| !v.is_empty())
        else {
            return Mark::Unmarked;
        };
        if v.eq_ignore_ascii_case(self.tool()) {
            Mark::Tool
        } else if self.generic().iter().any(|g| v.eq_ignore_ascii_case(g)) {
            Mark::Unmarked
        } else {
            Mark::Other
        }
    }
}

/// The Vercel AI SDK's (up to 6) spans other than `ai.toolCall`, by name: the calls that run a
/// model (`ai.generateText`, `ai.streamText.doStream`, `ai.embedMany`...). Names only of the
/// SDK's own operations, so a user's span that happens to start with `ai.` is not caught.
fn is_vercel_non_tool_name(name: &str) -> bool {
    const OPERATIONS: [&str; 10] = [
        "generateText",
        "streamText",
        "generateObject",
        "streamObject",
        "embed",
        "embedMany",
        "generateImage",
        "generateSpeech",
        "transcribe",
        "rerank",
    ];
    let Some(rest) = name.strip_prefix("ai.") else {
        return false;
    };
    let operation = rest.split_once('.').map_or(rest, |(op, _)| op);
    OPERATIONS.contains(&operation)
}

fn is_execute_tool_name(name: &str) -> bool {
    name.strip_prefix(EXECUTE_TOOL)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
}

/// `text_of(v).is_some()` without building the text.
fn has_text(v: &AnyValue) -> bool {
    match &v.value {
        Some(Value::StringValue(s)) => !s.trim().is_empty(),
        Some(Value::IntValue(_)) => true,
        _ => false,
    }
}

/// The attributes a tool span may carry, borrowed from one pass. The first occurrence of a key
/// wins, as for any OTLP consumer faced with (invalid) duplicates.
#[derive(Default)]
struct Scan<'a> {
    intent_id: Option<&'a AnyValue>,
    idempotency_key: Option<&'a AnyValue>,
    action: Option<&'a AnyValue>,
    outcome: Option<&'a AnyValue>,
    object_id: Option<&'a AnyValue>,
    object_status: Option<&'a AnyValue>,
    readback_ids: Option<&'a AnyValue>,
    http_status: Option<&'a AnyValue>,
    error_type: Option<&'a AnyValue>,
    // Tool name, by convention.
    genai_tool: Option<&'a AnyValue>,
    vercel_tool: Option<&'a AnyValue>,
    openinference_tool: Option<&'a AnyValue>,
    traceloop_entity: Option<&'a AnyValue>,
    // Arguments, by convention.
    genai_args: Option<&'a AnyValue>,
    adk_args: Option<&'a AnyValue>,
    vercel_args: Option<&'a AnyValue>,
    pydantic_args: Option<&'a AnyValue>,
    traceloop_input: Option<&'a AnyValue>,
    openinference_input: Option<&'a AnyValue>,
    laminar_input: Option<&'a AnyValue>,
    langfuse_input: Option<&'a AnyValue>,
}

impl<'a> Scan<'a> {
    /// The executor's own attributes beyond the intent id: what says the span is its attempt
    /// or read-back rather than something that happened inside the intent's trace.
    fn marked_by_executor(&self) -> bool {
        [
            self.idempotency_key,
            self.action,
            self.outcome,
            self.object_id,
            self.object_status,
        ]
        .into_iter()
        .flatten()
        .any(has_text)
    }

    fn of(attrs: &'a [KeyValue]) -> Self {
        let mut s = Scan::default();
        for kv in attrs {
            let Some(v) = kv.value.as_ref() else { continue };
            let slot = match kv.key.as_str() {
                attr::INTENT_ID => &mut s.intent_id,
                attr::IDEMPOTENCY_KEY => &mut s.idempotency_key,
                attr::ACTION => &mut s.action,
                attr::OUTCOME => &mut s.outcome,
                attr::DOWNSTREAM_OBJECT_ID => &mut s.object_id,
                attr::DOWNSTREAM_STATUS => &mut s.object_status,
                attr::READBACK_OBJECT_IDS => &mut s.readback_ids,
                // `http.status_code` is the pre-1.23 semconv name, still sent by older SDKs.
                attr::HTTP_STATUS_CODE | "http.status_code" => &mut s.http_status,
                attr::ERROR_TYPE => &mut s.error_type,
                "gen_ai.tool.name" => &mut s.genai_tool,
                "ai.toolCall.name" => &mut s.vercel_tool,
                "tool.name" => &mut s.openinference_tool,
                "traceloop.entity.name" => &mut s.traceloop_entity,
                "gen_ai.tool.call.arguments" => &mut s.genai_args,
                "gcp.vertex.agent.tool_call_args" => &mut s.adk_args,
                "ai.toolCall.args" => &mut s.vercel_args,
                "tool_arguments" => &mut s.pydantic_args,
                "traceloop.entity.input" => &mut s.traceloop_input,
                "input.value" => &mut s.openinference_input,
                "lmnr.span.input" => &mut s.laminar_input,
                "langfuse.observation.input" => &mut s.langfuse_input,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(v);
            }
        }
        s
    }
}

fn tool_span_to_event(span: &Span, id: SpanRef, contracts: &Contracts) -> Outcome {
    let why = |msg: &dyn Display| {
        format!(
            "span {}/{} '{}': {msg}",
            id.trace_hex(),
            id.span_hex(),
            clip(&span.name)
        )
    };
    // Checked before anything is read or copied from the span.
    if let Err(e) = limits::check_span(span) {
        return Outcome::Rejected(why(&e));
    }
    let scan = Scan::of(&span.attributes);
    let tool = tool_name(&scan, &span.name);
    let contract = contracts.for_tool(&tool);

    let read = match scan.action {
        None => false,
        Some(v) => match str_of(v).map(str::trim) {
            Some(a) if a.is_empty() || a.eq_ignore_ascii_case("write") => false,
            Some(a) if a.eq_ignore_ascii_case("read") => true,
            // Guessing here would turn a read into a write attempt (and a resend finding).
            _ => return Outcome::Rejected(why(&"reckon.action is neither \"write\" nor \"read\"")),
        },
    };

    let intent_attr = scan.intent_id.and_then(text_of);
    // A tool no contract covers is audited only when the executor marked the span as its own:
    // `reckon.intent.id` alone is context (baggage processors copy it onto every span of the
    // trace, the agent's lookups and searches too), and auditing those as writes of unknown
    // outcome would open an escalation per read.
    if contract.is_none() && (intent_attr.is_none() || !scan.marked_by_executor()) {
        return Outcome::Dropped;
    }

    // Parsed only now: arguments are the one costly part of a tool span.
    let args = arguments(&scan, span);
    let intent_id = match intent_attr {
        Some(i) => i.into_owned(),
        None => match by_pointer(
            args.as_ref(),
            contract.and_then(|c| c.intent_id_pointer.as_deref()),
        ) {
            Some(i) => i,
            None => return Outcome::DroppedNoIntent(id.trace_hex(), tool.into_owned()),
        },
    };
    let start = Timestamp(nanos(span.start_time_unix_nano));
    let end = Timestamp(nanos(span.end_time_unix_nano));
    let reported_outcome = scan.outcome.and_then(str_of).and_then(outcome);

    if read {
        let object_ids = match scan.readback_ids.map(object_ids) {
            Some(Ok(ids)) => ids,
            Some(Err(e)) => return Outcome::Rejected(why(&e)),
            // An absent list is not "found nothing": recording it as such could raise an
            // inconclusive-read-back finding from a span that said nothing.
            None => {
                return Outcome::Rejected(why(
                    &"read span without reckon.readback.object_ids (send [] when the read found nothing)",
                ))
            }
        };
        return Outcome::Event(Event::Readback(Readback {
            span: id,
            intent_id,
            tool: tool.into_owned(),
            at: start,
            end,
            object_ids,
            reported_outcome,
        }));
    }

    let idempotency_key = scan
        .idempotency_key
        .and_then(text_of)
        .map(Cow::into_owned)
        .or_else(|| key_by_pointer(args.as_ref(), contract));
    Outcome::Event(Event::Attempt(Attempt {
        span: id,
        intent_id,
        tool: tool.into_owned(),
        start,
        end,
        idempotency_key,
        http_status: scan
            .http_status
            .and_then(int_of)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| (100..=599).contains(s)),
        error_type: scan.error_type.and_then(text_of).map(Cow::into_owned),
        span_error: span
            .status
            .as_ref()
            .is_some_and(|s| s.code == StatusCode::Error as i32),
        object_id: scan.object_id.and_then(text_of).map(Cow::into_owned),
        object_status: scan.object_status.and_then(text_of).map(Cow::into_owned),
        reported_outcome,
        arguments: args.map(|a| match a {
            // Kept as the marker, so the verdict can say the content was redacted.
            J::String(s) if s == REDACTED_ARGUMENTS => REDACTED_ARGUMENTS_JSON.to_string(),
            a => a.to_string(),
        }),
    }))
}

fn key_by_pointer(args: Option<&J>, contract: Option<&Contract>) -> Option<String> {
    by_pointer(
        args,
        contract.and_then(|c| c.idempotency_key_pointer.as_deref()),
    )
}

fn by_pointer(args: Option<&J>, pointer: Option<&str>) -> Option<String> {
    args?.pointer(pointer?).and_then(json_text)
}

/// `reckon.outcome` is a claim, not evidence: a value we cannot read is ignored, not refused.
fn outcome(s: &str) -> Option<ReportedOutcome> {
    ReportedOutcome::parse(&s.trim().to_ascii_lowercase())
}

fn tool_name<'a>(scan: &Scan<'a>, span_name: &'a str) -> Cow<'a, str> {
    [
        scan.genai_tool,
        scan.vercel_tool,
        scan.openinference_tool,
        scan.traceloop_entity,
    ]
    .into_iter()
    .flatten()
    .find_map(text_of)
    .unwrap_or_else(|| {
        // Span-name forms: `execute_tool {name}` (GenAI) and `tools/call {name}` (MCP).
        let from_name = span_name
            .strip_prefix("execute_tool ")
            .or_else(|| span_name.strip_prefix("tools/call "))
            .map(str::trim)
            .filter(|n| !n.is_empty());
        Cow::Borrowed(from_name.unwrap_or(span_name))
    })
}

/// The call's arguments, from wherever this emitter put them.
fn arguments(scan: &Scan<'_>, span: &Span) -> Option<J> {
    let candidates = [
        scan.genai_args,
        scan.adk_args,
        scan.vercel_args,
        scan.pydantic_args,
        scan.traceloop_input,
        scan.openinference_input,
        scan.laminar_input,
        scan.langfuse_input,
    ];
    let direct = [
        scan.genai_args,
        scan.adk_args,
        scan.vercel_args,
        scan.pydantic_args,
    ]
    .into_iter()
    .flatten()
    .find_map(json_of)
    .map(langchain_arguments)
    .or_else(|| {
        scan.traceloop_input
            .and_then(json_of)
            .map(langchain_arguments)
            .map(traceloop_arguments)
    })
    // `tool.parameters` is the tool's JSON schema; the call itself is `input.value` (LlamaIndex
    // writes it as `{"kwargs": {...}}`, LangChain as its callback envelope).
    .or_else(|| {
        scan.openinference_input
            .and_then(json_of)
            .map(langchain_arguments)
            .map(kwargs_arguments)
    })
    // Laminar's Python `observe` records the call's parameters by name; its JS `observe`, the
    // argument list.
    .or_else(|| {
        scan.laminar_input
            .and_then(json_of)
            .map(langchain_arguments)
            .map(lone_object)
    })
    // Langfuse's Python `observe` records `{"args": [...], "kwargs": {...}}` as OpenLLMetry does;
    // its JS SDK, the input object as given.
    .or_else(|| {
        scan.langfuse_input
            .and_then(json_of)
            .map(langchain_arguments)
            .map(traceloop_arguments)
            .map(lone_object)
    });
    direct.or_else(|| event_arguments(span)).or_else(|| {
        // Content capture off in a way that still writes the attribute: say so rather than
        // pretend there were no arguments to capture.
        candidates
            .into_iter()
            .flatten()
            .any(|v| text_of(v).is_some_and(|t| is_redacted(&t)))
            .then(|| J::String(REDACTED_ARGUMENTS.to_string()))
    })
}

/// `{"kwargs": {...}}` (and nothing else that is an argument) is a call's keyword arguments.
fn kwargs_arguments(v: J) -> J {
    match v {
        J::Object(mut m)
            if m.len() <= 2
                && matches!(m.get("kwargs"), Some(J::Object(_)))
                && m.keys().all(|k| k == "kwargs" || k == "args") =>
        {
            m.remove("kwargs").unwrap_or_default()
        }
        other => other,
    }
}

/// What instrumentations write instead of the content when capture of sensitive data is off
/// (OpenAI Agents SDK through OpenInference: `__REDACTED__`).
fn is_redacted(text: &str) -> bool {
    let t = text.trim().trim_matches('"');
    ["__REDACTED__", "[REDACTED]", "<REDACTED>", "REDACTED"]
        .iter()
        .any(|m| t.eq_ignore_ascii_case(m))
}

/// LangChain's tool callbacks (both its OpenInference and its OpenLLMetry instrumentation)
/// record the callback's envelope, not the call: `{"input_str": "<python repr>", "inputs":
/// {...}, "kwargs": {...}, "tags": [...], "metadata": {...}}`. The call's arguments are
/// `inputs`, else non-empty `kwargs`, else `input_str` when it is JSON.
fn langchain_arguments(v: J) -> J {
    let J::Object(mut m) = v else {
        return v;
    };
    if !m.contains_key("input_str") || !(m.contains_key("inputs") || m.contains_key("kwargs")) {
        return J::Object(m);
    }
    if let Some(J::Object(inputs)) = m.remove("inputs") {
        if !inputs.is_empty() {
            return J::Object(inputs);
        }
    }
    if let Some(J::Object(kwargs)) = m.remove("kwargs") {
        if !kwargs.is_empty() {
            return J::Object(kwargs);
        }
    }
    match m.remove("input_str") {
        Some(J::String(s)) => match serde_json::from_str::<J>(&s) {
            Ok(parsed @ J::Object(_)) => parsed,
            _ => J::Object(Default::default()),
        },
        _ => J::Object(Default::default()),
    }
}

/// Strands (and other event-based GenAI emitters) put the arguments in span events.
fn event_arguments(span: &Span) -> Option<J> {
    span.events.iter().find_map(|ev| match ev.name.as_str() {
        // Strands with the default (pre-1.37) conventions: `content` is the input as JSON.
        "gen_ai.tool.message" => find(&ev.attributes, "content").and_then(json_of),
        // Strands with `gen_ai_latest_experimental`: a message list holding a `tool_call` part.
        "gen_ai.client.inference.operation.details" => {
            find(&ev.attributes, "gen_ai.input.messages")
                .and_then(json_of)
                .and_then(tool_call_part_arguments)
        }
        _ => find(&ev.attributes, "gen_ai.tool.call.arguments").and_then(json_of),
    })
}

fn tool_call_part_arguments(messages: J) -> Option<J> {
    let J::Array(messages) = messages else {
        return None;
    };
    messages.into_iter().find_map(|mut m| {
        let J::Array(parts) = m.get_mut("parts")?.take() else {
            return None;
        };
        parts.into_iter().find_map(|mut p| {
            if p.get("type").and_then(J::as_str) != Some("tool_call") {
                return None;
            }
            match p.get_mut("arguments")?.take() {
                // Some emitters double-encode the arguments.
                J::String(s) => serde_json::from_str(&s).ok(),
                other => Some(other),
            }
        })
    })
}

/// OpenLLMetry records a Python call as `{"args": [...], "kwargs": {...}}` (the JS SDK as
/// `{"args": [...]}`). Tools are called with keyword arguments in Python and with one object
/// in JS, so the arguments are the kwargs, or else a lone object positional argument.
fn traceloop_arguments(input: J) -> J {
    let J::Object(mut m) = input else {
        return input;
    };
    if !m.contains_key("args") && !m.contains_key("kwargs") {
        return J::Object(m);
    }
    match m.remove("kwargs") {
        Some(J::Object(kw)) if !kw.is_empty() => J::Object(kw),
        kwargs => match m.remove("args") {
            Some(J::Array(mut a)) if a.len() == 1 && a[0].is_object() => {
                a.pop().unwrap_or_default()
            }
            _ => match kwargs {
                Some(kw @ J::Object(_)) => kw,
                _ => J::Object(Default::default()),
            },
        },
    }
}

/// An argument list of one object is that object (a JS function called with one options object).
fn lone_object(v: J) -> J {
    match v {
        J::Array(mut a) if a.len() == 1 && a[0].is_object() => a.pop().unwrap_or_default(),
        other => other,
    }
}

/// `reckon.readback.object_ids`: a string array, or the same array JSON-encoded by SDKs that
/// only set strings.
fn object_ids(v: &AnyValue) -> Result<Vec<String>, String> {
    const BAD: &str = "reckon.readback.object_ids is not an array of ids";
    match &v.value {
        Some(Value::ArrayValue(a)) => a
            .values
            .iter()
            .map(|v| {
                text_of(v)
                    .map(Cow::into_owned)
                    .ok_or_else(|| BAD.to_string())
            })
            .collect(),
        Some(Value::StringValue(s)) => {
            let t = s.trim();
            if t.is_empty() {
                Ok(Vec::new())
            } else if t.starts_with('[') {
                let items: Vec<J> = serde_json::from_str(t).map_err(|e| format!("{BAD}: {e}"))?;
                items
                    .iter()
                    .map(|v| json_text(v).ok_or_else(|| BAD.to_string()))
                    .collect()
            } else {
                Ok(vec![t.to_string()])
            }
        }
        _ => Err(BAD.to_string()),
    }
}

/// Span names and ids in messages are input: keep them short.
pub(crate) fn clip(s: &str) -> Cow<'_, str> {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => Cow::Owned(format!("{}…", &s[..i])),
        None => Cow::Borrowed(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceloop_arguments_prefers_kwargs_then_lone_object() {
        let t = |s: &str| traceloop_arguments(serde_json::from_str(s).unwrap()).to_string();
        assert_eq!(
            t(r#"{"args": [], "kwargs": {"order_id": "1042"}}"#),
            r#"{"order_id":"1042"}"#
        );
        assert_eq!(
            t(r#"{"args": [{"order_id": "1042"}]}"#),
            r#"{"order_id":"1042"}"#
        );
        assert_eq!(t(r#"{"args": [1, 2], "kwargs": {}}"#), "{}");
        assert_eq!(t(r#"{"order_id": "1042"}"#), r#"{"order_id":"1042"}"#);
    }

    #[test]
    fn object_ids_accepts_arrays_json_and_single_ids() {
        let s = |v: &str| AnyValue {
            value: Some(Value::StringValue(v.into())),
        };
        assert_eq!(
            object_ids(&s(r#"["re_1","re_2"]"#)).unwrap(),
            vec!["re_1", "re_2"]
        );
        assert_eq!(object_ids(&s("[]")).unwrap(), Vec::<String>::new());
        assert_eq!(object_ids(&s("re_9")).unwrap(), vec!["re_9"]);
        assert!(object_ids(&s(r#"[{"id":1}]"#)).is_err());
        assert!(object_ids(&AnyValue {
            value: Some(Value::BoolValue(true))
        })
        .is_err());
    }

    #[test]
    fn execute_tool_name_form_needs_the_separator() {
        assert!(is_execute_tool_name("execute_tool issue_refund"));
        assert!(is_execute_tool_name("execute_tool"));
        assert!(!is_execute_tool_name("execute_tools_batch"));
    }

    #[test]
    fn tool_name_falls_back_to_span_name_forms() {
        let scan = Scan::default();
        assert_eq!(
            tool_name(&scan, "execute_tool issue_refund"),
            "issue_refund"
        );
        assert_eq!(tool_name(&scan, "tools/call issue_refund"), "issue_refund");
        assert_eq!(tool_name(&scan, "execute_tool "), "execute_tool ");
        assert_eq!(tool_name(&scan, "refund-order"), "refund-order");
        let name = AnyValue {
            value: Some(Value::StringValue("from_attr".into())),
        };
        let scan = Scan {
            traceloop_entity: Some(&name),
            ..Scan::default()
        };
        assert_eq!(tool_name(&scan, "x.tool"), "from_attr");
    }

    #[test]
    fn clip_keeps_char_boundaries() {
        let long = "é".repeat(100);
        let c = clip(&long);
        assert_eq!(c.chars().count(), 81);
        assert_eq!(clip("short"), "short");
    }
}
