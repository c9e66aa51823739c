// The baseline for server.mjs: the same wire from plain `node:http`, no Genkit, no express.
//
//   node raw.mjs <port>
//
// Listens on 127.0.0.1:<port> (0: any free port), prints `http://127.0.0.1:<port>`, and answers
// `POST /stream` with `{"data":{"n":N}}` exactly as Genkit's express handler does when asked for
// a stream: `data: {"message":{"i":k}}\n\n` for k in 0..N, then `data: {"result":N}\n\n`, each
// record its own write. It shows what load.mjs and Node's HTTP stack can do on this machine.

import http from 'node:http';

const port = Number(process.argv[2]);
if (process.argv[2] === undefined || !Number.isInteger(port) || port < 0 || port > 65535) {
  console.error('usage: node raw.mjs <port>');
  process.exit(2);
}

const server = http.createServer((request, response) => {
  if (request.method !== 'POST' || request.url !== '/stream') {
    response.writeHead(404).end();
    return;
  }
  const parts = [];
  request.on('data', (part) => parts.push(part));
  request.on('end', () => {
    let n;
    try {
      n = JSON.parse(Buffer.concat(parts).toString('utf8')).data.n;
    } catch {
      n = undefined;
    }
    if (!Number.isInteger(n) || n < 0) {
      response.writeHead(400, { 'Content-Type': 'application/json' });
      response.end(JSON.stringify({ error: { status: 'INVALID_ARGUMENT', message: 'n' } }));
      return;
    }
    response.writeHead(200, { 'Content-Type': 'text/plain', 'Transfer-Encoding': 'chunked' });
    for (let i = 0; i < n; i += 1) {
      response.write(`data: ${JSON.stringify({ message: { i } })}\n\n`);
    }
    response.end(`data: ${JSON.stringify({ result: n })}\n\n`);
  });
});
server.listen(port, '127.0.0.1', () => console.log(`http://127.0.0.1:${server.address().port}`));
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
