// What the real-VS Code tests share: waiting, the logs code-server writes, the editor's DOM, and
// one scenario's browser, artifacts and verdict. The tests are started by run.sh, which sets
// ROOT (code-server's user data and workspace), ARTIFACTS and PORT.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

export const { ROOT, ARTIFACTS, PORT } = process.env;
export const EXTENSION_ID = 'lookahead-lsp.lookahead-lsp';

export async function until(what, check, timeoutMs, intervalMs = 100) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Files under the user-data logs folder whose name matches. */
export function logFiles(pattern) {
  const found = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (pattern.test(entry.name)) found.push(full);
    }
  };
  const logs = path.join(ROOT, 'user-data', 'logs');
  if (fs.existsSync(logs)) walk(logs);
  return found;
}

export function readAll(files) {
  return files.map((f) => fs.readFileSync(f, 'utf8')).join('\n');
}

/** The extension's output channel as written to disk (its own lines and the daemon's log). */
export function extensionLog() {
  return readAll(logFiles(/Lookahead\.log$/));
}

/** How often the extension host logged the extension's activation (once per window load). */
export function activations() {
  return readAll(logFiles(/exthost\.log$/)).split(`_doActivateExtension ${EXTENSION_ID}`).length - 1;
}

/** The last status object "Lookahead: Show Server Status" wrote to the extension's log. */
export function lastLoggedStatus() {
  const text = extensionLog();
  const at = text.lastIndexOf('lookahead/status at ');
  if (at < 0) return undefined;
  const start = text.indexOf('{', at);
  const end = text.indexOf('\n}', start); // the closing brace of the pretty-printed object
  if (start < 0 || end < 0) return undefined;
  try {
    return JSON.parse(text.slice(start, end + 2));
  } catch {
    return undefined;
  }
}

/** The ghost text as the editor renders it: the rest of the cursor's line, then any further
 * lines (rendered below it), with the non-breaking spaces of the DOM made plain again. */
export function renderedGhost(page) {
  return page.evaluate(() => {
    const plain = (s) => s.replace(/\u00a0/g, ' ');
    const first = [...document.querySelectorAll('.ghost-text-decoration')].map((e) => e.textContent).join('');
    const rest = [...document.querySelectorAll('div.ghost-text .view-line, div.ghost-text > div')]
      .filter((e) => !e.querySelector('.view-line'))
      .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)
      .map((e) => e.textContent);
    return plain([first, ...rest].join('\n'));
  });
}

// VS Code's default word definition (wordHelper.ts), which Python's language configuration
// keeps: a number with a decimal point, or a run of characters that are not separators.
const DEFAULT_WORD = /(-?\d*\.\d\w*)|([^`~!@#$%^&*()\-=+[{\]}\\|;:'",.<>/?\s]+)/;

/** What VS Code's Accept Next Word (editor.action.inlineSuggest.acceptNextWord) takes of the
 * ghost text: the first word when the text starts with one, else what stands before it, but
 * never more than the first run of whitespace and what precedes it. */
export function nextWord(ghost) {
  const word = ghost.match(DEFAULT_WORD);
  let end = word === null ? ghost.length : word.index === 0 ? word[0].length : word.index;
  const space = /\s+/.exec(ghost);
  if (space !== null && space.index + space[0].length < end) end = space.index + space[0].length;
  return ghost.slice(0, end);
}

export function statusBarTexts(page) {
  return page.evaluate(() => [...document.querySelectorAll('.statusbar-item')].map((e) => e.textContent.trim()));
}

/** Whether the extension's status bar item shows this codicon. */
export function statusBarIcon(page, codicon) {
  return page.evaluate((icon) => {
    const item = [...document.querySelectorAll('.statusbar-item')].find((e) => e.textContent.trim() === 'Lookahead');
    return Boolean(item?.querySelector(`.codicon-${icon}`));
  }, codicon);
}

/** Runs a command from the palette; returns once the palette has closed (the focus is back). */
export async function runCommand(page, title) {
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(title);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`);
  await page.keyboard.press('Enter');
  await page.waitForSelector('.quick-input-widget', { state: 'hidden' });
}

/** Waits for the status bar's check mark: the model loaded and the workspace indexed. Fails at
 * once when it shows the error mark (the daemon could not be started). */
export function daemonReady(page, what, timeoutMs) {
  return until(what, async () => {
    if (await statusBarIcon(page, 'error')) throw new Error('the extension could not start the daemon (see Lookahead.log)');
    return statusBarIcon(page, 'check');
  }, timeoutMs, 250);
}

/** Opens a workspace file with Quick Open and puts the cursor at line:column. */
export async function openAt(page, file, marker, line, column) {
  await page.keyboard.press('Control+P');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(path.basename(file));
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${path.basename(file)}"]`);
  await page.keyboard.press('Enter');
  await page.waitForSelector(`.editor-instance .view-lines:has-text("${marker}")`, { timeout: 30_000 });
  await page.keyboard.press('Control+G');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(`${line}:${column}`);
  await page.keyboard.press('Enter');
}

/** Types at the cursor and waits for the daemon's ghost text to settle; returns it (and puts
 * the time from the last key to the settled ghost text in result.ghostMs). */
export async function typeForGhost(page, run, typed, cursorAt) {
  await page.waitForTimeout(500); // a freshly opened editor may not ask for inline completions yet
  await page.keyboard.type(typed, { delay: 60 });
  const typedAt = run.elapsed();
  // VS Code sometimes does not ask the provider for an edit made right after the editor opened
  // (seen 1 run in 5 under load: no request in the extension's debug log at all). That is the
  // editor's race, not ours: retype the last character once. A request that was made and came
  // back empty is not retried.
  const asked = () => extensionLog().includes(`inline completion at ${cursorAt}: asking`);
  if (!(await until('a request', asked, 5_000).catch(() => false))) {
    run.result.retyped = true;
    run.step('no inline completion request from VS Code: retyping the last character');
    await page.keyboard.press('Backspace');
    await page.keyboard.type(typed.slice(-1));
  }
  // Wait for ghost text and for the requests to settle (the status bar stops "completing").
  const ghost = await until('ghost text', async () => {
    const text = await renderedGhost(page);
    const busy = (await statusBarTexts(page)).some((t) => t.includes('completing'));
    return text.trim() && !busy ? text : undefined;
  }, 60_000);
  await page.waitForTimeout(300);
  const settled = await renderedGhost(page);
  if (settled !== ghost) throw new Error(`the ghost text changed while settling: ${JSON.stringify(ghost)}`);
  run.result.ghostMs = run.elapsed() - typedAt;
  return settled;
}

/** Checks that the ghost text is the daemon's: its last computed completion ends with it (the
 * completion may have been computed a keystroke earlier and followed as the user typed). */
export async function checkGhostIsDaemons(page, ghost) {
  await runCommand(page, 'Lookahead: Show Server Status');
  const status = await until('the status in the extension log', () => lastLoggedStatus(), 15_000);
  if (!(status.completions.served >= 1 && typeof status.last?.text === 'string')) {
    throw new Error(`the daemon reports no completion: ${JSON.stringify(status.completions)}`);
  }
  if (!status.last.text.endsWith(ghost.trimEnd())) {
    throw new Error(`ghost text ${JSON.stringify(ghost)} is not the daemon's ${JSON.stringify(status.last.text)}`);
  }
  return status;
}

/** Runs one scenario in headless Chromium against code-server: `body(page, run)` drives it,
 * `run.step(name)` records a timed step. Writes result.json, screenshots and the logs to
 * ARTIFACTS; exits non-zero on failure. */
export async function scenario(body) {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const result = { steps: {}, blockedRequests: [], pageErrors: [] };
  const run = {
    result,
    elapsed,
    step(name) {
      result.steps[name] = elapsed();
      console.log(`e2e: ${(result.steps[name] / 1000).toFixed(1)} s ${name}`);
    },
  };
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  let failure;
  let page;
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 720 } });
    // Only loopback and inline URLs may load (the namespace has no other network anyway).
    await context.route('**/*', (route) => {
      const url = new URL(route.request().url());
      if (['127.0.0.1', 'localhost'].includes(url.hostname) || ['data:', 'blob:'].includes(url.protocol)) {
        return route.continue();
      }
      result.blockedRequests.push(url.href);
      return route.abort();
    });
    page = await context.newPage();
    page.on('pageerror', (e) => result.pageErrors.push(String(e).slice(0, 300)));
    await page.goto(`http://127.0.0.1:${PORT}/?folder=${encodeURIComponent(path.join(ROOT, 'workspace'))}`);
    await page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
    run.step('workbench loaded');
    await until('the extension to activate', () => activations() >= 1, 90_000);
    run.step('extension activated');
    await body(page, run);
  } catch (e) {
    failure = e;
    result.error = String(e.stack ?? e);
    if (page) {
      await page.screenshot({ path: path.join(ARTIFACTS, 'failure.png') }).catch(() => {});
      result.statusBarAtFailure = await statusBarTexts(page).catch(() => []);
      await runCommand(page, 'Lookahead: Show Server Status').catch(() => {});
      result.daemonStatusAtFailure = await until('the status', () => lastLoggedStatus(), 5_000).catch(() => undefined);
    }
  } finally {
    await browser.close();
    // A window reload starts new logs in a folder of their own: those copies get its name first.
    const copied = new Set();
    for (const file of logFiles(/(Lookahead|exthost)\.log$/).sort()) {
      const session = path.relative(path.join(ROOT, 'user-data', 'logs'), file).split(path.sep)[0];
      const name = copied.has(path.basename(file)) ? `${session}-${path.basename(file)}` : path.basename(file);
      copied.add(path.basename(file));
      fs.copyFileSync(file, path.join(ARTIFACTS, name));
    }
    if (result.blockedRequests.length > 0 && !failure) failure = new Error('the page asked for non-loopback URLs');
    result.ok = !failure;
    result.totalMs = elapsed();
    fs.writeFileSync(path.join(ARTIFACTS, 'result.json'), JSON.stringify(result, null, 2));
  }
  if (failure) {
    console.error(`e2e: FAILED: ${failure.message}`);
    process.exit(1);
  }
  console.log(`e2e: passed in ${(result.totalMs / 1000).toFixed(1)} s`);
}
