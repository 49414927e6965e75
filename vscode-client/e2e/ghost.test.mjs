// Drives a real VS Code (code-server, already listening on 127.0.0.1:$PORT) from headless
// Chromium: open a Python file of the sample project, type the start of a statement, wait for
// the daemon's ghost text, accept it with Tab, save, and check the file on disk. Also checks
// that the ghost text is the daemon's last completion (via "Lookahead: Show Server Status"),
// that the status bar reports the completion's figures, that nothing is requested once
// completions are toggled off, that "Rebuild Workspace Index" indexes the files again, and that
// a daemon that dies is started again.
// Started by run.sh; writes screenshots and result.json to $ARTIFACTS; exits non-zero on
// failure.
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const { ROOT, ARTIFACTS, PORT } = process.env;
const EXTENSION_ID = 'lookahead-lsp.lookahead-lsp';
const FILE = 'shop/orders.py';
const LINE = 18; // the empty body of remove_line(), indented by 8 spaces
const TYPED = 'if ';
const started = performance.now();
const elapsed = () => Math.round(performance.now() - started);
const result = { steps: {}, blockedRequests: [], pageErrors: [] };

function step(name) {
  result.steps[name] = elapsed();
  console.log(`e2e: ${(result.steps[name] / 1000).toFixed(1)} s ${name}`);
}

async function until(what, check, timeoutMs, intervalMs = 100) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Files under the user-data logs folder whose name matches. */
function logFiles(pattern) {
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

function readAll(files) {
  return files.map((f) => fs.readFileSync(f, 'utf8')).join('\n');
}

/** The extension's output channel as written to disk (its own lines and the daemon's log). */
function extensionLog() {
  return readAll(logFiles(/Lookahead\.log$/));
}

/** The last status object "Lookahead: Show Server Status" wrote to the extension's log. */
function lastLoggedStatus() {
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
function renderedGhost(page) {
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

function statusBarTexts(page) {
  return page.evaluate(() => [...document.querySelectorAll('.statusbar-item')].map((e) => e.textContent.trim()));
}

/** Runs a command from the palette; returns once the palette has closed (the focus is back). */
async function runCommand(page, title) {
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(title);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`);
  await page.keyboard.press('Enter');
  await page.waitForSelector('.quick-input-widget', { state: 'hidden' });
}

/** Waits for the status bar's check mark: the model loaded and the workspace indexed. Fails at
 * once when it shows the error mark (the daemon could not be started). */
function daemonReady(page, what, timeoutMs) {
  return until(what, async () => {
    const state = await page.evaluate(() => {
      const item = [...document.querySelectorAll('.statusbar-item')].find((e) => e.textContent.trim() === 'Lookahead');
      return item?.querySelector('.codicon-check') ? 'ready' : item?.querySelector('.codicon-error') ? 'failed' : '';
    });
    if (state === 'failed') throw new Error('the extension could not start the daemon (see Lookahead.log)');
    return state === 'ready';
  }, timeoutMs, 250);
}

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
  step('workbench loaded');

  await until('the extension to activate', () =>
    readAll(logFiles(/exthost\.log$/)).includes(`_doActivateExtension ${EXTENSION_ID}`), 90_000);
  step('extension activated');
  await daemonReady(page, 'the daemon to be ready', 120_000);
  step('daemon ready (status bar)');

  await page.keyboard.press('Control+P');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type('orders.py');
  await page.waitForSelector('.quick-input-list .monaco-list-row[aria-label*="orders.py"]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.editor-instance .view-lines:has-text("def remove_line")', { timeout: 30_000 });
  await page.keyboard.press('Control+G');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(`${LINE}:9`);
  await page.keyboard.press('Enter');
  step('file open, cursor placed');

  const original = fs.readFileSync(path.join(ROOT, 'workspace', FILE), 'utf8');
  await page.waitForTimeout(500); // a freshly opened editor may not ask for inline completions yet
  await page.keyboard.type(TYPED, { delay: 60 });
  const typedAt = elapsed();
  // VS Code sometimes does not ask the provider for an edit made right after the editor opened
  // (seen 1 run in 5 under load: no request in the extension's debug log at all). That is the
  // editor's race, not ours: retype the last character once. A request that was made and came
  // back empty is not retried.
  const cursorAt = `orders.py:${LINE}:${9 + TYPED.length}`;
  const asked = () => extensionLog().includes(`inline completion at shop/${cursorAt}: asking`);
  if (!(await until('a request', asked, 5_000).catch(() => false))) {
    result.retyped = true;
    step('no inline completion request from VS Code: retyping the last character');
    await page.keyboard.press('Backspace');
    await page.keyboard.type(TYPED.slice(-1));
  }
  // Wait for ghost text and for the requests to settle (the status bar stops "completing").
  const ghost = await until('ghost text', async () => {
    const text = await renderedGhost(page);
    const busy = (await statusBarTexts(page)).some((t) => t.includes('completing'));
    return text.trim() && !busy ? text : undefined;
  }, 60_000);
  await page.waitForTimeout(300);
  result.ghost = await renderedGhost(page);
  result.ghostMs = elapsed() - typedAt;
  step(`ghost text shown: ${JSON.stringify(result.ghost)}`);
  if (result.ghost !== ghost) throw new Error(`the ghost text changed while settling: ${JSON.stringify(ghost)}`);

  await until('the status bar figures', async () =>
    (await statusBarTexts(page)).find((t) => /\d+ tok · \d+ tok\/s · \d+% drafted/.test(t)), 10_000);
  result.statusBar = (await statusBarTexts(page)).find((t) => t.includes('tok/s'));
  await page.screenshot({ path: path.join(ARTIFACTS, 'ghost.png') });
  step(`status bar: ${result.statusBar}`);

  // The suggestion is the daemon's: its last computed completion ends with the ghost text (the
  // completion may have been computed a keystroke earlier and followed as the user typed).
  await runCommand(page, 'Lookahead: Show Server Status');
  const status = await until('the status in the extension log', () => lastLoggedStatus(), 15_000);
  result.daemonLast = status.last;
  if (!(status.completions.served >= 1 && typeof status.last?.text === 'string')) {
    throw new Error(`the daemon reports no completion: ${JSON.stringify(status.completions)}`);
  }
  if (!status.last.text.endsWith(result.ghost.trimEnd())) {
    throw new Error(`ghost text ${JSON.stringify(result.ghost)} is not the daemon's ${JSON.stringify(status.last.text)}`);
  }
  step('ghost text matches the daemon status');

  // The palette took the focus and the ghost text went away; it comes back on the next edit
  // (from the daemon's suggestion cache, as when the user types on).
  await page.keyboard.press('Backspace');
  await page.keyboard.type(TYPED.slice(-1));
  await until('the ghost text again', async () => (await renderedGhost(page)) === result.ghost, 30_000);
  await page.keyboard.press('Tab');
  const lines = original.split('\n');
  lines[LINE - 1] = lines[LINE - 1] + TYPED + result.ghost;
  const expected = lines.join('\n');
  // Tab is handled asynchronously: save once the cursor stands after the accepted text (the
  // rendered line cannot tell, since ghost text is drawn inside it).
  const inserted = lines[LINE - 1].split('\n');
  const acceptedAt = `Ln ${LINE + inserted.length - 1}, Col ${inserted.at(-1).length + 1}`;
  await until('the cursor after the accepted text', async () => (await statusBarTexts(page)).includes(acceptedAt), 10_000);
  await page.keyboard.press('Control+S');
  const disk = () => fs.readFileSync(path.join(ROOT, 'workspace', FILE), 'utf8');
  await until('the saved file', () => disk() === expected, 15_000).catch(() => {
    throw new Error(`the saved file is not the typed text plus the ghost text:\n${disk()}`);
  });
  await page.screenshot({ path: path.join(ARTIFACTS, 'accepted.png') });
  step('accepted with Tab and saved');

  // Toggled off, typing asks the daemon nothing.
  const asking = () => extensionLog().split(': asking the server').length;
  const askedBefore = asking();
  await runCommand(page, 'Lookahead: Toggle Inline Completions');
  await until('the status bar to show completions off', () => page.evaluate(() =>
    [...document.querySelectorAll('.statusbar-item')].some((e) => e.querySelector('.codicon-circle-slash'))), 10_000);
  await page.keyboard.press('Enter');
  await page.keyboard.type('return', { delay: 60 });
  await page.waitForTimeout(2000); // requests are asked for within ~100 ms of a key when on
  if (asking() !== askedBefore || (await renderedGhost(page)).trim()) {
    throw new Error('completions were requested or shown while toggled off');
  }
  step('toggled off: no requests');

  // Rebuilding the index tokenizes both files again (the daemon's log line comes through the
  // extension's output channel).
  const rebuilt = () => extensionLog().split(': 2 files (2 tokenized, 0 unchanged)').length;
  const rebuiltBefore = rebuilt();
  await runCommand(page, 'Lookahead: Rebuild Workspace Index');
  await until('the index to be rebuilt', () => rebuilt() > rebuiltBefore, 30_000);
  step('workspace index rebuilt');

  // A daemon that dies is started again (after 1 s, the first step of the back-off).
  await runCommand(page, 'Lookahead: Toggle Inline Completions'); // on again
  execFileSync('pkill', ['-f', '--', `--cache-dir ${path.join(ROOT, 'daemon-cache')}`]);
  await until('the restart to be announced', () => extensionLog().includes('server exited; restarting in 1 s'), 15_000);
  await daemonReady(page, 'the daemon to be ready again', 60_000);
  step('daemon killed and restarted');
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
  for (const file of logFiles(/(Lookahead|exthost)\.log$/)) {
    fs.copyFileSync(file, path.join(ARTIFACTS, path.basename(file)));
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
