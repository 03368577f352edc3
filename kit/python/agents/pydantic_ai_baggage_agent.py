"""Pydantic AI (format 5) with the intent id in OpenTelemetry baggage, copied onto every span as
a baggage span processor does: the agent's run, its model calls, and each tool span, the lookup
`list_refunds` it makes before refunding included. Only `issue_refund` is the executor's attempt;
the lookup is context (no contract covers it, and the executor marked nothing on it).

Each run is done twice: once as planned (look up, then refund), and once under the intent
`{intent_id}-lookup-only`, where the agent looks up and decides no refund is needed: an intent
whose only tool span is the lookup."""
from __future__ import annotations

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import SpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

import _kit

INTENT = "reckon.intent.id"


class BaggageToAttributes(SpanProcessor):
    """What `opentelemetry-processor-baggage` does: each baggage entry becomes an attribute of
    every span started under it."""

    def on_start(self, span, parent_context=None):
        value = baggage.get_baggage(INTENT, parent_context)
        if value is not None:
            span.set_attribute(INTENT, str(value))


provider = _kit.setup_tracing("kit-pydantic-ai-baggage")
provider.add_span_processor(BaggageToAttributes())
Agent.instrument_all(InstrumentationSettings(version=5, include_content=True))


def fake_model(run: _kit.Run, refund: bool = True) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("list_refunds", {"order_id": run.order_id})])
        if len(returned) == 1 and refund:
            return ModelResponse(parts=[ToolCallPart("issue_refund", run.arguments())])
        return ModelResponse(parts=[TextPart(str(returned[-1].content))])

    return FunctionModel(respond)


agent = Agent(instructions="You issue refunds, after checking the order's existing refunds.")


@agent.tool_plain
def list_refunds(order_id: str) -> str:
    """The order's refunds so far."""
    return f"Order {order_id} has no refunds."


@agent.tool_plain
def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order."""
    run = _kit.current()
    span = trace.get_current_span()  # Pydantic AI's tool span; the intent id came from baggage
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


def run_under(intent_id: str, run: _kit.Run, refund: bool) -> str:
    token = context.attach(baggage.set_baggage(INTENT, intent_id))
    try:
        return agent.run_sync(f"Refund order {run.order_id}.", model=fake_model(run, refund)).output
    finally:
        context.detach(token)


for run in _kit.plan():
    _kit.CURRENT = run
    _kit.report(run, output=run_under(run.intent_id, run, refund=True))
    lookup_only = run_under(f"{run.intent_id}-lookup-only", run, refund=False)
    _kit.report(run, lookup_only=lookup_only)
provider.shutdown()
