// The extension brings its daemon: a real VS Code (code-server) with no `lookahead-lsp` on PATH
// and no serverCommand or pythonPath. The test accepts the extension's offer to install one,
// waits for pip to install it (from the local wheelhouse run.sh points pip at: the namespace has
// no network) into the extension's storage, and sees ghost text from that daemon; then the
// window is reloaded and must start the installed daemon without offering again.
// Started by run.sh; writes screenshots and result.json to $ARTIFACTS; exits non-zero on failure.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {
  ARTIFACTS, ROOT, checkGhostIsDaemons, daemonReady, extensionLog, openAt, scenario, statusBarIcon, typeForGhost, until,
} from './lib.mjs';

const OFFER = 'no lookahead-lsp daemon found';
const FILE = 'shop/orders.py';
const LINE = 18;
const TYPED = 'if ';

/** The process ids whose command line starts with `line`. */
const daemonsRunning = (line) =>
  execFileSync('ps', ['-eo', 'pid=,args=']).toString().split('\n')
    .map((l) => /^\s*(\d+) (.*)$/.exec(l))
    .filter((m) => m !== null && m[2].startsWith(line))
    .map((m) => m[1]);

/** The toast that holds this text, once VS Code shows it. */
const toast = (page, text) => page.locator('.notification-toast', { hasText: text });

await scenario(async (page, run) => {
  const { result, step } = run;
  const offer = toast(page, OFFER);
  await offer.waitFor({ state: 'visible', timeout: 60_000 });
  if (!(await statusBarIcon(page, 'cloud-download'))) throw new Error('the status bar does not show the missing daemon');
  await page.waitForTimeout(500); // the toast slides in
  await page.screenshot({ path: path.join(ARTIFACTS, 'offer.png') });
  step('install offered');

  await offer.locator('.notification-list-item-buttons-container .monaco-button', { hasText: /^Install$/ }).click();
  await toast(page, 'installing the daemon').waitFor({ state: 'visible', timeout: 30_000 });
  await page.waitForTimeout(500);
  await page.screenshot({ path: path.join(ARTIFACTS, 'installing.png') });
  step('installing (progress notification)');

  const installed = await until('the install to finish', () => {
    const log = extensionLog();
    const failed = /installing the daemon failed: .*/.exec(log);
    if (failed) throw new Error(failed[0]);
    return /daemon installed: (.+)/.exec(log)?.[1].trim();
  }, 150_000, 500);
  result.venv = installed;
  step(`installed into ${path.relative(ROOT, installed)}`);
  const python = path.join(installed, 'bin', 'python');
  if (!installed.startsWith(path.join(ROOT, 'user-data')) || !fs.existsSync(python)) {
    throw new Error(`the environment is not in the extension's storage: ${installed}`);
  }
  const leftovers = fs.readdirSync(path.dirname(installed)).filter((n) => n.startsWith('daemon.'));
  if (leftovers.length > 0) throw new Error(`the install left ${leftovers.join(', ')} behind`);

  await daemonReady(page, 'the installed daemon to be ready', 120_000);
  const serve = `${python} -I -m lookahead_lsp serve`;
  if (!extensionLog().includes(`server running: ${serve}`)) throw new Error(`the server running is not ${serve}`);
  // It runs in the empty folder of the extension's storage, not the home folder, where
  // `python -m` would import whatever modules lie there.
  const empty = fs.realpathSync(path.join(path.dirname(installed), 'empty'));
  const cwds = daemonsRunning(serve).map((pid) => fs.readlinkSync(`/proc/${pid}/cwd`));
  if (cwds.length === 0 || cwds.some((cwd) => cwd !== empty)) throw new Error(`the daemon runs in ${cwds.join(', ')}, not ${empty}`);
  result.daemonCwd = cwds[0];
  step('installed daemon ready (status bar), isolated, in the empty folder');

  await openAt(page, FILE, 'def remove_line', LINE, 9);
  result.ghost = await typeForGhost(page, run, TYPED, `${FILE}:${LINE}:${9 + TYPED.length}`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'ghost.png') });
  step(`ghost text shown: ${JSON.stringify(result.ghost)}`);
  result.daemonLast = (await checkGhostIsDaemons(page, result.ghost)).last;
  step('ghost text matches the installed daemon status');

  // The next activation (a reloaded window: a new extension host) finds the installed daemon
  // by itself, without offering to install one.
  await page.reload();
  await page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
  await until('the installed daemon to be ready again', async () => {
    if ((await toast(page, OFFER).count()) > 0 || (await statusBarIcon(page, 'cloud-download'))) {
      throw new Error('the install was offered again after the window was reloaded');
    }
    if (await statusBarIcon(page, 'error')) throw new Error('the installed daemon did not start after the reload');
    return statusBarIcon(page, 'check');
  }, 90_000, 250);
  const running = daemonsRunning(serve);
  result.installedDaemonsAfterReload = running.length;
  if (running.length === 0) throw new Error(`no process runs ${serve}`);
  step('window reloaded: the installed daemon runs, no offer');
});
