"""Pydantic AI with its own OpenTelemetry instrumentation (`Agent.instrument_all`) and its own test
model (`FunctionModel`). argv[2] is the instrumentation format version: 5 (the default, OpenTelemetry
GenAI `execute_tool issue_refund` spans) or 2 (the deprecated `running tool` spans)."""
from __future__ import annotations

import sys

from opentelemetry import trace
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

import _kit

version = int(sys.argv[2]) if len(sys.argv) > 2 else 5
provider = _kit.setup_tracing(f"kit-pydantic-ai-v{version}")
# include_content (the default) puts the tool's arguments on the span: reckon compares them.
Agent.instrument_all(InstrumentationSettings(version=version, include_content=True))


def fake_model(run: _kit.Run) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart(str(returned[-1].content))])
        return ModelResponse(parts=[ToolCallPart("issue_refund", run.arguments())])

    return FunctionModel(respond)


agent = Agent(instructions="You issue refunds.")


@agent.tool_plain
def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order."""
    run = _kit.current()
    span = trace.get_current_span()  # Pydantic AI's tool span
    span.set_attribute("reckon.intent.id", run.intent_id)
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


for run in _kit.plan():
    _kit.CURRENT = run
    result = agent.run_sync(f"Refund order {run.order_id}.", model=fake_model(run))
    _kit.report(run, output=result.output)
provider.shutdown()
