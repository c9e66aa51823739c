// The Dev UI (`/dev/`, served by bidi-devui's `DevUi`) in headless Chromium, driven by
// puppeteer-core: the checks of `tests/tests/dev_ui.rs`. Usage:
//
//   node dev_ui.mjs http://127.0.0.1:PORT SCREENSHOT_DIR
//
// The server serves the flow `greet` (init: greeting, style, optional ending; input: name,
// times, tagged, tags, optional sender; a chunk per greeting, then a turn end; output: turns
// and greetings), the agent `assistant` on bidi_llm's DemoModel with `delete_file`, a local
// tool that needs approval, and the agent `echo` on it without tools (a message saying
// "slowly" makes it think for three seconds), on SQLite sessions, with traces installed. Every step saves a
// screenshot in SCREENSHOT_DIR. Assertions read the DOM; waits are for selectors, not times.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';
import { chromium } from './browser/chromium.mjs';
import { assert, check, run } from './harness.mjs';

const shots = process.argv[3] ?? 'dev-ui-screenshots';
// Every wait is for a selector; this only bounds one that never comes, generously for a loaded
// two-core machine.
const DEADLINE = 240_000;
mkdirSync(shots, { recursive: true });

run(async (base) => {
  const browser = await puppeteer.launch({
    executablePath: chromium(),
    headless: true,
    // Two tabs run at once: neither is throttled or frozen while the other is in front.
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--disable-background-timer-throttling', '--disable-renderer-backgrounding',
      '--disable-backgrounding-occluded-windows',
    ],
  });
  const errors = [];
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(DEADLINE);
    await page.setViewport({ width: 1280, height: 900 });
    page.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') errors.push(`console: ${message.text()}`);
    });
    let n = 0;
    const shot = async (name, on = page) => {
      n += 1;
      await on.screenshot({ path: join(shots, `${String(n).padStart(2, '0')}-${name}.png`) });
    };
    const waitText = (selector, text) => page.waitForFunction(
      (sel, want) => [...document.querySelectorAll(sel)].some((el) => el.textContent.includes(want)),
      {}, selector, text,
    );
    const texts = (selector) => page.$$eval(selector, (els) => els.map((el) => el.textContent));
    const fill = async (selector, value) => {
      await page.$eval(selector, (el) => { el.value = ''; });
      await page.type(selector, value);
    };
    const field = (panel, path, inner = 'input') => `.run ${panel} [data-path="${path}"] ${inner}`;

    await check('the page lists every action, and each action its four schemas', async () => {
      await page.goto(`${base}/dev/`);
      await page.waitForSelector('body[data-ready="true"]');
      const keys = await page.$$eval('.nav-item[data-key]', (els) => els.map((el) => el.dataset.key));
      assert(keys.includes('/bidi-flow/greet') && keys.includes('/agent/assistant'), `actions listed: ${keys}`);
      assert(await page.$('meta[name="viewport"][content*="width=device-width"]'), 'a viewport meta for small screens');
      await page.click('.nav-item[data-key="/bidi-flow/greet"]');
      await page.waitForSelector('.run[data-key="/bidi-flow/greet"]');
      await page.click('.run details.schemas summary');
      for (const [tab, want] of [['input', '"times"'], ['stream', '"string"'], ['output', '"greetings"'], ['init', '"greeting"']]) {
        await page.click(`.run details.schemas button[data-schema="${tab}"]`);
        await waitText('.run .schema-body', want);
      }
      await shot('schemas');
      await page.click('.run details.schemas summary');
      // The forms made from the schemas: an enum, an optional string, an integer, a boolean,
      // an array, an optional nested object.
      assert(await page.$(field('.init-panel', '/style', 'select')), 'the init style is a select');
      assert(await page.$('.run .init-panel .prop[data-key="ending"] input.include'), 'the ending is optional');
      assert(await page.$(field('.input-panel', '/times', 'input[type="number"][step="1"]')), 'times is an integer field');
      assert(await page.$('.run .input-panel [data-path="/tags"] .add-item'), 'tags is a list');
      assert(await page.$('.run .input-panel .prop[data-key="sender"] input.include'), 'the sender is optional');
      await shot('actions-and-schemas');
    });

    await check('the flow runs turn by turn from its generated forms over the WebSocket', async () => {
      await fill(field('.init-panel', '/greeting'), 'Hello');
      await page.select(field('.init-panel', '/style', 'select'), '0');
      await page.click('.run .init-panel .prop[data-key="ending"] input.include');
      await fill(field('.init-panel', '/ending'), '?');
      await page.click('.run .init-panel button.connect');
      await page.waitForSelector('.run .badge[data-state="open"]');

      await fill(field('.input-panel', '/name'), 'Ada');
      await fill(field('.input-panel', '/times'), '2');
      assert(!(await page.$('.run .input-panel .prop[data-key="tagged"] input.include')), 'an optional boolean is one checkbox');
      await page.click(field('.input-panel', '/tagged', 'input[type="checkbox"]'));
      await page.click('.run .input-panel [data-path="/tags"] .add-item');
      await fill(field('.input-panel', '/tags/0'), 'math');
      await page.click('.run .input-panel .prop[data-key="sender"] input.include');
      await fill(field('.input-panel', '/sender/name'), 'Bob');
      await page.click('.run .input-panel button.send');
      await page.waitForSelector('.run .turn.ended[data-turn="1"]');
      const chunks = await texts('.run .turn[data-turn="1"] .chunk');
      assert(
        JSON.stringify(chunks) === JSON.stringify(['Hello Ada (math), from Bob? #1', 'Hello Ada (math), from Bob? #2']),
        `turn 1 streamed ${JSON.stringify(chunks)}`,
      );
      // A refused input: the server's error, where it is wrong, and the connection goes on.
      await page.click('.run .input-panel .seg-group button:nth-child(2)');
      await fill('.run .input-panel textarea.raw', '{"name": 7, "times": 1}');
      await page.click('.run .input-panel button.send');
      await waitText('.run .transcript .refused', 'invalid_input');
      await waitText('.run .transcript .refused', '/name');
      assert(await page.$('.run .badge[data-state="open"]'), 'the connection is still open after a refused input');
      await page.click('.run .input-panel .seg-group button:nth-child(1)');
      await shot('flow-turn-1');
    });

    await check("the connection's trace shows while it runs, its turns appearing live", async () => {
      // A second tab watches the traces while the first runs the flow.
      const watcher = await browser.newPage();
      watcher.setDefaultTimeout(DEADLINE);
      await watcher.setViewport({ width: 1280, height: 900 });
      watcher.on('pageerror', (error) => errors.push(`page error (traces tab): ${error.message}`));
      await watcher.goto(`${base}/dev/#/traces`);
      await watcher.waitForSelector('.trace-row[data-name="greet"][data-running="true"]');
      await watcher.click('.trace-row[data-name="greet"][data-running="true"]');
      await watcher.waitForSelector('.span-row.running[data-span-name="greet"]');
      await watcher.waitForSelector('.span-row[data-span-name="turn 1"][data-running="false"]');
      assert(!(await watcher.$('.span-row[data-span-name="turn 2"]')), 'no second turn yet');
      await shot('trace-while-running', watcher);

      // A second turn: its span appears in the watching tab as it comes, without a reload.
      await page.bringToFront();
      await fill(field('.input-panel', '/name'), 'Grace');
      await fill(field('.input-panel', '/times'), '1');
      await page.click('.run .input-panel button.send');
      await page.waitForSelector('.run .turn.ended[data-turn="2"]');
      await watcher.bringToFront();
      await watcher.waitForSelector('.waterfall .span-row[data-span-name="turn 2"][data-running="false"]');
      assert(await watcher.$('.span-row.running[data-span-name="greet"]'), 'the connection still runs');
      await shot('trace-second-turn', watcher);

      // The input closed, the output comes, and the trace ends with it.
      await page.bringToFront();
      await page.click('.run .input-panel button.close-input');
      await page.waitForSelector('.run .output');
      const output = await page.$eval('.run .output', (el) => el.textContent);
      assert(/"turns":\s*2/.test(output) && /"greetings":\s*3/.test(output), `the output: ${output}`);
      await shot('flow-output');
      await watcher.bringToFront();
      await watcher.waitForSelector('.span-row[data-span-name="greet"][data-running="false"]');
      await watcher.click('.span-row[data-span-name="greet"]');
      await watcher.waitForFunction(() => document.querySelector('.span-detail table.attrs')?.textContent.includes('bidi.output'));
      await shot('trace-ended', watcher);
      await watcher.close();
      await page.bringToFront();
    });

    const say = async (text) => {
      // The last answer is over: the composer takes a message again.
      await page.waitForSelector('.chat .busy[hidden]');
      await fill('.chat textarea.composer', text);
      await page.click('.chat button.send');
    };
    let sessionId;

    await check('a chat calls a tool that needs approval; approved, it runs', async () => {
      await page.click('.tab[data-section="chats"]');
      await page.waitForSelector('.chat[data-agent="assistant"]');
      await page.click('.chat .page-tools input[data-tool="pick_color"]');
      await say('delete_file {"path": "notes.txt"}');
      await page.waitForSelector('.tool-call[data-tool="delete_file"] button.approve');
      sessionId = await page.$eval('.chat .session-id', (el) => el.dataset.session);
      assert(sessionId, 'the new session has an id');
      const args = await page.$eval('.tool-call[data-tool="delete_file"] .call-args', (el) => el.textContent);
      assert(args.includes('notes.txt'), `the call's arguments: ${args}`);
      await shot('chat-approval');
      await page.click('.tool-call[data-tool="delete_file"] button.approve');
      await waitText('.bubble.assistant .md', 'Done: deleted notes.txt');
      await page.waitForSelector('.tool-call[data-tool="delete_file"][data-status="done"]');
    });

    await check("the approved call's turn is a tree in the trace view, with its tokens", async () => {
      const viewer = await browser.newPage();
      viewer.setDefaultTimeout(DEADLINE);
      await viewer.setViewport({ width: 1280, height: 900 });
      viewer.on('pageerror', (error) => errors.push(`page error (trace tree tab): ${error.message}`));
      await viewer.goto(`${base}/dev/#/traces`);
      // The newest execution of the assistant: the one that ran the approved call.
      await viewer.waitForSelector('.trace-row[data-name="assistant"][data-running="false"]');
      await viewer.click('.trace-row[data-name="assistant"][data-running="false"]');
      await viewer.waitForSelector('.span-row[data-span-name="execute_tool delete_file"]');
      const rows = await viewer.$$eval('.waterfall .span-row', (els) => els.map((el) => ({
        name: el.dataset.spanName,
        depth: parseFloat(el.querySelector('.span-name').style.paddingLeft || '0'),
        tokens: el.querySelector('.span-tokens').textContent,
      })));
      const row = (name) => rows.find((r) => r.name === name);
      const agent = row('invoke_agent assistant');
      const tool = row('execute_tool delete_file');
      const chats = rows.filter((r) => r.name === 'chat demo');
      assert(agent && tool && chats.length, `the rows: ${JSON.stringify(rows)}`);
      // invoke_agent over the model's calls and the tool's, in the connection's turn.
      const under = (r) => r.depth > agent.depth;
      assert(under(tool) && chats.every(under) && agent.depth > row('turn 1').depth, `the tree: ${JSON.stringify(rows)}`);
      // Each model call's tokens (the demo model counts words), added up on the turn and the
      // trace.
      const counts = (text) => (text.match(/^(\d+) in · (\d+) out$/) ?? []).slice(1).map(Number);
      const [input, output] = chats.map((c) => counts(c.tokens)).reduce(([i, o], [ci, co]) => [i + ci, o + co], [0, 0]);
      assert(input > 0 && output > 0, `the model calls' tokens: ${chats.map((c) => c.tokens)}`);
      assert(agent.tokens === `${input} in · ${output} out`, `the turn's tokens: ${agent.tokens}`);
      const total = await viewer.$eval('.view-head .trace-tokens', (el) => el.textContent);
      assert(total === agent.tokens, `the trace's tokens: ${total}, the turn's: ${agent.tokens}`);
      await viewer.click('.span-row[data-span-name="execute_tool delete_file"]');
      await viewer.waitForFunction(() => document.querySelector('.span-detail table.attrs')?.textContent.includes('gen_ai.tool.call.id'));
      await shot('trace-tree', viewer);
      await viewer.close();
      await page.bringToFront();
    });

    await check("the page's own tool is answered with buttons", async () => {
      await say('pick_color for the banner');
      await page.waitForSelector('.tool-call[data-tool="pick_color"] .color-choice[data-color="green"]');
      await shot('chat-client-tool');
      await page.click('.tool-call[data-tool="pick_color"] .color-choice[data-color="green"]');
      await waitText('.bubble.assistant .md', 'Done: green');
    });

    await check('a denied call does not run, and the model reads why', async () => {
      await say('delete_file {"path": "thesis.tex"}');
      await page.waitForSelector('.tool-call[data-tool="delete_file"][data-status="needs approval"] button.deny');
      await page.type('.tool-call[data-status="needs approval"] input.reason', 'keep it');
      await page.click('.tool-call[data-status="needs approval"] button.deny');
      await waitText('.bubble.assistant .md', 'Done: the user denied this call: keep it');
      await page.waitForSelector('.tool-call[data-tool="delete_file"][data-status="denied"]');
      await page.waitForSelector('.chat .busy[hidden]');
      await shot('chat-three-turns');
    });

    await check('a reload finds the conversation', async () => {
      await page.reload();
      await page.waitForSelector('.chat .messages[data-restored]');
      const restored = await page.$eval('.chat .session-id', (el) => el.dataset.session);
      assert(restored === sessionId, `the session after the reload: ${restored}, before: ${sessionId}`);
      const users = await texts('.chat .bubble.user');
      assert(users.length === 3 && users[1] === 'pick_color for the banner', `the user's messages: ${JSON.stringify(users)}`);
      const answers = (await texts('.chat .bubble.assistant .md')).join('\n');
      for (const want of ['Done: deleted notes.txt', 'Done: green', 'Done: the user denied this call: keep it']) {
        assert(answers.includes(want), `no "${want}" in ${answers}`);
      }
      const statuses = await page.$$eval('.chat .tool-call', (els) => els.map((el) => `${el.dataset.tool}:${el.dataset.status}`));
      assert(
        JSON.stringify(statuses) === JSON.stringify(['delete_file:done', 'pick_color:done', 'delete_file:denied']),
        `the calls after the reload: ${statuses}`,
      );
      await shot('chat-reloaded');
    });

    await check("the session's snapshots and lineage are browsed", async () => {
      await page.click('.tab[data-section="sessions"]');
      await page.waitForSelector(`.session-row[data-session="${sessionId}"]`);
      await page.click(`.session-row[data-session="${sessionId}"]`);
      await page.waitForSelector('table.lineage tr.snapshot-row');
      const versions = await page.$$eval('table.lineage tr.snapshot-row', (rows) => rows.map((row) => Number(row.dataset.version)));
      // Created, then a snapshot per execution: three messages, three answers to calls.
      assert(versions.length >= 6 && versions[0] === Math.max(...versions) && versions.at(-1) === 1, `versions: ${versions}`);
      await waitText('.snapshot-pane .state', '"messages"');
      await shot('sessions-lineage');
    });

    await check("two snapshots' states are compared", async () => {
      await page.click('table.lineage tr.snapshot-row:nth-child(3) input[data-side="a"]');
      await page.click('button.compare');
      await page.waitForSelector('.diff tr.change');
      const ops = await page.$$eval('.diff tr.change', (rows) => rows.map((row) => `${row.dataset.op} ${row.dataset.path}`));
      assert(ops.some((op) => op.startsWith('add /messages/')), `the changes: ${ops}`);
      await waitText('.diff td.after', 'denied');
      await shot('sessions-diff');
    });

    await check('on a small screen the list hides behind the menu', async () => {
      await page.setViewport({ width: 390, height: 844 });
      await page.click('.tab[data-section="chats"]');
      await page.waitForSelector('.chat .messages[data-restored]');
      // The list slides away (a transition): wait for it to be off screen.
      await page.waitForFunction(() => document.getElementById('nav').getBoundingClientRect().right <= 0);
      await shot('small-screen-chat');
      await page.click('#menu');
      await page.waitForFunction(() => document.getElementById('nav').getBoundingClientRect().left >= 0);
      await shot('small-screen-menu');
      await page.setViewport({ width: 1280, height: 900 });
    });

    await check('a reload mid-answer keeps the answer: the reloaded page shows it to its end', async () => {
      await page.goto(`${base}/dev/#/chats/echo`);
      await page.waitForSelector('.chat[data-agent="echo"]');
      // No page tools: echo answers in words.
      if (await page.$eval('.chat .page-tools input[data-tool="pick_color"]', (el) => el.checked)) {
        await page.click('.chat .page-tools input[data-tool="pick_color"]');
      }
      await say('tell me slowly');
      // The model thinks for three seconds: the page reloads while it does.
      await page.waitForSelector('.chat .busy:not([hidden])');
      // The chat is the session once its answer started.
      await page.waitForSelector('.chat .session-id[data-session]:not([data-session=""])');
      const echoSession = await page.$eval('.chat .session-id', (el) => el.dataset.session);
      await shot('chat-thinking');
      await page.reload();
      await page.waitForSelector('.chat[data-agent="echo"] .messages[data-restored]');
      await page.waitForSelector('.chat .busy[hidden]');
      await shot('chat-reloaded-mid-answer');
      const restored = await page.$eval('.chat .session-id', (el) => el.dataset.session);
      assert(echoSession && restored === echoSession, `the session after the reload: ${restored}, before: ${echoSession}`);
      const bubbles = await page.$$eval('.chat .messages > .bubble', (els) => els.map((el) => `${el.classList.contains('user') ? 'user' : 'assistant'}: ${el.textContent}`));
      assert(
        bubbles.length === 2 && bubbles[0] === 'user: tell me slowly' && bubbles[1] === 'assistant: You said: tell me slowly',
        `the conversation after the reload: ${JSON.stringify(bubbles)}`,
      );
      const stored = await page.evaluate(async (id) => {
        const lineage = await (await fetch(`api/agents/echo/sessions/${encodeURIComponent(id)}/snapshots`)).json();
        const session = await (await fetch(`../agent/echo/session/${encodeURIComponent(id)}`)).json();
        return { head: lineage.snapshots[0].status, last: session.messages.at(-1)?.role };
      }, restored);
      assert(stored.head === 'completed' && stored.last === 'assistant', `the stored turn: ${JSON.stringify(stored)}`);
    });

    await check("the agent's init form speaks to people, in the wire's field names", async () => {
      await page.goto(`${base}/dev/#/actions/agent/assistant`);
      await page.waitForSelector('.run[data-key="/agent/assistant"] .init-panel');
      const form = await page.$eval('.run[data-key="/agent/assistant"] .init-panel', (el) => el.textContent);
      assert(form.includes('sessionId'), `no sessionId in the init form: ${form}`);
      for (const rust of ['[`', '`', '::', 'session_id', '](']) {
        assert(!form.includes(rust), `the init form shows ${rust}: ${form}`);
      }
      await shot('agent-init-form');
    });

    await check('markdown renders markup as text and keeps only safe links', async () => {
      const out = await page.evaluate(async () => {
        const { markdown } = await import('./markdown.js');
        const box = document.createElement('div');
        box.append(markdown([
          '# Title',
          '<script>window.ran = 1</script> <img src=x onerror="window.ran = 2"> **bold** and `code`',
          '',
          '- [safe](https://example.com/a) [bad](javascript:alert(1)) [rel](docs/x)',
          '- two',
          '',
          '```js',
          '<b>kept as text</b>',
          '```',
        ].join('\n')));
        return {
          scripts: box.querySelectorAll('script, img, b').length,
          text: box.textContent,
          strong: box.querySelector('strong')?.textContent,
          links: [...box.querySelectorAll('a')].map((a) => a.getAttribute('href')),
          items: box.querySelectorAll('li').length,
          code: box.querySelector('pre code')?.textContent,
          ran: window.ran ?? null,
        };
      });
      assert(out.scripts === 0 && out.ran === null, `markup became elements: ${JSON.stringify(out)}`);
      assert(out.text.includes('<script>window.ran = 1</script>'), 'the markup shows as text');
      assert(out.strong === 'bold' && out.items === 2 && out.code === '<b>kept as text</b>', JSON.stringify(out));
      assert(JSON.stringify(out.links) === JSON.stringify(['https://example.com/a', 'docs/x']), `links: ${out.links}`);
    });

    await check('forms from schemas round-trip refs, variants, maps, tuples and nullable fields', async () => {
      const out = await page.evaluate(async () => {
        const { schemaForm } = await import('./form.js');
        const schema = {
          $defs: {
            Shape: {
              oneOf: [
                { type: 'object', properties: { kind: { const: 'circle' }, r: { type: 'number' } }, required: ['kind', 'r'] },
                { type: 'object', properties: { kind: { const: 'square' }, side: { type: 'integer' } }, required: ['kind', 'side'] },
              ],
            },
            Color: { type: 'string', enum: ['red', 'green'] },
          },
          type: 'object',
          properties: {
            shape: { $ref: '#/$defs/Shape' },
            color: { $ref: '#/$defs/Color' },
            note: { type: ['string', 'null'] },
            labels: { type: 'object', additionalProperties: { type: 'integer' } },
            pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'boolean' }] },
            nested: { anyOf: [{ $ref: '#/$defs/Shape' }, { type: 'null' }] },
          },
          required: ['shape', 'color', 'note', 'labels', 'pair'],
        };
        const value = {
          shape: { kind: 'square', side: 3 },
          color: 'green',
          note: null,
          labels: { a: 1, b: 2 },
          pair: ['x', true],
          nested: { kind: 'circle', r: 1.5 },
        };
        const form = schemaForm(schema, { name: 'probe', value });
        document.body.append(form.el);
        const back = form.value();
        const variant = form.el.querySelector('[data-path="/shape"] select.variant').selectedOptions[0].textContent;
        form.el.querySelector('[data-path="/shape/side"] input').value = '2.5';
        let error = null;
        try {
          form.value();
        } catch (e) {
          error = `${e.path}: ${e.message}`;
        }
        form.el.remove();
        return { back, variant, error };
      });
      assert(out.variant === 'kind: square', `the variant shown: ${out.variant}`);
      assert(JSON.stringify(out.back) === JSON.stringify({
        shape: { kind: 'square', side: 3 }, color: 'green', note: null, labels: { a: 1, b: 2 }, pair: ['x', true], nested: { kind: 'circle', r: 1.5 },
      }), `round trip: ${JSON.stringify(out.back)}`);
      assert(out.error === '/shape/side: not an integer', `a wrong integer: ${out.error}`);
    });

    await check('the page logged no errors', async () => {
      assert(errors.length === 0, errors.join(' | '));
    });
  } finally {
    await browser.close();
  }
});
