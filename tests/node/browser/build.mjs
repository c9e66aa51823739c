// Bundles one page of this folder (chat.jsx: React and the AI SDK's useChat; copilotkit.jsx:
// CopilotKit's React client) into one browser script.
// Usage: node build.mjs <page> <out.js>, where <page> is `chat` or `copilotkit`.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const [page, out] = process.argv.slice(2);
if (!['chat', 'copilotkit'].includes(page) || !out) {
  console.error('usage: node build.mjs <chat|copilotkit> <out.js>');
  process.exit(2);
}
await build({
  entryPoints: [fileURLToPath(new URL(`./${page}.jsx`, import.meta.url))],
  bundle: true,
  format: 'esm',
  jsx: 'automatic',
  target: 'es2022',
  define: { 'process.env.NODE_ENV': '"production"' },
  loader: { '.css': 'empty' },
  outfile: out,
  logLevel: 'error',
});
