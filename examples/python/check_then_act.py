#!/usr/bin/env python3
"""Check, then act: a refund listed before the agent's own send is not its refund.

The agent first reads the order's refunds (a read-back: `reckon.action = read`, with the ids it
found in `reckon.readback.object_ids`) and finds one made by hand last week: the payment
service's record of it carries no intent id and no key. Then the agent sends its own refund, and
that call times out. The old refund was there before the agent wrote anything, so it cannot be
the agent's effect: reckon reports the intent `unknown` with decision `retry_same_key`, not
`completed` (which would tell the agent its refund is done when it may never have happened).

    python3 -m venv .venv && . .venv/bin/activate   # Debian's Python refuses a system-wide pip
    pip install -r examples/python/requirements.txt
    python3 examples/python/check_then_act.py [--otlp URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318)] [--api http://localhost:8080]

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

SECOND = 1_000_000_000


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, None


def wait_for(api, intent_id, attempts, seconds=10.0):
    """The verdict once it holds `attempts` attempts and a read-back (both spans audited)."""
    deadline = time.time() + seconds
    verdict = None
    while time.time() < deadline:
        status, verdict = get_json(f"{api}/api/v1/intents/{intent_id}")
        if status == 200 and len(verdict["attempts"]) == attempts and verdict["readbacks"]:
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
    key = f"idem-{uuid.uuid4().hex}"
    old_refund = f"re_{uuid.uuid4().hex[:14]}"
    last_week = time.gmtime(time.time() - 7 * 86400)

    # The payment service's record of last week's refund: no intent id, no key.
    record = {
        "kind": "refund", "object_id": old_refund, "status": "succeeded", "amount": "45.00",
        "currency": "usd", "target": "1042", "source": "payments",
        "observed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", last_week),
    }
    req = urllib.request.Request(f"{args.api}/api/v1/records", data=json.dumps(record).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        reply = json.load(resp)
    if reply.get("accepted") != 1:
        print(f"record not accepted: {reply}", file=sys.stderr)
        return 1

    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")))
    tracer = provider.get_tracer("support-agent.tools")
    now = time.time_ns()

    # Check: "refunds for order 1042", two minutes ago.
    read = tracer.start_span("execute_tool list_refunds", kind=SpanKind.CLIENT, start_time=now - 120 * SECOND)
    read.set_attributes({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "list_refunds",
        "reckon.intent.id": intent_id,
        "reckon.action": "read",
        "reckon.readback.object_ids": [old_refund],
    })
    read.end(end_time=now - 119 * SECOND)

    # Act: the refund, sent 90 seconds ago, timed out after 30.
    send = tracer.start_span("execute_tool issue_refund", kind=SpanKind.CLIENT, start_time=now - 90 * SECOND)
    send.set_attributes({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "issue_refund",
        "gen_ai.tool.call.arguments": json.dumps({"order_id": "1042", "amount": 45.00, "currency": "usd"}),
        "reckon.intent.id": intent_id,
        "reckon.idempotency_key": key,
        "reckon.outcome": "unknown",
        "error.type": "timeout",
    })
    send.set_status(Status(StatusCode.ERROR, "read timed out after 30s"))
    send.end(end_time=now - 60 * SECOND)
    provider.force_flush()
    provider.shutdown()

    verdict = wait_for(args.api, intent_id, attempts=1)
    if not verdict:
        print(f"no verdict for {intent_id}", file=sys.stderr)
        return 1
    objects = [o["object_id"] for o in verdict["objects"]]
    print(f"after the timeout:   state={verdict['state']} decision={verdict['decision']} objects={objects}")
    if verdict["state"] != "unknown" or verdict["decision"] != "retry_same_key" or objects:
        print(f"expected unknown / retry_same_key with no object: {old_refund} predates the send",
              file=sys.stderr)
        return 1
    print(f"intent {intent_id}: {old_refund} was there before the send; the refund's outcome is unknown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
