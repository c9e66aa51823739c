// Loads a page in headless Chromium (puppeteer-core) and waits for a condition, not a time:
// prints the page's DOM once an element matches SELECTOR, or saves a screenshot there.
//
//   node load.mjs URL SELECTOR [SCREENSHOT.png]
//
// The wait's deadline (DEADLINE_MS, default 240,000) is generous for a loaded two-core
// machine: it only bounds a page that never gets there. Exits 1 (with what the page showed,
// and its errors, on stderr) when it does not.

import puppeteer from 'puppeteer-core';
import { chromium } from './chromium.mjs';

const [url, selector, screenshot] = process.argv.slice(2);
if (!url || !selector) {
  console.error('usage: node load.mjs URL SELECTOR [SCREENSHOT.png]');
  process.exit(2);
}
const deadline = Number(process.env.DEADLINE_MS ?? 240_000);

const browser = await puppeteer.launch({
  executablePath: chromium(),
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--hide-scrollbars'],
});
const errors = [];
let status = 0;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 900, height: 600 });
  page.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(`console: ${message.text()}`);
  });
  await page.goto(url, { timeout: deadline });
  try {
    await page.waitForSelector(selector, { timeout: deadline });
  } catch (error) {
    status = 1;
    console.error(`${selector} never appeared (${error.message}); the page:`);
    console.error(await page.content());
  }
  if (status === 0) {
    if (screenshot) {
      await page.screenshot({ path: screenshot });
    } else {
      process.stdout.write(await page.content());
    }
  }
} finally {
  for (const error of errors) console.error(error);
  await browser.close();
}
process.exit(status);
