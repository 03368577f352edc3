"""Strands Agents with its own telemetry setup (`StrandsTelemetry().setup_otlp_exporter()`, which
reads OTEL_EXPORTER_OTLP_ENDPOINT) and a scripted model provider (a `strands.models.Model` that
streams a tool call, then a text answer, with no network)."""
from __future__ import annotations

import json
from typing import Any, AsyncIterable

from opentelemetry import trace
from strands import Agent, tool
from strands.models import Model
from strands.telemetry import StrandsTelemetry

import _kit

telemetry = StrandsTelemetry()
telemetry.setup_otlp_exporter()


class ScriptedModel(Model):
    """Answers the first turn with a call of `issue_refund`, every later turn with text."""

    def __init__(self, arguments: dict) -> None:
        self.arguments = arguments
        self.config: dict[str, Any] = {"model_id": "scripted"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> Any:
        return self.config

    def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # pragma: no cover
        raise NotImplementedError

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterable[Any]:
        answered = any("toolResult" in block for m in messages for block in m.get("content", []))
        yield {"messageStart": {"role": "assistant"}}
        if answered:
            yield {"contentBlockDelta": {"delta": {"text": "Done."}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": "call_1", "name": "issue_refund"}}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(self.arguments)}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


@tool
def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order.

    Args:
        order_id: the order
        amount: how much, in major units
        currency: ISO 4217 code
    """
    run = _kit.current()
    span = trace.get_current_span()  # Strands' execute_tool span
    span.set_attribute("reckon.intent.id", run.intent_id)
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


for run in _kit.plan():
    _kit.CURRENT = run
    agent = Agent(model=ScriptedModel(run.arguments()), tools=[issue_refund], callback_handler=None)
    result = agent(f"Refund order {run.order_id}.")
    _kit.report(run, output=str(result).strip())
trace.get_tracer_provider().shutdown()
