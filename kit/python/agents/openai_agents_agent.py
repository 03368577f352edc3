"""OpenAI Agents SDK with OpenInference's instrumentation (`OpenAIAgentsInstrumentor`, which turns
the SDK's own traces into OpenTelemetry spans) and the SDK's own test model (`ScriptedModel`)."""
from __future__ import annotations

import asyncio

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry import trace

import _kit

provider = _kit.setup_tracing("kit-openai-agents")
# Replaces the SDK's default trace processor (which would upload to OpenAI) with OpenInference's.
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


@function_tool
def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order."""
    run = _kit.current()
    span = trace.get_current_span()  # OpenInference's TOOL span
    span.set_attribute("reckon.intent.id", run.intent_id)
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


async def main() -> None:
    for run in _kit.plan():
        _kit.CURRENT = run
        model = ScriptedModel(
            [
                [function_call("issue_refund", run.arguments(), call_id=f"call_{run.intent_id}")],
                [assistant_message("Done.")],
            ]
        )
        agent = Agent(name="refunds", instructions="You issue refunds.", model=model, tools=[issue_refund])
        # trace_include_sensitive_data (the default, True) keeps the tool's arguments on the span.
        result = await Runner.run(
            agent, f"Refund order {run.order_id}.", run_config=RunConfig(trace_include_sensitive_data=True)
        )
        _kit.report(run, output=result.final_output)


asyncio.run(main())
provider.shutdown()
