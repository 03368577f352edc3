"""LangGraph (a StateGraph with a ToolNode, the tutorial's tool-calling loop) with a LangChain
instrumentation, and a fake chat model from langchain_core (`GenericFakeChatModel`, taught
`bind_tools`). argv[2] picks the instrumentation:

- `openinference`: OpenInference's `LangChainInstrumentor`. Its TOOL span is not the active
  OpenTelemetry span inside the tool (`trace.get_current_span()` there is the graph's), so the
  tool takes the span from the instrumentation: `openinference.instrumentation.langchain.get_current_span()`.
- `openinference-arguments`: the same instrumentation, with the span out of reach: the intent id and
  the key travel in the tool's arguments, and the contract reads them by JSON pointer (tool
  `refund_order`, kit/contracts/refund_by_arguments.toml). The tool's outcome then reaches reckon
  from the payment service's records alone (the runner posts them).
- `openinference-naive`: the same instrumentation, the tool annotating `trace.get_current_span()`
  as it would under the other instrumentations: the attributes land on the graph's span, the TOOL
  span names no intent, and reckon counts it in `reckon_spans_dropped_total{reason="no_intent_id"}`.
  The kit runs it to show the trap, not as a way to integrate.
- `openllmetry`: OpenLLMetry's (Traceloop's) `LangchainInstrumentor`; the tool span is the active span.
"""
from __future__ import annotations

import sys

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry import trace

import _kit

mode = sys.argv[2]
provider = _kit.setup_tracing(f"kit-langgraph-{mode}")
if mode.startswith("openinference"):
    from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span

    LangChainInstrumentor().instrument(tracer_provider=provider)
    if mode == "openinference-naive":
        get_current_span = trace.get_current_span
elif mode == "openllmetry":
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    # TRACELOOP_TRACE_CONTENT (default true) keeps the tool's arguments on the span.
    LangchainInstrumentor().instrument(tracer_provider=provider)

    get_current_span = trace.get_current_span
else:
    raise SystemExit(f"unknown mode {mode}")


class FakeToolCallingModel(GenericFakeChatModel):
    """langchain_core's fake chat model, which does not implement `bind_tools`: the scripted
    messages already hold the tool calls, so binding is a no-op."""

    def bind_tools(self, tools, **kwargs):
        return self


@tool
def issue_refund(order_id: str, amount: float, currency: str) -> str:
    """Refund an order."""
    run = _kit.current()
    span = get_current_span()  # the instrumentation's tool span
    span.set_attribute("reckon.intent.id", run.intent_id)
    span.set_attribute("reckon.idempotency_key", run.idempotency_key)
    return _kit.payment_api(span, run, amount)


@tool
def refund_order(order_id: str, amount: float, currency: str, intent_id: str, idempotency_key: str) -> str:
    """Refund an order, once per intent: send `idempotency_key` with the payment API call."""
    run = _kit.current()
    assert (intent_id, idempotency_key) == (run.intent_id, run.idempotency_key)
    if run.scenario == "timeout":
        raise TimeoutError("the payment service did not answer in time")
    return f"Refund {run.object_id} of {amount} {currency} succeeded."


by_arguments = mode == "openinference-arguments"
refund = refund_order if by_arguments else issue_refund


def graph(model):
    def agent(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    # The tutorial's loop; errors become ToolMessages the model sees (a timeout included).
    g.add_node("tools", ToolNode([refund], handle_tool_errors=True))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


for run in _kit.plan():
    _kit.CURRENT = run
    arguments = run.arguments()
    if by_arguments:
        arguments |= {"intent_id": run.intent_id, "idempotency_key": run.idempotency_key}
    model = FakeToolCallingModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[{"name": refund.name, "args": arguments, "id": "call_1"}]),
                AIMessage(content="Done."),
            ]
        )
    )
    result = graph(model).invoke({"messages": [("user", f"Refund order {run.order_id}.")]})
    _kit.report(run, output=result["messages"][-2].content)
provider.shutdown()
