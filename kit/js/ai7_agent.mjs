// Vercel AI SDK 7 with its OpenTelemetry integration (`@ai-sdk/otel`, registered once with
// `registerTelemetry`) and its own mock model (`MockLanguageModelV3` from `ai/test`).
import { OpenTelemetry } from '@ai-sdk/otel';
import { trace } from '@opentelemetry/api';
import { generateText, registerTelemetry, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import * as kit from './_kit.mjs';

const provider = kit.setupTracing('kit-ai-sdk-7');
registerTelemetry(new OpenTelemetry());

for (const run of kit.plan()) {
  const issueRefund = tool({
    description: 'Refund an order.',
    inputSchema: z.object({ order_id: z.string(), amount: z.number(), currency: z.string() }),
    execute: async ({ amount }) => {
      const span = trace.getActiveSpan(); // the AI SDK's execute_tool span
      span.setAttribute('reckon.intent.id', run.intent_id);
      span.setAttribute('reckon.idempotency_key', run.idempotency_key);
      return kit.paymentApi(span, run, amount);
    },
  });
  const model = new MockLanguageModelV3({
    doGenerate: [kit.toolCallTurn(run, 'issue_refund'), kit.textTurn('Done.')],
  });
  const result = await generateText({
    model,
    tools: { issue_refund: issueRefund },
    stopWhen: stepCountIs(3),
    prompt: `Refund order ${run.order_id}.`,
    // recordInputs (the default) keeps the tool's arguments on the span.
    telemetry: { functionId: 'refunds', recordInputs: true },
  });
  kit.report(run, { output: result.text });
}
await provider.shutdown();
