// An agent's sessions as the store keeps them: the sessions of each agent, a session's lineage
// of snapshots (its head, and the snapshots it continues), one snapshot's state, and the
// difference between two snapshots' states (a JSON Patch, with the values before and after).

import { h, replace, jsonView, badge, clock, shortId, errorBox } from './dom.js';
import { getJson, seg } from './api.js';

const STATUS_KIND = { completed: 'ok', pending: 'live', failed: 'bad', aborted: 'idle', expired: 'bad' };

/** The sessions view: `{nav, main, refresh(), show(agent, sessionId)}`. */
export function sessionsView(agents, { openChat }) {
  const nav = h('div', { class: 'nav-sessions' });
  const main = h('section', { class: 'view sessions' }, h('p', { class: 'muted', text: 'Pick a session.' }));
  let current = null;

  const refresh = async () => {
    const groups = await Promise.all(agents.map(async (agent) => {
      let body;
      try {
        const { sessions } = await getJson(`../agent/${seg(agent.name)}/sessions`);
        body = sessions.length
          ? sessions.map((id) => h('a', {
            class: `session-row${current?.agent === agent.name && current?.id === id ? ' on' : ''}`,
            href: `#/sessions/${seg(agent.name)}/${seg(id)}`,
            dataset: { agent: agent.name, session: id },
          }, shortId(id, 24)))
          : h('p', { class: 'muted', text: 'no sessions yet' });
      } catch (error) {
        body = errorBox(error);
      }
      return h('div', { class: 'nav-group' }, h('div', { class: 'nav-head' }, agent.name), body);
    }));
    replace(nav, h('div', { class: 'nav-head' }, h('span', { text: 'Sessions' }),
      h('button', { type: 'button', class: 'small', text: 'Refresh', onclick: refresh })),
    agents.length ? groups : h('p', { class: 'muted', text: 'This server serves no agents (Server::agent).' }));
  };

  const show = async (agent, id) => {
    current = { agent, id };
    nav.querySelectorAll('.session-row').forEach((row) => row.classList.toggle('on', row.dataset.agent === agent && row.dataset.session === id));
    replace(main, h('p', { class: 'muted', text: 'loading…' }));
    const base = `api/agents/${seg(agent)}/sessions/${seg(id)}`;
    let lineage;
    try {
      lineage = await getJson(`${base}/snapshots`);
    } catch (error) {
      replace(main, errorBox(error));
      return;
    }
    if (current?.agent !== agent || current?.id !== id) return;
    replace(main, sessionDetail(agent, id, base, lineage, openChat));
  };

  return { nav, main, refresh, show };
}

/** A session: its lineage (pick A and B to compare), a snapshot's state, a diff. */
function sessionDetail(agent, id, base, lineage, openChat) {
  const { snapshots } = lineage;
  const pane = h('div', { class: 'snapshot-pane' });
  let a = snapshots[Math.min(1, snapshots.length - 1)]?.id;
  let b = snapshots[0]?.id;
  const radio = (side, snapshot) => {
    const input = h('input', { type: 'radio', name: `side-${side}`, checked: (side === 'a' ? a : b) === snapshot.id, 'aria-label': `${side.toUpperCase()}: version ${snapshot.version}`, dataset: { side, snapshot: snapshot.id } });
    input.addEventListener('change', () => {
      if (side === 'a') a = snapshot.id;
      else b = snapshot.id;
    });
    return input;
  };
  const stateOf = async (snapshot) => {
    replace(pane, h('p', { class: 'muted', text: 'loading…' }));
    try {
      const { state } = await getJson(`${base}/snapshots/${seg(snapshot.id)}`);
      replace(pane, h('h3', {}, `State at version ${snapshot.version} `, shortId(snapshot.id, 12)), h('div', { class: 'state' }, jsonView(state)));
    } catch (error) {
      replace(pane, errorBox(error));
    }
  };
  const compare = async () => {
    replace(pane, h('p', { class: 'muted', text: 'comparing…' }));
    try {
      const [diff, before] = await Promise.all([
        getJson(`${base}/diff/${seg(a)}/${seg(b)}`),
        getJson(`${base}/snapshots/${seg(a)}`),
      ]);
      replace(pane, diffView(diff, before.state));
    } catch (error) {
      replace(pane, errorBox(error));
    }
  };
  const rows = snapshots.map((snapshot) => h('tr', { class: 'snapshot-row', dataset: { snapshot: snapshot.id, version: snapshot.version } },
    h('td', {}, radio('a', snapshot)),
    h('td', {}, radio('b', snapshot)),
    h('td', { class: 'num', text: String(snapshot.version) }),
    h('td', {}, h('button', { type: 'button', class: 'link', title: 'show its state', onclick: () => stateOf(snapshot) }, shortId(snapshot.id, 12))),
    h('td', {}, badge(snapshot.status, STATUS_KIND[snapshot.status] ?? '')),
    h('td', { text: clock(snapshot.createdAt) }),
    h('td', {}, snapshot.error ? h('span', { class: 'error-text', text: snapshot.error.message ?? JSON.stringify(snapshot.error) }) : null)));
  const detail = h('div', {},
    h('header', { class: 'view-head' },
      h('h2', {}, 'Session ', shortId(id, 24), ' ', badge(agent, 'kind')),
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'small', text: 'Open in chat', onclick: () => openChat(agent, id) }))),
    h('h3', { text: `Lineage: ${snapshots.length} snapshot${snapshots.length === 1 ? '' : 's'}, newest first` }),
    lineage.truncated ? h('p', { class: 'muted', text: 'older snapshots are left out' }) : null,
    h('div', { class: 'table-wrap' }, h('table', { class: 'lineage' },
      h('thead', {}, h('tr', {}, ['A', 'B', 'version', 'snapshot', 'status', 'created', 'error'].map((t) => h('th', { text: t })))),
      h('tbody', {}, rows))),
    h('div', { class: 'actions' },
      h('button', { type: 'button', class: 'primary compare', text: 'Compare A → B', disabled: snapshots.length < 1, onclick: compare })),
    pane);
  if (snapshots[0]) stateOf(snapshots[0]);
  return detail;
}

/** The value a JSON Pointer names in `doc`, or undefined. */
function at(doc, path) {
  let value = doc;
  for (const raw of path.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (value === null || typeof value !== 'object' || !(key in value)) return undefined;
    value = value[key];
  }
  return value;
}

/** A JSON Patch as a table: each operation, where, and the value before and after. */
function diffView(diff, before) {
  const { from, to, changes } = diff;
  const head = h('h3', {}, 'From version ', String(from.version), ' to version ', String(to.version),
    ` — ${changes.length} change${changes.length === 1 ? '' : 's'}`);
  if (changes.length === 0) return h('div', { class: 'diff' }, head, h('p', { class: 'muted', text: 'The two states are the same.' }));
  const cell = (value) => (value === undefined ? h('span', { class: 'muted', text: '—' }) : jsonView(value, { compact: true }));
  const rows = changes.map((change) => h('tr', { class: `change op-${change.op}`, dataset: { op: change.op, path: change.path } },
    h('td', {}, badge(change.op, { add: 'ok', remove: 'bad', replace: 'warn' }[change.op] ?? '')),
    h('td', {}, h('code', { text: change.path || '/' })),
    h('td', { class: 'before' }, change.op === 'add' ? cell(undefined) : cell(at(before, change.path))),
    h('td', { class: 'after' }, change.op === 'remove' ? cell(undefined) : cell(change.value))));
  return h('div', { class: 'diff' }, head, h('div', { class: 'table-wrap' }, h('table', { class: 'changes' },
    h('thead', {}, h('tr', {}, ['op', 'path', 'before', 'after'].map((t) => h('th', { text: t })))),
    h('tbody', {}, rows))));
}
