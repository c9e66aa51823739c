// The system Chromium on PATH, for puppeteer-core (`apt-get install chromium`).

import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** The path of the Chromium on PATH; throws naming the package when there is none. */
export function chromium() {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
      const path = join(dir, name);
      if (existsSync(path)) return path;
    }
  }
  throw new Error('no chromium on PATH: apt-get install chromium');
}
