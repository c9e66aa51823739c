// A real WebSocket client (`ws` 8) against a bidi HTTP server's full-duplex wire: one socket is
// one connection. Usage: node ws_client.mjs <baseUrl>
//
// Client frames: {"type":"init","init":…} first, then {"type":"send","input":…},
// {"type":"close"}, {"type":"cancel","reason":…}. Server frames: {"type":"chunk","chunk":…},
// {"type":"turn_end"}, {"type":"output","output":…} (the last, then a normal close), and
// {"type":"error","code","message","path"?} (a refused frame; the socket goes on, except with
// code `connection_failed`, the last frame).
//
// Flows the server must serve: /bidi-flow/echo (init: a prefix string; input: a line; one chunk
// per word, then a turn end; output: the number of inputs).

import WebSocket from 'ws';
import { assert, assertJson, check, run } from './harness.mjs';

/** One WebSocket with a queue of the frames it received. */
class Socket {
  static async open(url) {
    const socket = new Socket(url);
    await socket.opened;
    return socket;
  }

  constructor(url) {
    this.frames = [];
    this.waiters = [];
    this.closeInfo = null;
    this.ws = new WebSocket(url);
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', resolve);
      this.ws.once('unexpected-response', (_, response) =>
        reject(new Error(`upgrade refused: HTTP ${response.statusCode}`)),
      );
      this.ws.once('error', reject);
    });
    this.opened.catch(() => {});
    this.ws.on('message', (data, isBinary) => {
      let frame;
      try {
        assert(!isBinary, 'a binary frame');
        frame = JSON.parse(data.toString('utf8'));
      } catch (error) {
        frame = { type: 'not-json', text: data.toString('utf8'), error: error.message };
      }
      this.push(frame);
    });
    this.ws.on('close', (code, reason) => {
      this.closeInfo = { code, reason: reason.toString('utf8') };
      this.push({ type: 'closed', ...this.closeInfo });
    });
    this.ws.on('error', () => {});
  }

  push(frame) {
    const waiter = this.waiters.shift();
    if (waiter) waiter(frame);
    else this.frames.push(frame);
  }

  /** The next frame; `{type:"closed",code,reason}` once the socket closed. */
  next() {
    if (this.frames.length > 0) return Promise.resolve(this.frames.shift());
    if (this.closeInfo) return Promise.resolve({ type: 'closed', ...this.closeInfo });
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  send(frame) {
    this.ws.send(JSON.stringify(frame));
  }

  sendText(text) {
    this.ws.send(text);
  }

  /** The chunks of one turn, read up to and including its `turn_end`. */
  async turn() {
    const chunks = [];
    for (;;) {
      const frame = await this.next();
      if (frame.type === 'turn_end') return chunks;
      assert(frame.type === 'chunk', () => `expected a chunk or turn_end, got ${JSON.stringify(frame)}`);
      chunks.push(frame.chunk);
    }
  }

  /** Reads the `output` frame, then the normal close; returns the output. */
  async output() {
    const frame = await this.next();
    assert(frame.type === 'output', () => `expected the output, got ${JSON.stringify(frame)}`);
    await this.closed(1000);
    return frame.output;
  }

  /** Reads an `error` frame with `code`; returns it. */
  async error(code) {
    const frame = await this.next();
    assert(
      frame.type === 'error' && frame.code === code,
      () => `expected an error ${code}, got ${JSON.stringify(frame)}`,
    );
    assert(typeof frame.message === 'string' && frame.message.length > 0, 'an error without message');
    return frame;
  }

  /** Reads the close, which must come next and carry `code`. */
  async closed(code) {
    const frame = await this.next();
    assert(frame.type === 'closed', () => `expected the close, got ${JSON.stringify(frame)}`);
    assert(frame.code === code, () => `expected close code ${code}, got ${frame.code}`);
  }
}

await run(async (base) => {
  const wsBase = base.replace(/^http/, 'ws');
  const echo = `${wsBase}/bidi-flow/echo`;

  await check('full duplex on /bidi-flow/echo: a turn per send, then the output', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.send({ type: 'send', input: 'one two' });
    assertJson(await s.turn(), ['> one', '> two'], 'first turn');
    s.send({ type: 'send', input: 'three' });
    assertJson(await s.turn(), ['> three'], 'second turn');
    s.send({ type: 'close' });
    assertJson(await s.output(), 2, 'output');
  });

  await check('frames sent back to back before reading are all answered in order', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '# ' });
    const lines = ['a b', 'c', 'd e f', 'g h'];
    for (const input of lines) s.send({ type: 'send', input });
    s.send({ type: 'close' });
    for (const line of lines) {
      assertJson(await s.turn(), line.split(' ').map((w) => `# ${w}`), `turn of "${line}"`);
    }
    assertJson(await s.output(), lines.length, 'output');
  });

  await check('a connection with no input outputs 0', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.send({ type: 'close' });
    assertJson(await s.output(), 0, 'output');
  });

  await check('a malformed frame gets a malformed_frame error and the socket goes on', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.sendText('{"type":"send", this is not JSON');
    await s.error('malformed_frame');
    s.send({ type: 'send', input: 'still here' });
    assertJson(await s.turn(), ['> still', '> here'], 'turn after the error');
    s.send({ type: 'close' });
    assertJson(await s.output(), 1, 'output');
  });

  await check('an unknown frame type gets an unknown_frame_type error and the socket goes on', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.send({ type: 'send', input: 'before' });
    assertJson(await s.turn(), ['> before'], 'turn before the error');
    s.send({ type: 'shout', input: 'x' });
    await s.error('unknown_frame_type');
    s.send({ type: 'send', input: 'after' });
    assertJson(await s.turn(), ['> after'], 'turn after the error');
    s.send({ type: 'close' });
    assertJson(await s.output(), 2, 'output');
  });

  await check('an input of the wrong type gets invalid_input at the root and the socket goes on', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.send({ type: 'send', input: { not: 'a string' } });
    const error = await s.error('invalid_input');
    assertJson(error.path, '', 'path');
    s.send({ type: 'send', input: 'fine' });
    assertJson(await s.turn(), ['> fine'], 'turn after the error');
    s.send({ type: 'close' });
    assertJson(await s.output(), 1, 'output');
  });

  await check('an init of the wrong type gets invalid_init', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: 5 });
    const error = await s.error('invalid_init');
    assertJson(error.path, '', 'path');
    s.ws.close();
  });

  await check('cancel ends the connection with cancelled (not a failure) naming the reason', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.send({ type: 'send', input: 'one' });
    assertJson(await s.turn(), ['> one'], 'turn');
    s.send({ type: 'cancel', reason: 'enough of this' });
    const error = await s.error('cancelled');
    assert(error.message.includes('enough of this'), () => `no reason in: ${error.message}`);
    const after = await s.next();
    assert(after.type === 'closed', () => `expected the close, got ${JSON.stringify(after)}`);
  });

  await check('an unknown action is refused (HTTP 404 or a not_found error frame)', async () => {
    let s;
    try {
      s = await Socket.open(`${wsBase}/bidi-flow/no-such-flow`);
    } catch (error) {
      assert(/HTTP 404/.test(error.message), () => `refused otherwise: ${error.message}`);
      return;
    }
    s.send({ type: 'init', init: '> ' });
    await s.error('not_found');
    s.ws.close();
  });

  await check('a socket the client drops mid-turn leaves the server healthy', async () => {
    const s = await Socket.open(echo);
    s.send({ type: 'init', init: '> ' });
    s.send({ type: 'send', input: Array.from({ length: 5000 }, (_, i) => `w${i}`).join(' ') });
    const first = await s.next();
    assertJson(first, { type: 'chunk', chunk: '> w0' }, 'first frame');
    s.ws.terminate();
    const again = await Socket.open(echo);
    again.send({ type: 'init', init: '> ' });
    again.send({ type: 'send', input: 'alive' });
    assertJson(await again.turn(), ['> alive'], 'turn on a new socket');
    again.send({ type: 'close' });
    assertJson(await again.output(), 1, 'output on a new socket');
    const actions = await fetch(`${base}/actions`);
    assert(actions.status === 200, `GET /actions: ${actions.status}`);
  });
});
