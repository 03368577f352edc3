//! End-to-end tests of the OTLP ingest: spans shaped as each emitter sends them, written as the
//! OTLP/JSON the JS and Python exporters produce, plus the protobuf path and log records.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

use super::*;
use crate::contract::Contract;
use crate::model::{
    Amount, Attempt, Decimal, Readback, RecordObservation, ReportedOutcome, SpanRef, Timestamp,
};
use crate::test_builders::{attempt_at, readback_at, record_at};

const TRACE: &str = "5b8efff798038103d269b633813fc60c";
const SPAN: &str = "eee19b7ec3c1b174";
const START: i64 = 1_700_000_000_000_000_000;
const END: i64 = 1_700_000_000_250_000_000;

fn span_ref() -> SpanRef {
    SpanRef {
        trace_id: hex::decode(TRACE).unwrap().try_into().unwrap(),
        span_id: hex::decode(SPAN).unwrap().try_into().unwrap(),
    }
}

/// `issue_refund` names its intent in `reckon.*` attributes; `create_invoice_draft` carries it
/// in its arguments, found through the contract's pointers.
fn contracts() -> Contracts {
    let refund = Contract::example("payments.refund", "issue_refund");
    let mut draft = Contract::example("invoices.draft", "create_invoice_draft");
    draft.intent_id_pointer = Some("/metadata/intent_id".into());
    draft.idempotency_key_pointer = Some("/idempotency_key".into());
    Contracts::new(vec![refund, draft])
}

/// One resource, one scope, the given spans: the envelope every exporter writes.
fn traces_doc(scope: &str, spans: &str) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[
            {{"key":"service.name","value":{{"stringValue":"refund-agent"}}}},
            {{"key":"telemetry.sdk.language","value":{{"stringValue":"python"}}}}]}},
          "scopeSpans":[{{"scope":{{"name":"{scope}","version":"1.0.0"}},"spans":[{spans}]}}]}}]}}"#
    )
}

fn decode(doc: &str) -> Decoded {
    match traces_from_json(doc.as_bytes(), &contracts()) {
        Ok(d) => d,
        Err(e) => panic!("decode failed: {e}\n{doc}"),
    }
}

fn one_event(doc: &str) -> Event {
    let d = decode(doc);
    assert_eq!(d.rejected, 0, "{:?}", d.reasons);
    assert_eq!(d.events.len(), 1, "{d:?}");
    d.events[0].clone()
}

fn one_attempt(doc: &str) -> Attempt {
    match one_event(doc) {
        Event::Attempt(a) => a,
        other => panic!("want an attempt, got {other:?}"),
    }
}

/// The test span as an attempt with only the identity and times set, for `..` in expectations.
fn base_attempt(tool: &str, intent: &str) -> Attempt {
    attempt_at(span_ref(), intent, tool, Timestamp(START), Timestamp(END))
}

// ---------------------------------------------------------------- conventions

/// OTel GenAI semconv as Vercel AI SDK 7 and hand-instrumented executors write it: arguments
/// as a JSON string, a timeout recorded as an ERROR span with `error.type`.
#[test]
fn otel_genai_execute_tool_span() {
    let doc = traces_doc(
        "ai",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","parentSpanId":"8a3c60f7d188f8fa",
            "name":"execute_tool issue_refund","kind":1,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"gen_ai.tool.call.id","value":{{"stringValue":"call_Qx7d"}}}},
              {{"key":"gen_ai.tool.type","value":{{"stringValue":"function"}}}},
              {{"key":"gen_ai.tool.call.arguments","value":{{"stringValue":"{{\"order_id\": \"1042\", \"amount\": 45.0, \"currency\": \"EUR\"}}"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_1042_refund"}}}},
              {{"key":"reckon.idempotency_key","value":{{"stringValue":"idem_7f3a"}}}},
              {{"key":"reckon.outcome","value":{{"stringValue":"unknown"}}}},
              {{"key":"error.type","value":{{"stringValue":"timeout"}}}}],
            "status":{{"code":2,"message":"read timed out"}}}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            idempotency_key: Some("idem_7f3a".into()),
            error_type: Some("timeout".into()),
            span_error: true,
            reported_outcome: Some(ReportedOutcome::Unknown),
            arguments: Some(r#"{"amount":45.0,"currency":"EUR","order_id":"1042"}"#.into()),
            ..base_attempt("issue_refund", "int_1042_refund")
        }
    );
}

/// Content capture off, only the span-name form: the tool name comes from `execute_tool {name}`.
#[test]
fn otel_genai_span_name_form_without_attributes() {
    let doc = traces_doc(
        "executor",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool issue_refund","kind":"SPAN_KIND_INTERNAL",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_1"}}}},
              {{"key":"http.response.status_code","value":{{"intValue":"201"}}}},
              {{"key":"reckon.downstream.object_id","value":{{"stringValue":"re_1"}}}},
              {{"key":"reckon.downstream.status","value":{{"stringValue":"succeeded"}}}},
              {{"key":"reckon.outcome","value":{{"stringValue":"succeeded"}}}}],
            "status":{{"code":"STATUS_CODE_OK"}}}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            http_status: Some(201),
            object_id: Some("re_1".into()),
            object_status: Some("succeeded".into()),
            reported_outcome: Some(ReportedOutcome::Succeeded),
            ..base_attempt("issue_refund", "int_1")
        }
    );
}

/// `gen_ai.tool.call.arguments` may be structured (a kvlist) rather than a JSON string.
#[test]
fn otel_genai_kvlist_arguments_become_compact_json() {
    let doc = traces_doc(
        "executor",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool issue_refund",
            "startTimeUnixNano":{START},"endTimeUnixNano":{END},
            "attributes":[
              {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_1"}}}},
              {{"key":"gen_ai.tool.call.arguments","value":{{"kvlistValue":{{"values":[
                {{"key":"order_id","value":{{"stringValue":"1042"}}}},
                {{"key":"amount","value":{{"doubleValue":45.5}}}},
                {{"key":"lines","value":{{"arrayValue":{{"values":[{{"intValue":"1"}},{{"intValue":2}}]}}}}}},
                {{"key":"notify","value":{{"boolValue":true}}}}]}}}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc).arguments.as_deref(),
        Some(r#"{"amount":45.5,"lines":[1,2],"notify":true,"order_id":"1042"}"#)
    );
}

/// Strands with its default conventions: arguments in a `gen_ai.tool.message` span event.
#[test]
fn strands_arguments_in_tool_message_event() {
    let doc = traces_doc(
        "strands.telemetry.tracer",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool issue_refund","kind":1,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.event.start_time","value":{{"stringValue":"2023-11-14T22:13:20.000000+00:00"}}}},
              {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
              {{"key":"gen_ai.system","value":{{"stringValue":"strands-agents"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"gen_ai.tool.call.id","value":{{"stringValue":"tooluse_kZJMlvQmRJ6eAyylc"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_7"}}}},
              {{"key":"gen_ai.event.end_time","value":{{"stringValue":"2023-11-14T22:13:20.250000+00:00"}}}},
              {{"key":"gen_ai.tool.status","value":{{"stringValue":"success"}}}}],
            "events":[
              {{"timeUnixNano":"{START}","name":"gen_ai.tool.message","attributes":[
                {{"key":"role","value":{{"stringValue":"tool"}}}},
                {{"key":"content","value":{{"stringValue":"{{\"order_id\": \"1042\", \"amount\": 45}}"}}}},
                {{"key":"id","value":{{"stringValue":"tooluse_kZJMlvQmRJ6eAyylc"}}}}]}},
              {{"timeUnixNano":"{END}","name":"gen_ai.choice","attributes":[
                {{"key":"message","value":{{"stringValue":"[{{\"text\": \"refund re_1 created\"}}]"}}}},
                {{"key":"id","value":{{"stringValue":"tooluse_kZJMlvQmRJ6eAyylc"}}}}]}}],
            "status":{{"code":1}}}}"#
        ),
    );
    let a = one_attempt(&doc);
    assert_eq!(a.tool, "issue_refund");
    assert_eq!(a.intent_id, "int_7");
    assert_eq!(
        a.arguments.as_deref(),
        Some(r#"{"amount":45,"order_id":"1042"}"#)
    );
    assert!(!a.span_error);
}

/// Strands with `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`: a `tool_call` part
/// in `gen_ai.input.messages` of a `gen_ai.client.inference.operation.details` event.
#[test]
fn strands_latest_conventions_arguments_in_input_messages() {
    let doc = traces_doc(
        "strands.telemetry.tracer",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool issue_refund","kind":1,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
              {{"key":"gen_ai.provider.name","value":{{"stringValue":"strands-agents"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_8"}}}}],
            "events":[
              {{"timeUnixNano":"{START}","name":"gen_ai.client.inference.operation.details","attributes":[
                {{"key":"gen_ai.input.messages","value":{{"stringValue":"[{{\"role\": \"tool\", \"parts\": [{{\"type\": \"tool_call\", \"name\": \"issue_refund\", \"id\": \"tooluse_1\", \"arguments\": {{\"order_id\": \"1043\"}}}}]}}]"}}}}]}},
              {{"timeUnixNano":"{END}","name":"gen_ai.client.inference.operation.details","attributes":[
                {{"key":"gen_ai.output.messages","value":{{"stringValue":"[{{\"role\": \"tool\", \"parts\": [{{\"type\": \"tool_call_response\", \"id\": \"tooluse_1\", \"response\": [{{\"text\": \"ok\"}}]}}]}}]"}}}}]}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc).arguments.as_deref(),
        Some(r#"{"order_id":"1043"}"#)
    );
}

/// Google ADK: `gcp.vertex.agent.tool_call_args`; this tool's contract reads the intent id and
/// the key from the arguments by JSON pointer.
#[test]
fn google_adk_arguments_and_contract_pointers() {
    let doc = traces_doc(
        "gcp.vertex.agent",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool create_invoice_draft","kind":"SPAN_KIND_INTERNAL",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.system","value":{{"stringValue":"gcp.vertex.agent"}}}},
              {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"create_invoice_draft"}}}},
              {{"key":"gen_ai.tool.description","value":{{"stringValue":"Creates an invoice draft."}}}},
              {{"key":"gen_ai.tool.call.id","value":{{"stringValue":"adk-4c1f2a"}}}},
              {{"key":"gcp.vertex.agent.tool_call_args","value":{{"stringValue":"{{\"customer\": \"cus_9\", \"total\": \"120.00\", \"metadata\": {{\"intent_id\": \"int_draft_9\"}}, \"idempotency_key\": \"draft-9-a\"}}"}}}},
              {{"key":"gcp.vertex.agent.event_id","value":{{"stringValue":"e-77"}}}},
              {{"key":"gcp.vertex.agent.tool_response","value":{{"stringValue":"{{\"id\": \"dr_1\", \"status\": \"draft\"}}"}}}},
              {{"key":"gcp.vertex.agent.llm_request","value":{{"stringValue":"{{}}"}}}},
              {{"key":"gcp.vertex.agent.llm_response","value":{{"stringValue":"{{}}"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            idempotency_key: Some("draft-9-a".into()),
            arguments: Some(
                r#"{"customer":"cus_9","idempotency_key":"draft-9-a","metadata":{"intent_id":"int_draft_9"},"total":"120.00"}"#
                    .into()
            ),
            ..base_attempt("create_invoice_draft", "int_draft_9")
        }
    );
}

/// An MCP client span (`mcp.method.name = tools/call`), without the GenAI operation name that
/// older MCP instrumentations omit; HTTP status sent as a string.
#[test]
fn mcp_tools_call_span() {
    let doc = traces_doc(
        "mcp.client",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"tools/call issue_refund","kind":3,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"mcp.method.name","value":{{"stringValue":"tools/call"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"jsonrpc.request.id","value":{{"stringValue":"42"}}}},
              {{"key":"mcp.session.id","value":{{"stringValue":"191c4850af6c49e08843a3f6c80e5046"}}}},
              {{"key":"network.transport","value":{{"stringValue":"tcp"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_mcp"}}}},
              {{"key":"http.response.status_code","value":{{"stringValue":"409"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            http_status: Some(409),
            ..base_attempt("issue_refund", "int_mcp")
        }
    );
}

/// OpenInference (Phoenix, OpenAI Agents SDK bridge): the call is `input.value`, while
/// `tool.parameters` is the tool's JSON schema and must not be taken for it.
#[test]
fn openinference_tool_span() {
    let doc = traces_doc(
        "openinference.instrumentation.openai_agents",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"issue_refund","kind":1,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"openinference.span.kind","value":{{"stringValue":"TOOL"}}}},
              {{"key":"tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"tool.description","value":{{"stringValue":"Refund an order"}}}},
              {{"key":"tool.parameters","value":{{"stringValue":"{{\"type\": \"object\", \"properties\": {{\"order_id\": {{\"type\": \"string\"}}}}}}"}}}},
              {{"key":"input.value","value":{{"stringValue":"{{\"order_id\":\"1042\",\"amount\":\"45.00\"}}"}}}},
              {{"key":"input.mime_type","value":{{"stringValue":"application/json"}}}},
              {{"key":"output.value","value":{{"stringValue":"refund re_1 pending"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_oi"}}}},
              {{"key":"reckon.outcome","value":{{"stringValue":"Pending"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            reported_outcome: Some(ReportedOutcome::Pending),
            arguments: Some(r#"{"amount":"45.00","order_id":"1042"}"#.into()),
            ..base_attempt("issue_refund", "int_oi")
        }
    );
}

/// OpenLLMetry: `traceloop.entity.input` wraps the call as `{"args": [...], "kwargs": {...}}`.
#[test]
fn openllmetry_tool_span_takes_kwargs() {
    let doc = traces_doc(
        "opentelemetry.instrumentation.langchain",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"issue_refund.tool","kind":1,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"traceloop.span.kind","value":{{"stringValue":"tool"}}}},
              {{"key":"traceloop.entity.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"traceloop.entity.path","value":{{"stringValue":"refund_workflow"}}}},
              {{"key":"traceloop.workflow.name","value":{{"stringValue":"refund_workflow"}}}},
              {{"key":"traceloop.entity.input","value":{{"stringValue":"{{\"args\": [], \"kwargs\": {{\"order_id\": \"1042\", \"amount\": \"45.00\"}}}}"}}}},
              {{"key":"traceloop.entity.output","value":{{"stringValue":"{{\"id\": \"re_1\"}}"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_tl"}}}},
              {{"key":"reckon.idempotency_key","value":{{"stringValue":"k_tl"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            idempotency_key: Some("k_tl".into()),
            arguments: Some(r#"{"amount":"45.00","order_id":"1042"}"#.into()),
            ..base_attempt("issue_refund", "int_tl")
        }
    );
}

/// LangChain's callback envelope, as both its OpenLLMetry instrumentation
/// (`traceloop.entity.input`) and GenAI-convention emitters (`gen_ai.tool.call.arguments`)
/// record it: the call's arguments are its `inputs`.
#[test]
fn langchain_callback_envelope_yields_the_calls_arguments() {
    let envelope = r#"{\"input_str\": \"{'order_id': '1042', 'amount': 46.0}\", \"inputs\": {\"order_id\": \"1042\", \"amount\": 46.0, \"currency\": \"usd\"}, \"kwargs\": {\"color\": \"green\"}, \"tags\": [], \"metadata\": {\"langgraph_step\": 2}}"#;
    for attr in ["traceloop.entity.input", "gen_ai.tool.call.arguments"] {
        let doc = traces_doc(
            "opentelemetry.instrumentation.langchain",
            &format!(
                r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool issue_refund","kind":1,
                "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
                "attributes":[
                  {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
                  {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
                  {{"key":"{attr}","value":{{"stringValue":"{envelope}"}}}},
                  {{"key":"reckon.intent.id","value":{{"stringValue":"int_lc"}}}}]}}"#
            ),
        );
        let a = one_attempt(&doc);
        let args: serde_json::Value =
            serde_json::from_str(a.arguments.as_deref().expect("arguments")).unwrap();
        assert_eq!(
            args,
            serde_json::json!({"order_id": "1042", "amount": 46.0, "currency": "usd"}),
            "{attr}"
        );
    }
    // Without `inputs`, non-empty kwargs; else `input_str` when it is JSON.
    let only_str = r#"{\"input_str\": \"{\\\"amount\\\": 45}\", \"kwargs\": {}}"#;
    let doc = traces_doc(
        "x",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool issue_refund",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.tool.call.arguments","value":{{"stringValue":"{only_str}"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_lc"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc).arguments.as_deref(),
        Some(r#"{"amount":45}"#)
    );
}

/// OpenInference's LlamaIndex instrumentation writes a tool's input as `{"kwargs": {...}}`.
#[test]
fn llama_index_kwargs_envelope_yields_the_calls_arguments() {
    let doc = traces_doc(
        "openinference.instrumentation.llama_index",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"FunctionTool.acall",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"openinference.span.kind","value":{{"stringValue":"TOOL"}}}},
              {{"key":"tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"input.value","value":{{"stringValue":"{{\"kwargs\": {{\"order_id\": \"1042\", \"amount\": 46.0}}}}"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_li"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc).arguments.as_deref(),
        Some(r#"{"amount":46.0,"order_id":"1042"}"#)
    );
}

/// OpenAI Agents SDK through OpenInference with sensitive data off writes `__REDACTED__`: no
/// arguments, and the verdict can say they were redacted rather than never captured.
#[test]
fn redacted_content_is_absent_and_marked() {
    let doc = traces_doc(
        "openinference.instrumentation.openai_agents",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"issue_refund",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"openinference.span.kind","value":{{"stringValue":"TOOL"}}}},
              {{"key":"tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"input.value","value":{{"stringValue":"__REDACTED__"}}}},
              {{"key":"output.value","value":{{"stringValue":"__REDACTED__"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_oa"}}}}]}}"#
        ),
    );
    let a = one_attempt(&doc);
    assert_eq!(a.arguments_seen(), crate::model::ArgumentsSeen::Redacted);
    let c = crate::contract::Contract::example("c", "issue_refund");
    assert!(crate::audit::Params::of_attempt(&a, &c).is_empty());
}

/// Vercel AI SDK up to 6: span name `ai.toolCall`, `ai.toolCall.*` attributes. The JS exporter
/// writes 64-bit integers as numbers, which is tolerated.
#[test]
fn vercel_ai_sdk_tool_call_span() {
    let doc = traces_doc(
        "ai",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"ai.toolCall","kind":1,
            "startTimeUnixNano":{START},"endTimeUnixNano":{END},
            "attributes":[
              {{"key":"operation.name","value":{{"stringValue":"ai.toolCall refund-agent"}}}},
              {{"key":"ai.operationId","value":{{"stringValue":"ai.toolCall"}}}},
              {{"key":"ai.telemetry.functionId","value":{{"stringValue":"refund-agent"}}}},
              {{"key":"ai.toolCall.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"ai.toolCall.id","value":{{"stringValue":"call_abc123"}}}},
              {{"key":"ai.toolCall.args","value":{{"stringValue":"{{\"order_id\":\"1042\",\"amount\":45}}"}}}},
              {{"key":"ai.toolCall.result","value":{{"stringValue":"{{\"status\":\"succeeded\"}}"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_v"}}}},
              {{"key":"http.response.status_code","value":{{"doubleValue":200}}}}],
            "events":[],"droppedAttributesCount":0,"droppedEventsCount":0,"droppedLinksCount":0,"links":[],
            "status":{{"code":0}}}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            http_status: Some(200),
            arguments: Some(r#"{"amount":45,"order_id":"1042"}"#.into()),
            ..base_attempt("issue_refund", "int_v")
        }
    );
}

/// Pydantic AI up to v2: span name `running tool`, `tool_arguments` / `tool_response`.
#[test]
fn pydantic_ai_v2_running_tool_span() {
    let doc = traces_doc(
        "pydantic-ai",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"running tool","kind":1,
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"issue_refund"}}}},
              {{"key":"gen_ai.tool.call.id","value":{{"stringValue":"call_CoQFoEptKCUA8MaBq3PIwF21"}}}},
              {{"key":"tool_arguments","value":{{"stringValue":"{{\"order_id\":\"1042\",\"amount\":\"45.00\"}}"}}}},
              {{"key":"tool_response","value":{{"stringValue":"refund pending"}}}},
              {{"key":"logfire.msg","value":{{"stringValue":"running tool: issue_refund"}}}},
              {{"key":"logfire.json_schema","value":{{"stringValue":"{{\"type\":\"object\",\"properties\":{{\"tool_arguments\":{{\"type\":\"object\"}}}}}}"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_pyd"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            arguments: Some(r#"{"amount":"45.00","order_id":"1042"}"#.into()),
            ..base_attempt("issue_refund", "int_pyd")
        }
    );
}

/// Baggage processors copy `reckon.intent.id` onto every span of a trace. Such a span (an agent
/// step, an HTTP client span) with nothing else of the executor's is context, not an attempt.
#[test]
fn reckon_intent_id_from_baggage_alone_is_context() {
    let span = |name: &str, extra: &str| {
        format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"{name}",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_1"}}}}{extra},
              {{"key":"http.response.status_code","value":{{"intValue":"422"}}}}]}}"#
        )
    };
    for name in ["agent.step", "POST /v1/refunds", "issue_refund"] {
        let d = decode(&traces_doc("agent", &span(name, "")));
        assert_eq!((d.events.len(), d.rejected), (0, 0), "{name}: {d:?}");
    }
    // With the executor's key it is a send again.
    let keyed = r#",{"key":"reckon.idempotency_key","value":{"stringValue":"k1"}}"#;
    let a = one_attempt(&traces_doc("agent", &span("issue_refund", keyed)));
    assert_eq!(a.idempotency_key.as_deref(), Some("k1"));
}

/// A span with `reckon.intent.id` and the executor's `reckon.action` or key is audited,
/// contract or not; with no tool attribute its name is the tool.
#[test]
fn reckon_intent_id_alone_makes_an_audited_span() {
    let doc = traces_doc(
        "executor",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"send_dunning_email",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_mail"}}}},
              {{"key":"reckon.action","value":{{"stringValue":"write"}}}},
              {{"key":"error.type","value":{{"stringValue":"java.net.SocketTimeoutException"}}}}]}}"#
        ),
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            error_type: Some("java.net.SocketTimeoutException".into()),
            ..base_attempt("send_dunning_email", "int_mail")
        }
    );
}

/// A GenAI tool span of a tool no contract covers, carrying the intent id and nothing else of
/// the executor's (a baggage processor put it there), is context: dropped, not an attempt of
/// unknown outcome. Any executor mark makes it an attempt; a contracted tool needs none.
#[test]
fn an_uncontracted_tool_span_with_the_intent_id_alone_is_context() {
    let span = |tool: &str, extra: &str| {
        traces_doc(
            "agent",
            &format!(
                r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool {tool}",
                "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
                "attributes":[
                  {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
                  {{"key":"gen_ai.tool.name","value":{{"stringValue":"{tool}"}}}},
                  {{"key":"reckon.intent.id","value":{{"stringValue":"int_ctx"}}}}{extra}]}}"#
            ),
        )
    };
    let d = decode(&span("list_refunds", ""));
    assert_eq!((d.events.len(), d.rejected), (0, 0), "{d:?}");
    let blank_key = r#",{"key":"reckon.idempotency_key","value":{"stringValue":" "}}"#;
    let d = decode(&span("list_refunds", blank_key));
    assert_eq!(d.events.len(), 0, "a blank key marks nothing: {d:?}");
    for mark in [
        r#",{"key":"reckon.idempotency_key","value":{"stringValue":"k1"}}"#,
        r#",{"key":"reckon.action","value":{"stringValue":"write"}}"#,
        r#",{"key":"reckon.outcome","value":{"stringValue":"unknown"}}"#,
        r#",{"key":"reckon.downstream.object_id","value":{"stringValue":"wt_1"}}"#,
        r#",{"key":"reckon.downstream.status","value":{"stringValue":"pending"}}"#,
    ] {
        let a = one_attempt(&span("wire_transfer", mark));
        assert_eq!(
            (a.tool.as_str(), a.intent_id.as_str()),
            ("wire_transfer", "int_ctx")
        );
    }
    let a = one_attempt(&span("issue_refund", ""));
    assert_eq!(
        a.tool, "issue_refund",
        "a contracted tool's span needs no mark"
    );
}

// ---------------------------------------------------------------- read-backs and rules

fn read_span(ids_attr: &str) -> String {
    traces_doc(
        "executor",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"execute_tool list_refunds",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
            "attributes":[
              {{"key":"gen_ai.operation.name","value":{{"stringValue":"execute_tool"}}}},
              {{"key":"gen_ai.tool.name","value":{{"stringValue":"list_refunds"}}}},
              {{"key":"reckon.intent.id","value":{{"stringValue":"int_1"}}}},
              {{"key":"reckon.action","value":{{"stringValue":"read"}}}},
              {{"key":"reckon.outcome","value":{{"stringValue":"unknown"}}}}
              {ids_attr}]}}"#
        ),
    )
}

#[test]
fn read_span_becomes_a_readback_whatever_its_tool() {
    let want = |ids: &[&str]| {
        Event::Readback(Readback {
            reported_outcome: Some(ReportedOutcome::Unknown),
            ..readback_at(
                span_ref(),
                "int_1",
                "list_refunds",
                Timestamp(START),
                Timestamp(END),
                ids,
            )
        })
    };
    let array = r#",{"key":"reckon.readback.object_ids","value":{"arrayValue":{"values":[{"stringValue":"re_1"},{"stringValue":"re_2"}]}}}"#;
    assert_eq!(one_event(&read_span(array)), want(&["re_1", "re_2"]));
    let empty = r#",{"key":"reckon.readback.object_ids","value":{"arrayValue":{}}}"#;
    assert_eq!(one_event(&read_span(empty)), want(&[]));
    let encoded = r#",{"key":"reckon.readback.object_ids","value":{"stringValue":"[\"re_3\"]"}}"#;
    assert_eq!(one_event(&read_span(encoded)), want(&["re_3"]));
}

#[test]
fn read_span_without_object_ids_is_rejected() {
    let d = decode(&read_span(""));
    assert_eq!((d.seen, d.rejected, d.events.len()), (1, 1, 0));
    assert!(
        d.reasons[0].contains("reckon.readback.object_ids"),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons[0].contains(&format!("{TRACE}/{SPAN}")),
        "{:?}",
        d.reasons
    );
}

/// Spans whose fate depends only on the audit rules, with everything else equal.
fn rule_span(name: &str, attrs: &str) -> String {
    traces_doc(
        "x",
        &format!(
            r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"{name}",
            "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}","attributes":[{attrs}]}}"#
        ),
    )
}

#[test]
fn non_tool_and_unaudited_spans_are_dropped() {
    let cases = [
        // An HTTP client span.
        rule_span(
            "POST",
            r#"{"key":"http.request.method","value":{"stringValue":"POST"}}"#,
        ),
        // An LLM call: GenAI, but not a tool execution.
        rule_span(
            "chat gpt-4o",
            r#"{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}"#,
        ),
        // A tool span for a tool with no contract and no intent id.
        rule_span(
            "execute_tool get_weather",
            r#"{"key":"gen_ai.tool.name","value":{"stringValue":"get_weather"}}"#,
        ),
        // A blank intent id names no intent.
        rule_span(
            "refund",
            r#"{"key":"reckon.intent.id","value":{"stringValue":"  "}}"#,
        ),
    ];
    for doc in &cases {
        let d = decode(doc);
        assert_eq!(
            (d.seen, d.dropped, d.dropped_no_intent, d.rejected),
            (1, 1, 0, 0),
            "{doc}"
        );
        assert!(d.events.is_empty());
    }
}

#[test]
fn contract_tool_span_without_intent_is_dropped_and_counted() {
    let doc = rule_span(
        "execute_tool issue_refund",
        r#"{"key":"reckon.idempotency_key","value":{"stringValue":"k"}}"#,
    );
    let d = decode(&doc);
    assert_eq!(
        (d.seen, d.dropped, d.dropped_no_intent, d.events.len()),
        (1, 1, 1, 0)
    );
    // One example to log: the trace to follow and the tool.
    let (trace, tool) = d.no_intent_example.expect("an example");
    assert_eq!((trace.len(), tool.as_str()), (32, "issue_refund"));
    // With the pointer contract, arguments that lack the pointed-at member name no intent either.
    let doc = rule_span(
        "execute_tool create_invoice_draft",
        r#"{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"customer\":\"cus_9\"}"}}"#,
    );
    assert_eq!(decode(&doc).dropped_no_intent, 1);
}

#[test]
fn unknown_action_is_rejected_and_unknown_outcome_ignored() {
    let doc = rule_span(
        "execute_tool issue_refund",
        r#"{"key":"reckon.intent.id","value":{"stringValue":"i"}},{"key":"reckon.action","value":{"stringValue":"delete"}}"#,
    );
    let d = decode(&doc);
    assert_eq!(d.rejected, 1);
    assert!(d.reasons[0].contains("reckon.action"), "{:?}", d.reasons);

    let doc = rule_span(
        "execute_tool issue_refund",
        r#"{"key":"reckon.intent.id","value":{"stringValue":"i"}},{"key":"reckon.outcome","value":{"stringValue":"probably fine"}}"#,
    );
    assert_eq!(one_attempt(&doc).reported_outcome, None);
}

#[test]
fn http_status_tolerates_int_string_and_double_but_not_nonsense() {
    let status = |v: &str| {
        let doc = rule_span(
            "execute_tool issue_refund",
            &format!(
                r#"{{"key":"reckon.intent.id","value":{{"stringValue":"i"}}}},{{"key":"http.response.status_code","value":{v}}}"#
            ),
        );
        one_attempt(&doc).http_status
    };
    assert_eq!(status(r#"{"intValue":"503"}"#), Some(503));
    assert_eq!(status(r#"{"intValue":422}"#), Some(422));
    assert_eq!(status(r#"{"stringValue":"502"}"#), Some(502));
    assert_eq!(status(r#"{"doubleValue":409.0}"#), Some(409));
    assert_eq!(status(r#"{"intValue":"70000"}"#), None);
    assert_eq!(status(r#"{"stringValue":"gateway timeout"}"#), None);
}

// ---------------------------------------------------------------- JSON quirks

#[test]
fn json_quirks_enums_int64s_nulls_unknown_fields_and_empty_values() {
    let doc = format!(
        r#"{{"resourceSpans":[{{"resource":{{}},"schemaUrl":null,"somethingNew":{{"x":1}},
          "scopeSpans":[{{"scope":null,"spans":[
            {{"traceId":"{TRACE}","spanId":"{SPAN}","parentSpanId":null,"name":"execute_tool issue_refund",
              "kind":"SPAN_KIND_CLIENT","flags":256,"traceState":"",
              "startTimeUnixNano":{START},"endTimeUnixNano":"{END}",
              "attributes":[
                {{"key":"reckon.intent.id","value":{{"stringValue":"int_q"}}}},
                {{"key":"empty","value":{{}}}},
                {{"key":"nothing","value":null}},
                {{"key":"retries","value":{{"intValue":"5"}}}},
                {{"key":"retries2","value":{{"intValue":5}}}},
                {{"key":"ratio","value":{{"doubleValue":"NaN"}}}},
                {{"key":"blob","value":{{"bytesValue":"AAEC"}}}},
                {{"key":"weird","value":{{"futureValue":{{"a":1}}}}}},
                {{"key":"http.response.status_code","value":{{"intValue":"504"}}}}],
              "events":null,"links":[{{"traceId":"{TRACE}","spanId":"{SPAN}"}}],
              "status":{{"code":"STATUS_CODE_ERROR","message":"upstream timeout"}},
              "unknownSpanField":[1,2,3]}},
            {{"traceId":"{TRACE}","spanId":"0000000000000001","name":"execute_tool issue_refund",
              "kind":"CLIENT","startTimeUnixNano":"{START}","endTimeUnixNano":{END},
              "attributes":[{{"key":"reckon.intent.id","value":{{"stringValue":"int_q"}}}}],
              "status":{{"code":"ERROR"}}}},
            {{"traceId":"{TRACE}","spanId":"0000000000000002","name":"execute_tool issue_refund",
              "attributes":[{{"key":"reckon.intent.id","value":{{"stringValue":"int_q"}}}}],
              "status":{{}}}}]}}]}}]}}"#
    );
    let d = decode(&doc);
    assert_eq!(
        (d.seen, d.rejected, d.dropped),
        (3, 0, 0),
        "{:?}",
        d.reasons
    );
    let attempts: Vec<&Attempt> = d
        .events
        .iter()
        .map(|e| match e {
            Event::Attempt(a) => a,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        *attempts[0],
        Attempt {
            http_status: Some(504),
            span_error: true,
            ..base_attempt("issue_refund", "int_q")
        }
    );
    assert!(attempts[1].span_error);
    assert_eq!(attempts[1].end, Timestamp(END));
    assert!(!attempts[2].span_error);
    assert_eq!(
        (attempts[2].start, attempts[2].end),
        (Timestamp(0), Timestamp(0))
    );
}

#[test]
fn json_snake_case_keys_and_base64_ids_are_accepted() {
    use base64::Engine as _;
    let b64 = |h: &str| base64::engine::general_purpose::STANDARD.encode(hex::decode(h).unwrap());
    let doc = format!(
        r#"{{"resource_spans":[{{"scope_spans":[{{"spans":[
            {{"trace_id":"{}","span_id":"{}","name":"running tool",
              "start_time_unix_nano":"{START}","end_time_unix_nano":"{END}",
              "attributes":[
                {{"key":"gen_ai.tool.name","value":{{"string_value":"issue_refund"}}}},
                {{"key":"reckon.intent.id","value":{{"string_value":"int_s"}}}},
                {{"key":"tool_arguments","value":{{"kvlist_value":{{"values":[{{"key":"amount","value":{{"int_value":"45"}}}}]}}}}}}],
              "status":{{"code":2}}}}]}}]}}]}}"#,
        b64(TRACE),
        b64(SPAN)
    );
    assert_eq!(
        one_attempt(&doc),
        Attempt {
            span_error: true,
            arguments: Some(r#"{"amount":45}"#.into()),
            ..base_attempt("issue_refund", "int_s")
        }
    );
}

#[test]
fn json_empty_requests_succeed() {
    for body in [
        "",
        "  \n",
        "{}",
        "null",
        r#"{"resourceSpans":[]}"#,
        r#"{"resourceSpans":null}"#,
    ] {
        let d = traces_from_json(body.as_bytes(), &contracts()).unwrap();
        assert_eq!(d, Decoded::default(), "{body:?}");
        let d = logs_from_json(body.as_bytes()).unwrap();
        assert_eq!(d, Decoded::default(), "{body:?}");
    }
}

#[test]
fn json_whole_body_failures_are_errors() {
    let c = contracts();
    let err =
        traces_from_json(br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"na"#, &c).unwrap_err();
    assert!(matches!(err, DecodeError::Json(_)), "{err}");
    let err = traces_from_json(b"[1,2]", &c).unwrap_err();
    assert!(err.to_string().contains("must be a JSON object"), "{err}");
    let err = traces_from_json(br#"{"resourceSpans":{"a":1}}"#, &c).unwrap_err();
    assert!(
        err.to_string()
            .contains("resourceSpans is an object, want an array"),
        "{err}"
    );
    let err = logs_from_json(br#"{"resourceLogs":[{"scopeLogs":"x"}]}"#).unwrap_err();
    assert!(err.to_string().contains("scopeLogs is a string"), "{err}");
}

// ---------------------------------------------------------------- partial rejection

#[test]
fn json_bad_span_is_rejected_alone() {
    let good = |span: &str| {
        format!(
            r#"{{"traceId":"{TRACE}","spanId":"{span}","name":"execute_tool issue_refund",
            "attributes":[{{"key":"reckon.intent.id","value":{{"stringValue":"int_1"}}}}]}}"#
        )
    };
    let spans = [
        good("0000000000000001"),
        r#"{"traceId":"5b8efff7","spanId":"0000000000000002","name":"execute_tool issue_refund"}"#.to_string(),
        r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"0000000000000003","name":"x","startTimeUnixNano":"soon"}"#
            .to_string(),
        r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"0000000000000004","name":"x","attributes":[{"key":"n","value":{"intValue":"1.5e400"}}]}"#.to_string(),
        good("0000000000000005"),
    ];
    let d = decode(&traces_doc("x", &spans.join(",")));
    assert_eq!(
        (d.seen, d.rejected, d.events.len()),
        (5, 3, 2),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons[0].contains("span #1") && d.reasons[0].contains("traceId \"5b8efff7\""),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons[1].contains("startTimeUnixNano \"soon\""),
        "{:?}",
        d.reasons
    );
    assert!(d.reasons[2].contains("attribute \"n\""), "{:?}", d.reasons);
    let kept: Vec<String> = d
        .events
        .iter()
        .map(|e| match e {
            Event::Attempt(a) => a.span.span_hex(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kept, ["0000000000000001", "0000000000000005"]);
    assert!(
        d.error_message().starts_with("rejected 3 of 5: span #1"),
        "{}",
        d.error_message()
    );
}

#[test]
fn rejection_reasons_are_capped_but_counted() {
    let bad = r#"{"traceId":"","spanId":"","name":"x"}"#;
    let spans = vec![bad; MAX_REASONS + 4].join(",");
    let d = decode(&traces_doc("x", &spans));
    assert_eq!(d.rejected, MAX_REASONS as u64 + 4);
    assert_eq!(d.reasons.len(), MAX_REASONS);
    assert!(
        d.error_message().ends_with("; and 4 more"),
        "{}",
        d.error_message()
    );
}

// ---------------------------------------------------------------- protobuf

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        key_strindex: 0,
    }
}

fn sv(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.into())
}

fn proto_span(span_id: &str, name: &str, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: hex::decode(TRACE).unwrap(),
        span_id: hex::decode(span_id).unwrap(),
        name: name.into(),
        kind: 3,
        start_time_unix_nano: START as u64,
        end_time_unix_nano: END as u64,
        attributes,
        ..Default::default()
    }
}

fn proto_request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", sv("agent"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn protobuf_request_with_a_bad_span_keeps_the_others() {
    let mut tool = proto_span(
        SPAN,
        "execute_tool issue_refund",
        vec![
            kv("gen_ai.operation.name", sv("execute_tool")),
            kv("gen_ai.tool.name", sv("issue_refund")),
            kv("reckon.intent.id", sv("int_p")),
            kv("reckon.idempotency_key", sv("k_p")),
            kv("http.response.status_code", any_value::Value::IntValue(500)),
        ],
    );
    tool.status = Some(Status {
        code: status::StatusCode::Error as i32,
        message: "500".into(),
    });
    let mut bad = proto_span(
        "0000000000000009",
        "execute_tool issue_refund",
        vec![kv("reckon.intent.id", sv("x"))],
    );
    bad.trace_id.truncate(15);
    let http = proto_span(
        "0000000000000008",
        "GET /v1/refunds",
        vec![kv("http.request.method", sv("GET"))],
    );
    let req = proto_request(vec![http, bad, tool]);

    let body = req.encode_to_vec();
    let d = traces_from_protobuf_bytes(&body, &contracts()).unwrap();
    assert_eq!(d, traces_from_proto(&req, &contracts()));
    assert_eq!((d.seen, d.dropped, d.rejected), (3, 1, 1));
    assert!(
        d.reasons[0].contains("trace id has 15 bytes"),
        "{:?}",
        d.reasons
    );
    assert_eq!(
        d.events,
        vec![Event::Attempt(Attempt {
            idempotency_key: Some("k_p".into()),
            http_status: Some(500),
            span_error: true,
            ..base_attempt("issue_refund", "int_p")
        })]
    );
}

/// `body` with every occurrence of `marker` overwritten by bytes that are not UTF-8 (same
/// length, so the protobuf framing stays valid): what a broken exporter sends.
fn poison(mut body: Vec<u8>, marker: &[u8]) -> Vec<u8> {
    let mut found = false;
    let mut i = 0;
    while i + marker.len() <= body.len() {
        if &body[i..i + marker.len()] == marker {
            body[i..i + marker.len()].fill(0xff);
            found = true;
            i += marker.len();
        } else {
            i += 1;
        }
    }
    assert!(found, "marker not in the body");
    body
}

fn refund_span(span_id: &str, intent: &str, key: &str) -> Span {
    proto_span(
        span_id,
        "execute_tool issue_refund",
        vec![
            kv("gen_ai.operation.name", sv("execute_tool")),
            kv("gen_ai.tool.name", sv("issue_refund")),
            kv("reckon.intent.id", sv(intent)),
            kv("reckon.idempotency_key", sv(key)),
        ],
    )
}

#[test]
fn invalid_utf8_in_one_span_refuses_that_span_alone() {
    let req = proto_request(vec![
        refund_span("0000000000000001", "int_a", "k_a"),
        refund_span("0000000000000002", "int_b", "POISON_KEY"),
        refund_span("0000000000000003", "int_c", "k_c"),
    ]);
    let body = poison(req.encode_to_vec(), b"POISON_KEY");
    assert!(ExportTraceServiceRequest::decode(body.as_slice()).is_err());
    let d = traces_from_protobuf_bytes(&body, &contracts()).unwrap();
    assert_eq!((d.seen, d.rejected), (3, 1), "{:?}", d.reasons);
    assert!(
        d.reasons[0].starts_with("span 0000000000000002 of trace 5b8efff798038103d269b633813fc60c")
            && d.reasons[0].contains("UTF-8"),
        "{:?}",
        d.reasons
    );
    let intents: Vec<&str> = d
        .events
        .iter()
        .map(|e| match e {
            Event::Attempt(a) => a.intent_id.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(intents, ["int_a", "int_c"]);
}

#[test]
fn invalid_utf8_in_a_resource_or_scope_refuses_its_spans_only() {
    let mut req = proto_request(vec![refund_span("0000000000000001", "int_a", "k_a")]);
    let mut other = req.resource_spans[0].clone();
    other.resource = Some(Resource {
        attributes: vec![kv("service.name", sv("POISON_SVC"))],
        ..Default::default()
    });
    other.scope_spans[0].spans = vec![
        refund_span("0000000000000002", "int_b", "k_b"),
        refund_span("0000000000000003", "int_c", "k_c"),
    ];
    let mut scoped = req.resource_spans[0].clone();
    scoped.scope_spans[0].scope = Some(InstrumentationScope {
        name: "POISON_SCOPE".into(),
        ..Default::default()
    });
    scoped.scope_spans[0].spans = vec![refund_span("0000000000000004", "int_d", "k_d")];
    req.resource_spans.push(other);
    req.resource_spans.push(scoped);
    let body = poison(poison(req.encode_to_vec(), b"POISON_SVC"), b"POISON_SCOPE");
    let d = traces_from_protobuf_bytes(&body, &contracts()).unwrap();
    assert_eq!(
        (d.seen, d.rejected, d.events.len()),
        (4, 3, 1),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons.iter().any(|r| r.contains("its resource")),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons.iter().any(|r| r.contains("its scope")),
        "{:?}",
        d.reasons
    );
}

#[test]
fn invalid_utf8_in_one_log_record_refuses_that_record_alone() {
    let record = |object: &str| LogRecord {
        time_unix_nano: START as u64,
        attributes: vec![
            kv("reckon.record.kind", sv("refund")),
            kv("reckon.record.object_id", sv(object)),
            kv("reckon.record.status", sv("succeeded")),
        ],
        ..Default::default()
    };
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![record("re_1"), record("POISON_OBJ"), record("re_3")],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let good = logs_from_protobuf_bytes(&req.encode_to_vec()).unwrap();
    let body = poison(req.encode_to_vec(), b"POISON_OBJ");
    let d = logs_from_protobuf_bytes(&body).unwrap();
    assert_eq!((d.seen, d.rejected), (3, 1), "{:?}", d.reasons);
    assert!(
        d.reasons[0].starts_with("a log record without ids: "),
        "{:?}",
        d.reasons
    );
    assert_eq!((good.events.len(), d.events.len()), (3, 2), "{good:?}");
    assert_eq!(
        d.events[..],
        [good.events[0].clone(), good.events[2].clone()]
    );
}

#[test]
fn many_invalid_spans_keep_a_bounded_number_of_reasons() {
    let spans: Vec<Span> = (1..=100)
        .map(|i| refund_span(&format!("{i:016x}"), "int_x", "POISON_KEY"))
        .chain([refund_span("00000000000000ff", "int_ok", "k_ok")])
        .collect();
    let body = poison(proto_request(spans).encode_to_vec(), b"POISON_KEY");
    let d = traces_from_protobuf_bytes(&body, &contracts()).unwrap();
    assert_eq!((d.seen, d.rejected, d.events.len()), (101, 100, 1));
    assert_eq!(d.reasons.len(), MAX_REASONS);
    assert!(
        d.error_message().ends_with("; and 84 more"),
        "{}",
        d.error_message()
    );
}

#[test]
fn broken_framing_is_still_the_whole_request_error() {
    let req = proto_request(vec![refund_span("0000000000000002", "int_b", "POISON_KEY")]);
    let body = poison(req.encode_to_vec(), b"POISON_KEY");
    // Cut inside the span: the framing is broken, nothing can be salvaged.
    let err = traces_from_protobuf_bytes(&body[..body.len() - 3], &contracts()).unwrap_err();
    assert!(matches!(err, DecodeError::Protobuf(_)), "{err}");
}

#[test]
fn protobuf_truncated_body_is_an_error_and_empty_body_is_empty() {
    let req = proto_request(vec![proto_span(
        SPAN,
        "execute_tool issue_refund",
        vec![kv("reckon.intent.id", sv("i"))],
    )]);
    let body = req.encode_to_vec();
    let err = traces_from_protobuf_bytes(&body[..body.len() - 5], &contracts()).unwrap_err();
    assert!(matches!(err, DecodeError::Protobuf(_)), "{err}");
    assert!(
        err.to_string().starts_with("invalid OTLP protobuf"),
        "{err}"
    );
    assert_eq!(
        traces_from_protobuf_bytes(&[], &contracts()).unwrap(),
        Decoded::default()
    );
}

#[test]
fn all_zero_ids_are_rejected() {
    let mut s = proto_span(
        SPAN,
        "execute_tool issue_refund",
        vec![kv("reckon.intent.id", sv("i"))],
    );
    s.trace_id = vec![0; 16];
    let d = traces_from_proto(&proto_request(vec![s]), &contracts());
    assert_eq!(d.rejected, 1);
    assert!(d.reasons[0].contains("all-zero"), "{:?}", d.reasons);
}

#[test]
fn spans_with_times_from_broken_clocks_are_rejected_alone() {
    use crate::ingest::bounds::TimeWindow;
    // Received a minute after the spans started.
    let window = TimeWindow::default_at(Timestamp(START + 60_000_000_000));
    let span = |id: &str, start: u64, end: u64| {
        let mut s = proto_span(
            id,
            "execute_tool issue_refund",
            vec![kv("reckon.intent.id", sv("i"))],
        );
        s.start_time_unix_nano = start;
        s.end_time_unix_nano = end;
        s
    };
    let (start, end) = (START as u64, END as u64);
    let mut read = span("00000000000000a6", start, start - 1);
    read.attributes.extend([
        kv("reckon.action", sv("read")),
        kv(
            "reckon.readback.object_ids",
            any_value::Value::ArrayValue(Default::default()),
        ),
    ]);
    let req = proto_request(vec![
        span("00000000000000a1", start, end),
        span("00000000000000a2", 0, 0),
        span("00000000000000a3", u64::MAX, u64::MAX),
        span("00000000000000a4", start, start - 1),
        span("00000000000000a5", start, 0),
        read,
        // An hour ahead of the receive time is still a plausible clock.
        span(
            "00000000000000a7",
            start + 3_600_000_000_000,
            start + 3_660_000_000_000,
        ),
    ]);
    let mut d = traces_from_proto(&req, &contracts());
    assert_eq!((d.seen, d.rejected, d.events.len()), (7, 0, 7));
    assert_eq!(d.check_times(&window), 5);
    assert_eq!((d.seen, d.rejected, d.events.len()), (7, 5, 2));
    let ids: Vec<String> = d
        .events
        .iter()
        .map(|e| match e {
            Event::Attempt(a) => a.span.span_hex(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, ["00000000000000a1", "00000000000000a7"]);
    let want = [
        "span 5b8efff798038103d269b633813fc60c/00000000000000a2 'issue_refund': start time 1970-01-01T00:00:00.000000000Z is before 2000-01-01T00:00:00.000000000Z, the earliest time reckon accepts",
        "span 5b8efff798038103d269b633813fc60c/00000000000000a3 'issue_refund': start time 2262-04-11T23:47:16.854775807Z is after 2023-11-14T23:14:20.000000000Z, the latest time reckon accepts",
        "span 5b8efff798038103d269b633813fc60c/00000000000000a4 'issue_refund': end time 2023-11-14T22:13:19.999999999Z precedes the start time 2023-11-14T22:13:20.000000000Z",
        "span 5b8efff798038103d269b633813fc60c/00000000000000a5 'issue_refund': end time 1970-01-01T00:00:00.000000000Z is before",
        "read span 5b8efff798038103d269b633813fc60c/00000000000000a6 'issue_refund': end time 2023-11-14T22:13:19.999999999Z precedes",
    ];
    for (got, want) in d.reasons.iter().zip(want) {
        assert!(got.starts_with(want), "{got}\nwant {want}");
    }
    assert!(
        d.error_message().starts_with("rejected 5 of 7: span "),
        "{}",
        d.error_message()
    );
}

// ---------------------------------------------------------------- logs

#[test]
fn log_records_with_times_from_broken_clocks_are_rejected_alone() {
    use crate::ingest::bounds::TimeWindow;
    let window = TimeWindow::default_at(Timestamp(START + 60_000_000_000));
    let doc = |time: &str, created: &str| {
        format!(
            r#"{{"timeUnixNano":"{time}","attributes":[
             {{"key":"reckon.record.object_id","value":{{"stringValue":"re_{time}"}}}},
             {{"key":"reckon.record.status","value":{{"stringValue":"succeeded"}}}},
             {{"key":"reckon.record.created_at","value":{{"stringValue":"{created}"}}}}]}}"#
        )
    };
    let body = format!(
        r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{}, {}, {}, {}]}}]}}]}}"#,
        doc("1700000000000000000", "2023-11-14T22:13:19Z"),
        doc("1700000000000000001", "1969-07-20T20:17:40Z"),
        doc("18446744073709551615", "2023-11-14T22:13:19Z"),
        doc("946684799999999999", "2023-11-14T22:13:19Z"),
    );
    let mut d = logs_from_json(body.as_bytes()).unwrap();
    assert_eq!(d.events.len(), 4);
    assert_eq!(d.check_times(&window), 3);
    assert_eq!((d.seen, d.rejected, d.events.len()), (4, 3, 1));
    assert!(
        d.reasons[0].starts_with("log record for object 're_1700000000000000001': reckon.record.created_at 1969-07-20T20:17:40.000000000Z is before"),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons[1]
            .starts_with("log record for object 're_18446744073709551615': time 2262-04-11"),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons[2].starts_with("log record for object 're_946684799999999999': time 1999-12-31T23:59:59.999999999Z is before"),
        "{:?}",
        d.reasons
    );
}

#[test]
fn log_records_become_record_observations() {
    let doc = r#"{"resourceLogs":[{
        "resource":{"attributes":[
          {"key":"service.name","value":{"stringValue":"billing-api"}},
          {"key":"reckon.record.source","value":{"stringValue":"billing-api"}},
          {"key":"reckon.record.kind","value":{"stringValue":"refund"}}]},
        "scopeLogs":[{"scope":{"name":"billing"},"logRecords":[
          {"timeUnixNano":"1700000000000000000","observedTimeUnixNano":"1700000000100000000",
           "severityNumber":9,"severityText":"INFO","body":{"stringValue":"refund created"},
           "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
           "attributes":[
             {"key":"reckon.record.object_id","value":{"stringValue":"re_1"}},
             {"key":"reckon.record.status","value":{"stringValue":"pending"}},
             {"key":"reckon.intent.id","value":{"stringValue":"int_1042_refund"}},
             {"key":"reckon.idempotency_key","value":{"stringValue":"idem_7f3a"}},
             {"key":"reckon.record.amount","value":{"stringValue":"45.00"}},
             {"key":"reckon.record.currency","value":{"stringValue":"EUR"}},
             {"key":"reckon.record.target","value":{"stringValue":"1042"}},
             {"key":"reckon.record.created_at","value":{"stringValue":"2023-11-14T22:13:19Z"}}]},
          {"timeUnixNano":"1700000000000000000","severityNumber":"SEVERITY_NUMBER_INFO",
           "body":{"stringValue":"GET /health 200"},
           "attributes":[{"key":"http.route","value":{"stringValue":"/health"}}]},
          {"observedTimeUnixNano":1700000060000000000,"severityText":"INFO",
           "attributes":[
             {"key":"reckon.record.object_id","value":{"stringValue":"re_1"}},
             {"key":"reckon.record.status","value":{"stringValue":"succeeded"}},
             {"key":"reckon.record.kind","value":{"stringValue":"refund_v2"}},
             {"key":"reckon.record.source","value":{"stringValue":"stripe-sync"}},
             {"key":"reckon.record.amount","value":{"doubleValue":45.5}},
             {"key":"reckon.record.created_at","value":{"intValue":"1699999999000000000"}}]},
          {"timeUnixNano":"1700000000000000000",
           "attributes":[{"key":"reckon.record.object_id","value":{"stringValue":"re_2"}}]},
          {"timeUnixNano":"1700000000000000000",
           "attributes":[
             {"key":"reckon.record.object_id","value":{"stringValue":"re_3"}},
             {"key":"reckon.record.status","value":{"stringValue":"pending"}},
             {"key":"reckon.record.amount","value":{"stringValue":"a lot"}}]},
          {"timeUnixNano":"yesterday","attributes":[]}
        ]}]}]}"#;
    let d = logs_from_json(doc.as_bytes()).unwrap();
    assert_eq!(
        (d.seen, d.dropped, d.rejected),
        (6, 1, 3),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons
            .iter()
            .any(|r| r.contains("log record #5") && r.contains("timeUnixNano")),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons
            .iter()
            .any(|r| r.contains("'re_2'") && r.contains("reckon.record.status")),
        "{:?}",
        d.reasons
    );
    assert!(
        d.reasons
            .iter()
            .any(|r| r.contains("'re_3'") && r.contains("a lot")),
        "{:?}",
        d.reasons
    );
    assert_eq!(
        d.events,
        vec![
            Event::Record(RecordObservation {
                source: "billing-api".into(),
                kind: Some("refund".into()),
                idempotency_key: Some("idem_7f3a".into()),
                amount: Some(Amount::Major(Decimal {
                    mantissa: 4500,
                    scale: 2
                })),
                currency: Some("EUR".into()),
                target: Some("1042".into()),
                created_at: Some(Timestamp(1_699_999_999_000_000_000)),
                ..record_at(
                    Some("int_1042_refund"),
                    "re_1",
                    "pending",
                    Timestamp(1_700_000_000_000_000_000)
                )
            }),
            Event::Record(RecordObservation {
                source: "stripe-sync".into(),
                kind: Some("refund_v2".into()),
                amount: Some(Amount::Major(Decimal {
                    mantissa: 455,
                    scale: 1
                })),
                created_at: Some(Timestamp(1_699_999_999_000_000_000)),
                ..record_at(
                    None,
                    "re_1",
                    "succeeded",
                    Timestamp(1_700_000_060_000_000_000)
                )
            }),
        ]
    );
}

#[test]
fn protobuf_logs_default_source_and_truncation() {
    let rec = |attrs: Vec<KeyValue>, time: u64, observed: u64| LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: observed,
        attributes: attrs,
        ..Default::default()
    };
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: None,
            scope_logs: vec![ScopeLogs {
                log_records: vec![
                    rec(
                        vec![
                            kv("reckon.record.object_id", sv("dr_1")),
                            kv("reckon.record.status", sv("draft")),
                            kv("reckon.record.amount", any_value::Value::IntValue(120)),
                        ],
                        0,
                        1_700_000_000_000_000_000,
                    ),
                    rec(
                        vec![
                            kv("reckon.record.object_id", sv("dr_2")),
                            kv("reckon.record.status", sv("draft")),
                        ],
                        0,
                        0,
                    ),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let body = req.encode_to_vec();
    let d = logs_from_protobuf_bytes(&body).unwrap();
    assert_eq!(d, logs_from_proto(&req));
    assert_eq!((d.seen, d.rejected), (2, 1));
    assert!(
        d.reasons[0].contains("'dr_2'") && d.reasons[0].contains("time_unix_nano"),
        "{:?}",
        d.reasons
    );
    assert_eq!(
        d.events,
        vec![Event::Record(RecordObservation {
            source: "otlp".into(),
            amount: Some(Amount::Major(Decimal {
                mantissa: 120,
                scale: 0
            })),
            ..record_at(None, "dr_1", "draft", Timestamp(1_700_000_000_000_000_000))
        })]
    );
    let err = logs_from_protobuf_bytes(&body[..body.len() - 3]).unwrap_err();
    assert!(matches!(err, DecodeError::Protobuf(_)), "{err}");
}

// ---------------------------------------------------------------- robustness

proptest::proptest! {
    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let c = contracts();
        // Whatever decodes accounts for every item it saw: an event, a drop, or a rejection.
        for d in [traces_from_protobuf_bytes(&body, &c), traces_from_json(&body, &c), logs_from_protobuf_bytes(&body), logs_from_json(&body)]
            .into_iter()
            .flatten()
        {
            proptest::prop_assert_eq!(d.seen, d.events.len() as u64 + d.dropped + d.rejected);
        }
    }

    /// Any JSON value dropped into a span's slots is decoded or rejected, never a panic.
    #[test]
    fn json_decoder_never_panics_on_odd_members(v in odd_json(), slot in 0usize..6) {
        let member = v.to_string();
        let span = match slot {
            0 => format!(r#"{{"traceId":{member},"spanId":"{SPAN}"}}"#),
            1 => format!(r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","startTimeUnixNano":{member}}}"#),
            2 => format!(r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","attributes":[{{"key":"reckon.intent.id","value":{member}}}]}}"#),
            3 => format!(r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"ai.toolCall","attributes":[{{"key":"ai.toolCall.args","value":{member}}}]}}"#),
            4 => format!(r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","status":{member},"kind":{member}}}"#),
            _ => format!(r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","events":{member}}}"#),
        };
        if let Ok(d) = traces_from_json(traces_doc("x", &span).as_bytes(), &contracts()) {
            proptest::prop_assert_eq!(d.seen, 1, "one span in, one span seen");
            proptest::prop_assert_eq!(d.events.len() as u64 + d.dropped + d.rejected, 1);
        }
    }
}

fn odd_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::json;
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-zA-Z0-9+/=_. -]{0,40}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::vec(
                (
                    prop_oneof![
                        Just("stringValue".to_string()),
                        Just("intValue".to_string()),
                        Just("doubleValue".to_string()),
                        Just("boolValue".to_string()),
                        Just("arrayValue".to_string()),
                        Just("kvlistValue".to_string()),
                        Just("bytesValue".to_string()),
                        Just("values".to_string()),
                        Just("key".to_string()),
                        Just("value".to_string()),
                        Just("code".to_string()),
                    ],
                    inner
                ),
                0..3
            )
            .prop_map(|kvs| serde_json::Value::Object(kvs.into_iter().collect())),
        ]
    })
}

/// Laminar's Python SDK: `@observe(span_type="TOOL")` names the span after the function and
/// records the call's parameters by name in `lmnr.span.input` (a JSON string), the return value
/// in `lmnr.span.output`, the span path as a string array.
#[test]
fn laminar_tool_span_takes_named_parameters() {
    let laminar = |input: &str, span_type: &str| {
        traces_doc(
            "lmnr.opentelemetry_lib.tracing",
            &format!(
                r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"issue_refund","kind":1,
                "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
                "attributes":[
                  {{"key":"lmnr.span.instrumentation_source","value":{{"stringValue":"python"}}}},
                  {{"key":"lmnr.span.sdk_version","value":{{"stringValue":"0.7.0"}}}},
                  {{"key":"lmnr.span.path","value":{{"arrayValue":{{"values":[{{"stringValue":"refund_agent"}},{{"stringValue":"issue_refund"}}]}}}}}},
                  {{"key":"lmnr.span.type","value":{{"stringValue":"{span_type}"}}}},
                  {{"key":"lmnr.span.input","value":{{"stringValue":"{input}"}}}},
                  {{"key":"lmnr.span.output","value":{{"stringValue":"{{\"id\": \"re_1\", \"status\": \"succeeded\"}}"}}}},
                  {{"key":"reckon.intent.id","value":{{"stringValue":"int_lmnr"}}}}]}}"#
            ),
        )
    };
    let expected = Attempt {
        arguments: Some(r#"{"amount":"45.00","order_id":"1042"}"#.into()),
        ..base_attempt("issue_refund", "int_lmnr")
    };
    let py = laminar(r#"{\"order_id\": \"1042\", \"amount\": \"45.00\"}"#, "TOOL");
    assert_eq!(one_attempt(&py), expected);
    // The JS SDK's `observe({spanType: "TOOL"}, fn, order)`: the argument list.
    let js = laminar(
        r#"[{\"order_id\": \"1042\", \"amount\": \"45.00\"}]"#,
        "TOOL",
    );
    assert_eq!(one_attempt(&js), expected);
    // Laminar's other span types (DEFAULT, LLM) are not tool calls, whatever they carry.
    let d = decode(&laminar(r#"{\"order_id\": \"1042\"}"#, "DEFAULT"));
    assert!(d.events.is_empty() && d.dropped == 1, "{d:?}");
}

/// Langfuse's Python SDK (v3, OpenTelemetry-based): `@observe(as_type="tool")` names the span
/// after the function, sets `langfuse.observation.type = "tool"` and records the call as
/// `{"args": [...], "kwargs": {...}}` in `langfuse.observation.input`.
#[test]
fn langfuse_tool_observation_takes_kwargs() {
    let langfuse = |input: &str, kind: &str| {
        traces_doc(
            "langfuse-sdk",
            &format!(
                r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"issue_refund","kind":1,
                "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
                "attributes":[
                  {{"key":"langfuse.observation.type","value":{{"stringValue":"{kind}"}}}},
                  {{"key":"langfuse.observation.input","value":{{"stringValue":"{input}"}}}},
                  {{"key":"langfuse.observation.output","value":{{"stringValue":"{{\"id\": \"re_1\"}}"}}}},
                  {{"key":"langfuse.environment","value":{{"stringValue":"production"}}}},
                  {{"key":"reckon.intent.id","value":{{"stringValue":"int_lf"}}}},
                  {{"key":"reckon.idempotency_key","value":{{"stringValue":"k_lf"}}}}]}}"#
            ),
        )
    };
    let expected = Attempt {
        idempotency_key: Some("k_lf".into()),
        arguments: Some(r#"{"amount":"45.00","order_id":"1042"}"#.into()),
        ..base_attempt("issue_refund", "int_lf")
    };
    let py = langfuse(
        r#"{\"args\": [], \"kwargs\": {\"order_id\": \"1042\", \"amount\": \"45.00\"}}"#,
        "tool",
    );
    assert_eq!(one_attempt(&py), expected);
    // The JS SDK's `startActiveObservation(name, fn, {asType: "tool"})` with `update({input})`.
    let js = langfuse(r#"{\"order_id\": \"1042\", \"amount\": \"45.00\"}"#, "tool");
    assert_eq!(one_attempt(&js), expected);
    // A Langfuse `span` (the generic default of `observe`) marks nothing: the executor's key on
    // it makes it the attempt (the last row of DESIGN's table). A `generation` is a model call,
    // context whatever `reckon.*` it carries.
    let d = decode(&langfuse(r#"{}"#, "span"));
    assert_eq!(
        d.events.len(),
        1,
        "reckon.* attributes alone mark it: {d:?}"
    );
    let d = decode(&langfuse(r#"{}"#, "generation"));
    assert_eq!(
        (d.events.len(), d.dropped),
        (0, 1),
        "a generation is no tool call: {d:?}"
    );
}

/// Laminar's and Langfuse's markers alone, with no `reckon.*` attribute but the intent id, make
/// the span a tool span (a baggage-copied intent id on an LLM span does not).
#[test]
fn laminar_and_langfuse_markers_make_a_tool_span() {
    for (key, value) in [
        ("lmnr.span.type", "TOOL"),
        ("langfuse.observation.type", "tool"),
        ("lmnr.span.type", "LLM"),
        ("langfuse.observation.type", "generation"),
    ] {
        let doc = traces_doc(
            "x",
            &format!(
                r#"{{"traceId":"{TRACE}","spanId":"{SPAN}","name":"issue_refund",
                "startTimeUnixNano":"{START}","endTimeUnixNano":"{END}",
                "attributes":[
                  {{"key":"{key}","value":{{"stringValue":"{value}"}}}},
                  {{"key":"reckon.intent.id","value":{{"stringValue":"int_m"}}}}]}}"#
            ),
        );
        let d = decode(&doc);
        let tool = value.eq_ignore_ascii_case("tool");
        assert_eq!(d.events.len(), usize::from(tool), "{key}={value}: {d:?}");
    }
}

/// What a baggage processor copying the executor's attributes puts on every span of a trace:
/// the intent id and the key (and, on a read-back step, the read marker with what it found).
const BAGGAGE_WRITE: &str = r#"{"key":"reckon.intent.id","value":{"stringValue":"int_b"}},
    {"key":"reckon.idempotency_key","value":{"stringValue":"k_b"}},
    {"key":"reckon.outcome","value":{"stringValue":"unknown"}}"#;
const BAGGAGE_READ: &str = r#"{"key":"reckon.intent.id","value":{"stringValue":"int_b"}},
    {"key":"reckon.action","value":{"stringValue":"read"}},
    {"key":"reckon.readback.object_ids","value":{"arrayValue":{}}}"#;

fn marked_span(name: &str, key: &str, value: &str, baggage: &str) -> String {
    rule_span(
        name,
        &format!(r#"{{"key":"{key}","value":{{"stringValue":"{value}"}}}},{baggage}"#),
    )
}

/// Each convention's spans that are not tool calls, as that emitter names and marks them, are
/// context whatever `reckon.*` attributes they carry: not a write of unknown outcome (an
/// uncontracted one would escalate as `no_idempotency_contract`), not a read-back, and not an
/// attempt of a contracted tool either when the span happens to bear the tool's name.
#[test]
fn spans_their_convention_marks_as_no_tool_call_are_context_whatever_reckon_says() {
    let cases = [
        ("chat gpt-4o", "gen_ai.operation.name", "chat"),
        (
            "text_completion gpt-3.5-turbo-instruct",
            "gen_ai.operation.name",
            "text_completion",
        ),
        (
            "embeddings text-embedding-3-small",
            "gen_ai.operation.name",
            "embeddings",
        ),
        (
            "generate_content gemini-2.0-flash",
            "gen_ai.operation.name",
            "generate_content",
        ),
        (
            "invoke_agent refund_agent",
            "gen_ai.operation.name",
            "invoke_agent",
        ),
        (
            "create_agent refund_agent",
            "gen_ai.operation.name",
            "create_agent",
        ),
        ("tools/list", "mcp.method.name", "tools/list"),
        ("ChatOpenAI", "openinference.span.kind", "LLM"),
        ("LangGraph", "openinference.span.kind", "CHAIN"),
        ("Agent workflow", "openinference.span.kind", "AGENT"),
        (
            "VectorIndexRetriever.retrieve",
            "openinference.span.kind",
            "RETRIEVER",
        ),
        ("OpenAIEmbedding", "openinference.span.kind", "EMBEDDING"),
        ("CohereRerank", "openinference.span.kind", "RERANKER"),
        ("input_guardrail", "openinference.span.kind", "GUARDRAIL"),
        ("faithfulness", "openinference.span.kind", "EVALUATOR"),
        ("refund_flow.workflow", "traceloop.span.kind", "workflow"),
        ("check_order.task", "traceloop.span.kind", "task"),
        ("refund_agent.agent", "traceloop.span.kind", "agent"),
        ("openai.chat", "lmnr.span.type", "LLM"),
        ("refund_pipeline", "lmnr.span.type", "PIPELINE"),
        (
            "OpenAI-generation",
            "langfuse.observation.type",
            "generation",
        ),
        ("refund-agent", "langfuse.observation.type", "agent"),
        ("ai.generateText", "ai.operationId", "ai.generateText"),
    ];
    for (name, key, value) in cases {
        for baggage in [BAGGAGE_WRITE, BAGGAGE_READ] {
            for name in [name, "issue_refund"] {
                let d = decode(&marked_span(name, key, value, baggage));
                assert_eq!(
                    (d.seen, d.dropped, d.rejected, d.events.len()),
                    (1, 1, 0, 0),
                    "{name} ({key}={value}) with {baggage}: {d:?}"
                );
            }
        }
    }
}

/// The Vercel AI SDK (up to 6) names its model calls and marks nothing else on some of them:
/// the name alone makes them context. A user's own span merely starting with `ai.` is not one.
#[test]
fn vercel_ai_sdk_model_call_names_are_context() {
    for name in [
        "ai.generateText",
        "ai.generateText.doGenerate",
        "ai.streamText",
        "ai.streamText.doStream",
        "ai.generateObject",
        "ai.streamObject.doStream",
        "ai.embed",
        "ai.embedMany.doEmbed",
    ] {
        for baggage in [BAGGAGE_WRITE, BAGGAGE_READ] {
            let d = decode(&rule_span(name, baggage));
            assert_eq!(
                (d.seen, d.dropped, d.rejected, d.events.len()),
                (1, 1, 0, 0),
                "{name}: {d:?}"
            );
        }
    }
    for name in ["ai.refunds", "ai.generateTextual", "ai.toolCall"] {
        let a = one_attempt(&rule_span(name, BAGGAGE_WRITE));
        assert_eq!((a.intent_id.as_str(), a.tool.as_str()), ("int_b", name));
    }
}

/// A tool mark decides whatever another convention says (the instrumentation that made the span
/// marked it); a convention's generic kind (`UNKNOWN`, Langfuse's default `span`, Laminar's
/// `DEFAULT`) and a blank value mark nothing, so the executor's attributes still make the span
/// its attempt or read-back.
#[test]
fn a_tool_mark_wins_and_generic_kinds_mark_nothing() {
    for (key, value) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("mcp.method.name", "tools/call"),
        ("openinference.span.kind", "TOOL"),
        ("openinference.span.kind", "tool"),
        ("traceloop.span.kind", "tool"),
        ("lmnr.span.type", "TOOL"),
        ("langfuse.observation.type", "tool"),
        ("ai.operationId", "ai.toolCall"),
    ] {
        let both = format!(
            r#"{{"key":"gen_ai.operation.name","value":{{"stringValue":"chat"}}}},
            {{"key":"openinference.span.kind","value":{{"stringValue":"LLM"}}}},
            {BAGGAGE_WRITE}"#
        );
        // The tool mark after the others and before them.
        for doc in [
            marked_span("issue_refund", key, value, &both),
            rule_span(
                "issue_refund",
                &format!(r#"{both},{{"key":"{key}","value":{{"stringValue":"{value}"}}}}"#),
            ),
        ] {
            let a = one_attempt(&doc);
            assert_eq!(
                (a.intent_id.as_str(), a.idempotency_key.as_deref()),
                ("int_b", Some("k_b")),
                "{key}={value}"
            );
        }
    }
    for (key, value) in [
        ("openinference.span.kind", "UNKNOWN"),
        ("traceloop.span.kind", "unknown"),
        ("lmnr.span.type", "DEFAULT"),
        ("langfuse.observation.type", "span"),
        ("langfuse.observation.type", "event"),
        ("gen_ai.operation.name", " "),
    ] {
        let a = one_attempt(&marked_span("send_refund", key, value, BAGGAGE_WRITE));
        assert_eq!(
            (a.intent_id.as_str(), a.tool.as_str()),
            ("int_b", "send_refund"),
            "{key}={value}"
        );
        match one_event(&marked_span("list_refunds", key, value, BAGGAGE_READ)) {
            Event::Readback(r) => assert_eq!(r.intent_id, "int_b", "{key}={value}"),
            other => panic!("{key}={value}: want a read-back, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- limits (`ingest::limits`)

fn tool_span(n: u64, intent: &str, extra: Vec<KeyValue>) -> Span {
    let mut attributes = vec![
        kv("gen_ai.tool.name", sv("issue_refund")),
        kv("reckon.intent.id", sv(intent)),
        kv("reckon.idempotency_key", sv("k")),
    ];
    attributes.extend(extra);
    proto_span(
        &format!("{n:016x}"),
        "execute_tool issue_refund",
        attributes,
    )
}

fn padding(n: usize) -> Vec<KeyValue> {
    (0..n)
        .map(|i| kv(&format!("pad.{i}"), any_value::Value::IntValue(i as i64)))
        .collect()
}

/// Each span over a limit is refused alone, with a reason naming the limit; the span at the
/// limit and the others are kept.
#[test]
fn tool_spans_over_the_attribute_limits_are_refused_alone() {
    use crate::ingest::limits::{MAX_SPAN_ATTRIBUTES, MAX_SPAN_EVENTS, MAX_VALUE_BYTES};
    let at_limit = tool_span(1, "int_ok", padding(MAX_SPAN_ATTRIBUTES - 3));
    let too_many = tool_span(2, "int_many", padding(MAX_SPAN_ATTRIBUTES - 2));
    let huge_args = tool_span(
        3,
        "int_huge",
        vec![kv(
            "gen_ai.tool.call.arguments",
            sv(&format!(r#"{{"note":"{}"}}"#, "x".repeat(MAX_VALUE_BYTES))),
        )],
    );
    let mut huge_name = tool_span(4, "int_name", vec![]);
    huge_name.name = "n".repeat(MAX_VALUE_BYTES + 1);
    let mut many_events = tool_span(5, "int_events", vec![]);
    many_events.events = vec![Default::default(); MAX_SPAN_EVENTS + 1];
    let mut big_event = tool_span(6, "int_event_attr", vec![]);
    big_event.events = vec![opentelemetry_proto::tonic::trace::v1::span::Event {
        name: "gen_ai.tool.message".into(),
        attributes: vec![kv("content", sv(&"y".repeat(MAX_VALUE_BYTES)))],
        ..Default::default()
    }];
    // Not a tool span: dropped unread, whatever it carries.
    let other = proto_span(
        "0000000000000007",
        "GET /",
        padding(4 * MAX_SPAN_ATTRIBUTES),
    );
    let req = proto_request(vec![
        at_limit,
        too_many,
        huge_args,
        huge_name,
        many_events,
        big_event,
        other,
    ]);
    let d = traces_from_protobuf_bytes(&req.encode_to_vec(), &contracts()).unwrap();
    assert_eq!(
        (d.seen, d.dropped, d.rejected),
        (7, 1, 5),
        "{:?}",
        d.reasons
    );
    assert!(matches!(&d.events[..], [Event::Attempt(a)] if a.intent_id == "int_ok"));
    let expected = [
        "129 attributes, over the limit of 128",
        "attribute 'gen_ai.tool.call.arguments' is 65551 bytes, over the limit of 65536",
        "the span name is 65537 bytes, over the limit of 65536",
        "129 span events, over the limit of 128",
        "span event 'gen_ai.tool.message': attribute 'content' is 65540 bytes, over the limit of 65536",
    ];
    for (reason, want) in d.reasons.iter().zip(expected) {
        assert!(reason.ends_with(want), "{reason:?} does not say {want:?}");
    }
}

#[test]
fn log_records_over_the_attribute_limits_are_refused_alone() {
    use crate::ingest::limits::{MAX_SPAN_ATTRIBUTES, MAX_VALUE_BYTES};
    let record = |id: &str, extra: Vec<KeyValue>| {
        let mut attributes = vec![
            kv(logs::OBJECT_ID, sv(id)),
            kv(logs::STATUS, sv("succeeded")),
        ];
        attributes.extend(extra);
        LogRecord {
            time_unix_nano: START as u64,
            attributes,
            ..Default::default()
        }
    };
    let req = |resource: Vec<KeyValue>| ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![
                    record("re_ok", vec![]),
                    record("re_many", padding(MAX_SPAN_ATTRIBUTES)),
                    record(
                        "re_big",
                        vec![kv(logs::TARGET, sv(&"t".repeat(MAX_VALUE_BYTES)))],
                    ),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let d = logs_from_proto(&req(vec![]));
    assert_eq!((d.seen, d.rejected), (3, 2), "{:?}", d.reasons);
    assert!(
        d.reasons[0].contains("'re_many'")
            && d.reasons[0].ends_with("130 attributes, over the limit of 128")
    );
    assert!(d.reasons[1].contains("'re_big'") && d.reasons[1].contains("'reckon.record.target'"));
    // The resource's kind is copied into every record: a huge one refuses them all.
    let d = logs_from_proto(&req(vec![kv(logs::KIND, sv(&"k".repeat(MAX_VALUE_BYTES)))]));
    assert_eq!((d.seen, d.rejected), (3, 3), "{:?}", d.reasons);
    assert!(
        d.reasons[0].contains("'reckon.record.kind'"),
        "{:?}",
        d.reasons
    );
}

/// The first `MAX_INTENTS_PER_EXPORT` intents of an export are kept, with all their spans;
/// spans of later new intents are refused with the reason; JSON and protobuf alike.
#[test]
fn an_export_naming_too_many_intents_keeps_the_first_ones() {
    use crate::ingest::limits::MAX_INTENTS_PER_EXPORT;
    let mut spans: Vec<Span> = (0..MAX_INTENTS_PER_EXPORT + 2)
        .map(|i| tool_span(i as u64 + 1, &format!("int_{i}"), vec![]))
        .collect();
    // A second span of the first intent, after the limit was reached: still kept.
    spans.push(tool_span(1 << 40, "int_0", vec![]));
    let req = proto_request(spans);
    let d = traces_from_proto(&req, &contracts());
    assert_eq!(
        (d.seen, d.events.len() as u64, d.rejected),
        (
            MAX_INTENTS_PER_EXPORT as u64 + 3,
            MAX_INTENTS_PER_EXPORT as u64 + 1,
            2
        )
    );
    let refused = format!(
        "the export names more than {MAX_INTENTS_PER_EXPORT} distinct intents; send the rest in another export"
    );
    assert!(
        d.reasons.iter().all(|r| r.ends_with(&refused)),
        "{:?}",
        d.reasons
    );
    assert!(d.reasons[0].starts_with(&format!("span {TRACE}/{:016x}", MAX_INTENTS_PER_EXPORT + 1)));
    assert_eq!(
        d.events.last().map(|e| match e {
            Event::Attempt(a) => a.intent_id.as_str(),
            _ => "",
        }),
        Some("int_0")
    );
    assert_eq!(
        traces_from_protobuf_bytes(&req.encode_to_vec(), &contracts()).unwrap(),
        d
    );
}
