"""Google ADK with its built-in OpenTelemetry spans (on the global tracer provider: ADK documents
"set up the SDK, ADK traces into it") and a scripted model (a `google.adk.models.BaseLlm` that
answers with a function call, then text, with no network)."""
from __future__ import annotations

import asyncio
from typing import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from opentelemetry import trace

import _kit

provider = _kit.setup_tracing("kit-google-adk")


class ScriptedLlm(BaseLlm):
    """Calls `issue_refund` with `arguments` first; once the tool has answered, says so."""

    arguments: dict

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answered = any(
            p.function_response for c in llm_request.contents for p in (c.parts or []) if p is not None
        )
        if answered:
            part = types.Part.from_text(text="Done.")
        else:
            part = types.Part(function_call=types.FunctionCall(name="issue_refund", args=self.arguments))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order."""
    run = _kit.current()
    span = trace.get_current_span()  # ADK's execute_tool span
    span.set_attribute("reckon.intent.id", run.intent_id)
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


async def main() -> None:
    for run in _kit.plan():
        _kit.CURRENT = run
        agent = LlmAgent(
            name="refunds",
            model=ScriptedLlm(model="scripted", arguments=run.arguments()),
            instruction="You issue refunds.",
            tools=[issue_refund],
        )
        runner = InMemoryRunner(agent=agent, app_name="kit")
        session = await runner.session_service.create_session(app_name="kit", user_id="kit")
        text = ""
        async for event in runner.run_async(
            user_id="kit",
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part.from_text(text=f"Refund order {run.order_id}.")]),
        ):
            if event.content and event.content.parts and event.content.parts[0].text:
                text = event.content.parts[0].text
        _kit.report(run, output=text)


asyncio.run(main())
provider.shutdown()
