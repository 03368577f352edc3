// What every JavaScript agent of the kit shares: the run plan (JSON in argv[2], as in
// kit/python/agents/_kit.py), the simulated payment API, and the OpenTelemetry SDK set up the way
// its documentation says (a NodeTracerProvider with a BatchSpanProcessor and the OTLP/HTTP
// exporter, which reads OTEL_EXPORTER_OTLP_ENDPOINT; `register()` installs the async context
// manager the AI SDK's active spans need).
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  ConsoleSpanExporter,
  NodeTracerProvider,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';

export function plan() {
  return JSON.parse(process.argv[2]);
}

/** The tool call the fake model makes: what the model decided to refund. */
export function toolArguments(run) {
  return { order_id: run.order_id, amount: Number(run.amount), currency: run.currency };
}

export function setupTracing(service) {
  const spanProcessors = [new BatchSpanProcessor(new OTLPTraceExporter())];
  // KIT_CONSOLE=1 also prints every span: what the framework really sends.
  if (process.env.KIT_CONSOLE) spanProcessors.push(new SimpleSpanProcessor(new ConsoleSpanExporter()));
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': service }),
    spanProcessors,
  });
  provider.register();
  return provider;
}

/** The downstream call, simulated inside the tool: sets on `span` what the payment client's
 * instrumentation (or the tool's author) records about the response, and returns what the tool
 * tells the model. `success` and `wrong_amount` get a refund object; `timeout` gets no answer. */
export function paymentApi(span, run, amount) {
  if (run.scenario === 'timeout') {
    span.setAttribute('error.type', 'timeout');
    span.setAttribute('reckon.outcome', 'unknown');
    return 'The payment service did not answer in time; the refund may or may not have happened.';
  }
  span.setAttribute('http.response.status_code', 200);
  span.setAttribute('reckon.downstream.object_id', run.object_id);
  span.setAttribute('reckon.downstream.status', 'succeeded');
  span.setAttribute('reckon.outcome', 'succeeded');
  return `Refund ${run.object_id} of ${amount} ${run.currency} succeeded.`;
}

export function report(run, extra = {}) {
  console.log(JSON.stringify({ intent_id: run.intent_id, scenario: run.scenario, ...extra }));
}

/** A scripted model turn, in the shape of the provider specification (v3) both AI SDK majors take. */
export function toolCallTurn(run, toolName) {
  return {
    content: [
      {
        type: 'tool-call',
        toolCallId: `call_${run.intent_id}`,
        toolName,
        input: JSON.stringify(toolArguments(run)),
      },
    ],
    finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
    usage: usage(),
    warnings: [],
  };
}

export function textTurn(text) {
  return {
    content: [{ type: 'text', text }],
    finishReason: { unified: 'stop', raw: 'stop' },
    usage: usage(),
    warnings: [],
  };
}

function usage() {
  return {
    inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: 5, text: 5, reasoning: undefined },
  };
}
