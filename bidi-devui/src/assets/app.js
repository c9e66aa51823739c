// The page: four sections (actions, chats, traces, sessions) under one header, routed by the
// URL's fragment (`#/actions/{key}`, `#/chats/{agent}`, `#/traces/{traceId}`,
// `#/sessions/{agent}/{sessionId}`). A view, once made, is kept while the page lives: a
// connection left open on an action's view, or a chat's answer, goes on while another section
// is shown.

import { h, replace, badge, errorBox } from './dom.js';
import { getJson, seg } from './api.js';
import { runView } from './run.js';
import { chatView } from './chat.js';
import { tracesView } from './traces.js';
import { sessionsView } from './sessions.js';

const SECTIONS = [
  ['actions', 'Actions'],
  ['chats', 'Chats'],
  ['traces', 'Traces'],
  ['sessions', 'Sessions'],
];

const nav = document.getElementById('nav');
const main = document.getElementById('main');
const tabs = document.getElementById('tabs');
const menu = document.getElementById('menu');

let actions = [];
let agents = [];
const runs = new Map();
const chats = new Map();
let traces = null;
let sessions = null;
// What each section showed last: its tab goes back there.
let lastAction;
let lastAgent;

/** Reads the fragment: the section and the rest of its path, decoded. */
function route() {
  const [section = 'actions', ...rest] = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean);
  return { section, rest: rest.map(decodeURIComponent) };
}

function link(href, label, on, extra = {}) {
  return h('a', { href, class: `nav-item${on ? ' on' : ''}`, ...extra }, label);
}

function showActions(wanted) {
  const key = wanted ?? lastAction;
  replace(nav, h('div', { class: 'nav-head', text: 'Actions' }),
    actions.length
      ? actions.map((action) => link(`#/actions/${seg(action.key)}`, [h('span', { text: action.name }), ' ', h('span', { class: 'muted small', text: action.type })], false, { dataset: { key: action.key } }))
      : h('p', { class: 'muted', text: 'The registry holds no action.' }));
  const action = actions.find((a) => a.key === key) ?? (wanted ? null : actions[0]);
  if (!action) return replace(main, key ? errorBox({ code: 'not_found', message: `no action ${key}` }) : h('p', { class: 'muted', text: 'Register flows to run them here.' }));
  lastAction = action.key;
  if (!runs.has(action.key)) runs.set(action.key, runView(action));
  nav.querySelector(`[data-key="${CSS.escape(action.key)}"]`)?.classList.add('on');
  replace(main, runs.get(action.key).el);
}

function showChats(wanted) {
  const name = wanted ?? lastAgent;
  replace(nav, h('div', { class: 'nav-head', text: 'Agents' }),
    agents.length
      ? agents.map((agent) => link(`#/chats/${seg(agent.name)}`, agent.name, false, { dataset: { agent: agent.name } }))
      : h('p', { class: 'muted', text: 'This server serves no agents: give them to Server::agent.' }));
  const agent = agents.find((a) => a.name === name) ?? (wanted ? null : agents[0]);
  if (!agent) return replace(main, wanted ? errorBox({ code: 'not_found', message: `no agent ${name}` }) : h('p', { class: 'muted', text: 'No agent to chat with.' }));
  lastAgent = agent.name;
  nav.querySelectorAll('[data-agent]').forEach((item) => item.classList.toggle('on', item.dataset.agent === agent.name));
  if (!chats.has(agent.name)) chats.set(agent.name, chatView(agent));
  replace(main, chats.get(agent.name).el);
}

async function showTraces(traceId) {
  if (!traces) {
    traces = tracesView();
    traces.start();
  }
  replace(nav, traces.nav);
  replace(main, traces.main);
  traces.show(traceId);
}

function openChat(agent, id) {
  localStorage.setItem(`bidi-dev/chat/${agent}`, id);
  chats.delete(agent);
  location.hash = `#/chats/${seg(agent)}`;
}

async function showSessions(agent, id) {
  if (!sessions) {
    sessions = sessionsView(agents, { openChat });
  }
  replace(nav, sessions.nav);
  replace(main, sessions.main);
  await sessions.refresh();
  if (agent && id) sessions.show(agent, id);
}

function render() {
  const { section, rest } = route();
  for (const tab of tabs.children) tab.classList.toggle('on', tab.dataset.section === section);
  document.body.dataset.section = section;
  document.body.classList.remove('menu-open');
  switch (section) {
    case 'chats':
      return showChats(rest[0]);
    case 'traces':
      return showTraces(rest[0]);
    case 'sessions':
      return showSessions(rest[0], rest[1]);
    default: {
      const key = rest.join('/');
      return showActions(key ? (key.startsWith('/') ? key : `/${key}`) : undefined);
    }
  }
}

async function boot() {
  replace(tabs, SECTIONS.map(([id, label]) => h('a', { href: `#/${id}`, class: 'tab', dataset: { section: id } }, label)));
  menu.addEventListener('click', () => document.body.classList.toggle('menu-open'));
  try {
    [actions, { agents }] = await Promise.all([getJson('../actions'), getJson('api/agents')]);
  } catch (error) {
    replace(main, errorBox(error));
    return;
  }
  actions.sort((a, b) => a.key.localeCompare(b.key));
  document.getElementById('counts').replaceChildren(badge(`${actions.length} actions`, 'idle'), ' ', badge(`${agents.length} agents`, 'idle'));
  window.addEventListener('hashchange', render);
  render();
  document.body.dataset.ready = 'true';
}

boot();
