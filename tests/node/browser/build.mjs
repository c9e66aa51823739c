// Bundles one page of this folder (chat.jsx: React and the AI SDK's useChat; copilotkit.jsx:
// CopilotKit's React client) into one browser script.
// Usage: node build.mjs <page> <out.js>, where <page> is `chat`, `chat-ai7` (chat.jsx on the
// AI SDK 7 and its React bindings, from tests/node7) or `copilotkit`.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const [page, out] = process.argv.slice(2);
if (!['chat', 'chat-ai7', 'copilotkit'].includes(page) || !out) {
  console.error('usage: node build.mjs <chat|chat-ai7|copilotkit> <out.js>');
  process.exit(2);
}
// The AI SDK 7's packages, for `chat-ai7`: the same page, another SDK.
const node7 = (name) => fileURLToPath(new URL(`../../node7/node_modules/${name}`, import.meta.url));
const alias =
  page === 'chat-ai7'
    ? Object.fromEntries(['ai', '@ai-sdk/react', 'react', 'react-dom'].map((name) => [name, node7(name)]))
    : {};
await build({
  entryPoints: [fileURLToPath(new URL(`./${page.replace('-ai7', '')}.jsx`, import.meta.url))],
  alias,
  bundle: true,
  format: 'esm',
  jsx: 'automatic',
  target: 'es2022',
  define: { 'process.env.NODE_ENV': '"production"' },
  loader: { '.css': 'empty' },
  outfile: out,
  logLevel: 'error',
});
