// Vercel AI SDK 6 with its built-in OpenTelemetry spans (`experimental_telemetry`, on the global
// tracer provider; `ai.toolCall` spans) and its own mock model (`MockLanguageModelV3` from
// `ai/test`). Installed under the alias `ai6` beside AI SDK 7.
import { trace } from '@opentelemetry/api';
import { generateText, stepCountIs, tool } from 'ai6';
import { MockLanguageModelV3 } from 'ai6/test';
import { z } from 'zod';
import * as kit from './_kit.mjs';

const provider = kit.setupTracing('kit-ai-sdk-6');

for (const run of kit.plan()) {
  const issueRefund = tool({
    description: 'Refund an order.',
    inputSchema: z.object({ order_id: z.string(), amount: z.number(), currency: z.string() }),
    execute: async ({ amount }) => {
      const span = trace.getActiveSpan(); // the AI SDK's ai.toolCall span
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
    experimental_telemetry: { isEnabled: true, functionId: 'refunds', recordInputs: true },
  });
  kit.report(run, { output: result.text });
}
await provider.shutdown();
