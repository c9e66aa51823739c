// The AG-UI client CopilotKit 1.74 pins (`@ag-ui/client` 0.0.59, installed here under the
// alias `@ag-ui/client-0.0.59`) against a bidi HTTP server's AG-UI endpoint. It sends no
// `protocolVersion` and checks every event against a schema that refuses keys it does not
// know: a `RUN_FINISHED` outcome with `pendingToolCallIds` made its runs fail with a ZodError.
// Usage: node agui_legacy_client.mjs <baseUrl>
//
// The agents are those of agui_client.mjs (/agent/writer, /agent/deployer), on a server of
// their own.

import { HttpAgent } from '@ag-ui/client-0.0.59';
import { assert, assertJson, check, run } from './harness.mjs';

const confirm = {
  name: 'confirm',
  description: 'Asks the user to confirm an action',
  parameters: { type: 'object', properties: { action: { type: 'string' } } },
};

/** The run's end and errors, as its subscriber saw them. */
function recorder() {
  const seen = { finished: undefined, errors: [] };
  seen.subscriber = {
    onRunFinishedEvent: ({ event }) => {
      seen.finished = event;
    },
    onRunErrorEvent: ({ event }) => {
      seen.errors.push(event);
    },
    onRunFailed: ({ error }) => {
      seen.errors.push(String(error));
    },
  };
  return seen;
}

const roles = (messages) => messages.map((message) => message.role);

await run(async (base) => {
  await check('a text run finishes under the pre-1.0 schema', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/writer/ag-ui`,
      threadId: 'legacy-text-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'hi' }],
    });
    const seen = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1' }, seen.subscriber);
    assertJson(seen.errors, [], 'errors');
    assertJson(seen.finished?.outcome, { type: 'success' }, 'outcome');
    const answer = newMessages.find((message) => message.role === 'assistant');
    assertJson(answer?.content, 'Hello world', 'answer');
  });

  await check('a frontend tool call ends the run without a ZodError, and its result resumes it', async () => {
    const agent = new HttpAgent({
      url: `${base}/agent/deployer/ag-ui`,
      threadId: 'legacy-tool-1',
      initialMessages: [{ id: 'u1', role: 'user', content: 'deploy, please' }],
    });
    const first = recorder();
    const { newMessages } = await agent.runAgent({ runId: 'run-1', tools: [confirm] }, first.subscriber);
    assertJson(first.errors, [], 'errors');
    assertJson(first.finished?.outcome, { type: 'success' }, 'outcome');
    const call = newMessages.find((message) => message.role === 'assistant')?.toolCalls?.[0];
    assertJson(call?.id, 'call-1', 'the pending call');
    agent.addMessage({ id: 'r1', role: 'tool', toolCallId: 'call-1', content: 'true' });
    const second = recorder();
    const resumed = await agent.runAgent({ runId: 'run-2', tools: [confirm] }, second.subscriber);
    assertJson(second.errors, [], 'errors');
    assertJson(roles(resumed.newMessages), ['assistant'], 'second run');
    assert(resumed.newMessages[0].content === 'Deployed', 'the answer after the result');
  });
});
