#!/usr/bin/env python3
"""A timed-out refund, seen by reckon.

An agent's refund tool called the payment service 90 seconds ago and timed out after 30: the
outcome is unknown. The tool span is exported with the Python OpenTelemetry SDK (OTLP/HTTP), the
way any instrumented agent would. reckon reports the intent as `unknown` with decision
`retry_same_key` (the refund contract replays same-key requests for 24 h). Then the payment
service's own record arrives (as a webhook or records-API call would bring it) and reckon reports
the intent `completed`: the refund had committed, and no second one must be sent.

    python3 -m venv .venv && . .venv/bin/activate   # Debian's Python refuses a system-wide pip
    pip install -r examples/python/requirements.txt
    python3 examples/python/timed_out_refund.py [--otlp URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318)] [--api http://localhost:8080]

Exits non-zero if reckon concludes anything else.
"""

import argparse
import os
import json
import sys
import time
import urllib.error
import urllib.request
import uuid

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, None


def wait_for(api, intent_id, want_state, seconds=10.0):
    deadline = time.time() + seconds
    verdict = None
    while time.time() < deadline:
        status, verdict = get_json(f"{api}/api/v1/intents/{intent_id}")
        if status == 200 and verdict["state"] == want_state:
            return verdict
        time.sleep(0.1)
    return verdict


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The SDK's own variable, as every other exporter reads it; the flag overrides it.
    parser.add_argument("--otlp", default=os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318").rstrip("/"),
                        help="reckon's OTLP/HTTP endpoint (default: $OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318)")
    parser.add_argument("--api", default="http://localhost:8080", help="reckon's API")
    args = parser.parse_args()

    intent_id = f"refund-{uuid.uuid4().hex[:12]}"
    key = f"idem-{uuid.uuid4().hex}"  # minted once, with the intent, never by the model
    arguments = {"order_id": "1042", "amount": 45.00, "currency": "usd"}

    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")))
    tracer = provider.get_tracer("support-agent.tools")

    sent = time.time_ns() - 90 * 1_000_000_000
    span = tracer.start_span("execute_tool issue_refund", kind=SpanKind.CLIENT, start_time=sent)
    span.set_attributes({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "issue_refund",
        "gen_ai.tool.call.arguments": json.dumps(arguments),
        "reckon.intent.id": intent_id,
        "reckon.idempotency_key": key,
        "reckon.outcome": "unknown",
        "error.type": "timeout",
    })
    span.set_status(Status(StatusCode.ERROR, "read timed out after 30s"))
    span.end(end_time=sent + 30 * 1_000_000_000)
    provider.force_flush()

    verdict = wait_for(args.api, intent_id, "unknown")
    print(f"after the timeout:   state={verdict and verdict['state']} decision={verdict and verdict['decision']}")
    if not verdict or verdict["decision"] != "retry_same_key":
        print("expected unknown / retry_same_key", file=sys.stderr)
        return 1

    record = {
        "kind": "refund", "object_id": f"re_{uuid.uuid4().hex[:14]}", "intent_id": intent_id,
        "idempotency_key": key, "status": "succeeded", "amount": "45.00", "currency": "usd",
        "target": "1042", "source": "payments",
    }
    req = urllib.request.Request(f"{args.api}/api/v1/records", data=json.dumps(record).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        reply = json.load(resp)
    if reply.get("accepted") != 1:
        print(f"record not accepted: {reply}", file=sys.stderr)
        return 1

    verdict = wait_for(args.api, intent_id, "completed")
    print(f"after the record:    state={verdict and verdict['state']} decision={verdict and verdict['decision']}")
    provider.shutdown()
    if not verdict or verdict["state"] != "completed" or verdict["decision"] != "none":
        print("expected completed / none", file=sys.stderr)
        return 1
    print(f"intent {intent_id}: the refund had committed; no second refund is sent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
