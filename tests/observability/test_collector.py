"""deploy/otel-collector.yaml, checked without a Collector binary (otelcol-contrib is published
on GitHub releases only, which this environment cannot reach): it parses, every pipeline names
components that are defined, the sending queue is persistent, traces are routed by
`reckon.intent.id`, and the filter processor's condition (OTTL, evaluated here by a small
translator for the subset it uses) keeps exactly the spans reckon recognises as tool spans."""

import re

import yaml

import reckon_sql

ROOT = reckon_sql.ROOT
CONFIG = ROOT / "deploy" / "otel-collector.yaml"


def config():
    return yaml.safe_load(CONFIG.read_text())


def test_pipelines_name_defined_components():
    c = config()
    svc = c["service"]
    for ext in svc["extensions"]:
        assert ext in c["extensions"], ext
    for name, p in svc["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for comp in p.get(kind, []):
                assert comp in c[kind], f"{name}: {kind} {comp} is not defined"
    assert "filter/reckon-tool-spans" in svc["pipelines"]["traces"]["processors"]


def test_traces_route_by_intent_with_a_persistent_queue():
    c = config()
    lb = c["exporters"]["load_balancing/traces"]
    assert lb["routing_key"] == "attributes"
    assert lb["routing_attributes"] == ["reckon.intent.id"]
    q = lb["sending_queue"]
    assert q["enabled"] is True
    assert q["storage"] in c["extensions"] and q["storage"].startswith("file_storage")
    assert c["exporters"]["load_balancing/logs"]["sending_queue"]["storage"] == q["storage"]
    assert "otlp" in lb["protocol"] and lb["resolver"]


def _drop_condition():
    (cond,) = config()["processors"]["filter/reckon-tool-spans"]["traces"]["span"]
    return cond


def _evaluator(cond: str):
    """The OTTL condition as a Python expression over (name, attributes)."""
    expr = re.sub(r'attributes\["([^"]+)"\]', r'attrs.get("\1")', cond)
    expr = re.sub(r'IsMatch\(name, "([^"]*)"\)', r'(re.search(r"\1", name) is not None)', expr)
    expr = expr.replace("nil", "None")
    assert "IsMatch" not in expr and "attributes" not in expr, expr
    code = compile(expr, "ottl", "eval")
    return lambda name, attrs: eval(code, {"re": re}, {"name": name, "attrs": attrs})


KEPT = [
    ("execute_tool issue_refund", {"gen_ai.operation.name": "execute_tool"}),
    ("execute_tool issue_refund", {}),
    ("tools/call issue_refund", {"mcp.method.name": "tools/call"}),
    ("issue_refund", {"openinference.span.kind": "TOOL"}),
    ("issue_refund.tool", {"traceloop.span.kind": "tool"}),
    ("ai.toolCall", {"ai.toolCall.name": "issue_refund"}),
    ("running tool", {"gen_ai.tool.name": "issue_refund"}),
    ("issue_refund", {"lmnr.span.type": "TOOL"}),
    ("issue_refund", {"langfuse.observation.type": "tool"}),
    ("refund", {"reckon.intent.id": "i1", "reckon.idempotency_key": "k1"}),
    ("list_refunds", {"reckon.intent.id": "i1", "reckon.action": "read"}),
]
DROPPED = [
    ("chat gpt-4o", {"gen_ai.operation.name": "chat"}),
    ("POST", {"http.request.method": "POST", "reckon.intent.id": "i1"}),  # baggage copy
    ("agent step", {"reckon.intent.id": "i1"}),
    ("execute_toolbox", {}),
    ("llm", {"lmnr.span.type": "LLM"}),
    ("generation", {"langfuse.observation.type": "generation"}),
    ("retriever", {"openinference.span.kind": "RETRIEVER"}),
]


def test_filter_keeps_tool_spans_and_drops_the_rest():
    drop = _evaluator(_drop_condition())
    for name, attrs in KEPT:
        assert not drop(name, attrs), f"kept: {name} {attrs}"
    for name, attrs in DROPPED:
        assert drop(name, attrs), f"dropped: {name} {attrs}"


def test_filter_names_every_marker_reckon_recognises():
    """A marker added to src/ingest/otlp/recognize.rs must reach the Collector's filter too."""
    src = (ROOT / "src" / "ingest" / "otlp" / "recognize.rs").read_text()
    body = src[src.index("fn is_tool_span") : src.index("fn is_execute_tool_name")]
    markers = set(re.findall(r'b"([a-z_.]+)"', body)) | set(re.findall(r'name == "([^"]+)"', body))
    cond = _drop_condition()
    for m in markers:
        assert m in cond, f"{m} is recognised by reckon but not kept by the Collector's filter"


SECOND = ROOT / "deploy" / "otel-collector-second-exporter.yaml"


def test_second_exporter_snippet_is_complete_and_filters_alike():
    """deploy/otel-collector-second-exporter.yaml: its pipelines name defined components, only
    tool spans reach reckon (the same filter as the main file), and the queue is on disk."""
    c = yaml.safe_load(SECOND.read_text())
    svc = c["service"]
    for ext in svc["extensions"]:
        assert ext in c["extensions"], ext
    for name, p in svc["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for comp in p.get(kind, []):
                assert comp in c[kind], f"{name}: {kind} {comp} is not defined"
    traces = svc["pipelines"]["traces/reckon"]
    assert traces["processors"][0] == "filter/reckon-tool-spans"
    assert c["processors"]["filter/reckon-tool-spans"] == config()["processors"]["filter/reckon-tool-spans"]
    exporter = c["exporters"][traces["exporters"][0]]
    q = exporter["sending_queue"]
    assert q["enabled"] is True and q["storage"] in c["extensions"]
    assert exporter["retry_on_failure"]["max_elapsed_time"] in ("0s", 0)
