"""LlamaIndex (a `FunctionAgent` workflow) with OpenInference's instrumentation
(`LlamaIndexInstrumentor`) and LlamaIndex's own test model (`MockFunctionCallingLLM`, given a
response generator that calls the tool, then answers)."""
from __future__ import annotations

import asyncio

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry import trace

import _kit

provider = _kit.setup_tracing("kit-llama-index")
LlamaIndexInstrumentor().instrument(tracer_provider=provider)


def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order."""
    run = _kit.current()
    span = trace.get_current_span()  # OpenInference's TOOL span
    span.set_attribute("reckon.intent.id", run.intent_id)
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


def scripted(run: _kit.Run):
    def respond(messages, **kwargs) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, content="Done.")
        call = ToolCallBlock(tool_call_id="call_1", tool_name="issue_refund", tool_kwargs=run.arguments())
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    return respond


async def main() -> None:
    for run in _kit.plan():
        _kit.CURRENT = run
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(issue_refund)],
            llm=MockFunctionCallingLLM(response_generator=scripted(run)),
            system_prompt="You issue refunds.",
        )
        result = await agent.run(f"Refund order {run.order_id}.")
        _kit.report(run, output=str(result))


asyncio.run(main())
provider.shutdown()
