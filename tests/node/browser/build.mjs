// Bundles chat.jsx (React, the AI SDK's useChat) into one browser script.
// Usage: node build.mjs <out.js>
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const out = process.argv[2];
if (!out) {
  console.error('usage: node build.mjs <out.js>');
  process.exit(2);
}
await build({
  entryPoints: [fileURLToPath(new URL('./chat.jsx', import.meta.url))],
  bundle: true,
  format: 'esm',
  jsx: 'automatic',
  target: 'es2022',
  define: { 'process.env.NODE_ENV': '"production"' },
  outfile: out,
  logLevel: 'error',
});
