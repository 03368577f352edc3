"""What every agent of the kit shares: the run plan, the simulated payment API, and the OpenTelemetry
SDK set up the way its documentation says (a TracerProvider, a BatchSpanProcessor, the OTLP/HTTP
exporter reading OTEL_EXPORTER_OTLP_ENDPOINT).

The runner (kit/test_frameworks.py) passes the plan as JSON in argv[1]: a list of runs, each
{"scenario": "success" | "timeout" | "wrong_amount", "intent_id", "idempotency_key", "order_id",
"amount", "currency", "object_id"}. The agent asks its framework's own fake model to refund the
order; the fake model calls the tool `issue_refund`; the tool "calls the payment API", simulated
here inside the tool itself, and annotates the span with what the API answered.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


@dataclass
class Run:
    scenario: str
    intent_id: str
    idempotency_key: str
    order_id: str
    amount: str
    currency: str
    object_id: str

    def arguments(self) -> dict:
        """The tool call the fake model makes: what the model decided to refund."""
        return {"order_id": self.order_id, "amount": float(self.amount), "currency": self.currency}


def plan() -> list[Run]:
    return [Run(**r) for r in json.loads(sys.argv[1])]


def setup_tracing(service: str) -> TracerProvider:
    """The OpenTelemetry SDK's ordinary setup; the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    debug(provider)
    trace.set_tracer_provider(provider)
    return provider


def debug(provider: TracerProvider) -> None:
    """KIT_CONSOLE=1 also prints every span (to stderr): what the framework really sends."""
    if os.environ.get("KIT_CONSOLE"):
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))


# The executor's state: which intent the current tool call belongs to. A real executor mints the
# intent id and its idempotency key once, when it decides to act, and keeps them for every retry.
CURRENT: Run | None = None


def current() -> Run:
    assert CURRENT is not None, "no run in progress"
    return CURRENT


def payment_api(span: trace.Span, run: Run, amount: float) -> str:
    """The downstream call, simulated inside the tool: sets on `span` what a payment client's
    instrumentation (or the tool's author) records about the response, and returns what the tool
    tells the model. `success` and `wrong_amount` get a refund object; `timeout` gets no answer."""
    if run.scenario == "timeout":
        span.set_attribute("error.type", "timeout")
        span.set_attribute("reckon.outcome", "unknown")
        return "The payment service did not answer in time; the refund may or may not have happened."
    span.set_attribute("http.response.status_code", 200)
    span.set_attribute("reckon.downstream.object_id", run.object_id)
    span.set_attribute("reckon.downstream.status", "succeeded")
    span.set_attribute("reckon.outcome", "succeeded")
    return f"Refund {run.object_id} of {amount} {run.currency} succeeded."


def report(run: Run, **extra) -> None:
    """One line per run on stdout for the runner's log."""
    print(json.dumps({"intent_id": run.intent_id, "scenario": run.scenario, **extra}), flush=True)
