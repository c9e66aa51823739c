// Genkit JS's own HTTP flow server: a streaming flow `stream` served by `expressHandler` from
// @genkit-ai/express, the peer of bidi-http's `POST /bidi-flow/stream`.
//
//   node server.mjs <port> [--telemetry=off|default]
//
// Listens on 127.0.0.1:<port> (0: any free port) and prints its URL, `http://127.0.0.1:<port>`;
// the flow is `POST <url>/stream` with `{"data":{"n":N}}`: it streams N chunks `{"i":k}` (k from
// 0) and returns N. `startFlowServer` is not used because it listens on every interface; the
// app is what it builds, less CORS: express with a JSON body parser and the same handler.
//
// --telemetry=off (the default) calls disableGenkitOTelInitialization() first, as the in-process
// Genkit benchmarks do; --telemetry=default leaves Genkit as shipped (the first flow run starts
// an OpenTelemetry NodeSDK). Keep GENKIT_ENV unset: `dev` starts the reflection server.

import express from 'express';
import { genkit, z } from 'genkit';
import { disableGenkitOTelInitialization } from 'genkit/tracing';
import { expressHandler } from '@genkit-ai/express';

const [portArg, ...flags] = process.argv.slice(2);
const port = Number(portArg);
const telemetry = flags.find((f) => f.startsWith('--telemetry='))?.split('=')[1] ?? 'off';
if (portArg === undefined || !Number.isInteger(port) || port < 0 || port > 65535) {
  console.error('usage: node server.mjs <port> [--telemetry=off|default]');
  process.exit(2);
}
if (!['off', 'default'].includes(telemetry)) {
  console.error('--telemetry must be off or default');
  process.exit(2);
}
if (telemetry === 'off') disableGenkitOTelInitialization();
if (process.env.GENKIT_ENV === 'dev') {
  console.error('warning: GENKIT_ENV=dev starts the reflection server and exports spans');
}

const ai = genkit({});

const stream = ai.defineFlow(
  {
    name: 'stream',
    inputSchema: z.object({ n: z.number().int().min(0) }),
    streamSchema: z.object({ i: z.number().int() }),
    outputSchema: z.number().int(),
  },
  async ({ n }, { sendChunk }) => {
    for (let i = 0; i < n; i += 1) sendChunk({ i });
    return n;
  },
);

const app = express();
app.use(express.json());
app.post('/stream', expressHandler(stream));
const server = app.listen(port, '127.0.0.1', () => {
  console.log(`http://127.0.0.1:${server.address().port}`);
});
server.on('error', (error) => {
  console.error(`cannot listen on 127.0.0.1:${port}: ${error.message}`);
  process.exit(1);
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
