// The A2A JS SDK's own server (@a2a-js/sdk 1.3.0: DefaultRequestHandler, InMemoryTaskStore and
// its Express JSON-RPC handler), answering every message as bidi's A2A bench agent does: a task
// that completes with one artifact of one word, the message and the answer in its history.
// Usage: node server.mjs; prints `http://127.0.0.1:{port}` (its JSON-RPC endpoint) once it listens.

import express from 'express';
import { Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const card = {
  name: 'echo',
  description: 'Answers every message with one word',
  supportedInterfaces: [{ url: 'http://127.0.0.1/', protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' }],
  version: '1.0.0',
  capabilities: { streaming: true, pushNotifications: false, extendedAgentCard: false, extensions: [] },
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [],
  securitySchemes: {},
  securityRequirements: [],
  signatures: [],
};

const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: '' });

class Echo {
  async execute(context, bus) {
    const { taskId, contextId, userMessage } = context;
    const answer = {
      messageId: `${taskId}-answer`, contextId, taskId, role: Role.ROLE_AGENT,
      parts: [text('Hello')], extensions: [], referenceTaskIds: [],
    };
    bus.publish(AgentEvent.task({
      id: taskId,
      contextId,
      status: { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: new Date().toISOString() },
      artifacts: [{ artifactId: 'answer-1', name: 'answer', description: '', parts: [text('Hello')], extensions: [] }],
      history: [userMessage, answer],
    }));
    bus.finished();
  }

  async cancelTask() {}
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Echo());
const app = express();
app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
const server = app.listen(0, '127.0.0.1', () => {
  console.log(`http://127.0.0.1:${server.address().port}`);
});
