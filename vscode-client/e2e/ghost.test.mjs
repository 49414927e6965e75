// Drives a real VS Code (code-server, already listening on 127.0.0.1:$PORT) from headless
// Chromium: open a Python file of the sample project, type the start of a statement, wait for
// the daemon's ghost text, accept its first word with Accept Next Word and the rest with Tab,
// saving and checking the file on disk after each. Also checks that the ghost text is the
// daemon's last completion (via "Lookahead: Show Server Status"), that the status bar reports
// the completion's figures, that nothing is requested once completions are toggled off, that
// "Rebuild Workspace Index" indexes the files again, and that a daemon that dies is started
// again.
// Started by run.sh; writes screenshots and result.json to $ARTIFACTS; exits non-zero on
// failure.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {
  ARTIFACTS, ROOT, checkGhostIsDaemons, daemonReady, extensionLog, nextWord, openAt, renderedGhost, runCommand,
  scenario, statusBarTexts, typeForGhost, until,
} from './lib.mjs';

const FILE = 'shop/orders.py';
const LINE = 18; // the empty body of remove_line(), indented by 8 spaces
const TYPED = 'if ';

await scenario(async (page, run) => {
  const { result, step } = run;
  await daemonReady(page, 'the daemon to be ready', 180_000); // the cost model is measured first
  step('daemon ready (status bar)');

  await openAt(page, FILE, 'def remove_line', LINE, 9);
  step('file open, cursor placed');

  const original = fs.readFileSync(path.join(ROOT, 'workspace', FILE), 'utf8');
  result.ghost = await typeForGhost(page, run, TYPED, `${FILE}:${LINE}:${9 + TYPED.length}`);
  step(`ghost text shown: ${JSON.stringify(result.ghost)}`);

  await until('the status bar figures', async () =>
    (await statusBarTexts(page)).find((t) => /\d+ tok · \d+ tok\/s · \d+% drafted/.test(t)), 10_000);
  result.statusBar = (await statusBarTexts(page)).find((t) => t.includes('tok/s'));
  await page.screenshot({ path: path.join(ARTIFACTS, 'ghost.png') });
  step(`status bar: ${result.statusBar}`);

  result.daemonLast = (await checkGhostIsDaemons(page, result.ghost)).last;
  step('ghost text matches the daemon status');

  // The palette took the focus and the ghost text went away; it comes back on the next edit
  // (from the daemon's suggestion cache, as when the user types on).
  await page.keyboard.press('Backspace');
  await page.keyboard.type(TYPED.slice(-1));
  await until('the ghost text again', async () => (await renderedGhost(page)) === result.ghost, 30_000);
  // Accept Next Word (Ctrl+Right; Cmd+Right on macOS): only the ghost text's first word lands
  // in the document, the rest stays suggested, and Tab then accepts the rest.
  const word = nextWord(result.ghost);
  if (word === result.ghost) {
    throw new Error(`the ghost text ${JSON.stringify(result.ghost)} is one word: a partial accept would accept it all`);
  }
  const lines = original.split('\n');
  const typedLine = lines[LINE - 1] + TYPED;
  // Where the cursor stands once `text` is accepted after the typed text (the status bar's
  // words; the rendered line cannot tell, since ghost text is drawn inside it).
  const cursorAfter = (text) => {
    const inserted = (typedLine + text).split('\n');
    return `Ln ${LINE + inserted.length - 1}, Col ${inserted.at(-1).length + 1}`;
  };
  await page.keyboard.press('Control+ArrowRight');
  await until('the cursor after the first word', async () => (await statusBarTexts(page)).includes(cursorAfter(word)), 10_000);
  const rest = result.ghost.slice(word.length);
  await until('the rest of the ghost text', async () => (await renderedGhost(page)) === rest, 10_000).catch(async () => {
    throw new Error(`after Accept Next Word the ghost text is ${JSON.stringify(await renderedGhost(page))}, not ${JSON.stringify(rest)}`);
  });
  await page.keyboard.press('Control+S');
  const disk = () => fs.readFileSync(path.join(ROOT, 'workspace', FILE), 'utf8');
  const saved = (line) => until('the saved file', () => disk() === lines.with(LINE - 1, line).join('\n'), 15_000).catch(() => {
    throw new Error(`the saved line ${LINE} is not ${JSON.stringify(line)}:\n${disk()}`);
  });
  await saved(typedLine + word);
  if ((await renderedGhost(page)) !== rest) throw new Error('saving took the rest of the ghost text away');
  await page.screenshot({ path: path.join(ARTIFACTS, 'next-word.png') });
  result.acceptedWord = word;
  step(`accepted the next word ${JSON.stringify(word)}; the rest stays suggested`);

  await page.keyboard.press('Tab');
  // Tab is handled asynchronously: save once the cursor stands after the accepted text.
  const acceptedAt = cursorAfter(result.ghost);
  await until('the cursor after the accepted text', async () => (await statusBarTexts(page)).includes(acceptedAt), 10_000);
  await page.keyboard.press('Control+S');
  await saved(typedLine + result.ghost);
  await page.screenshot({ path: path.join(ARTIFACTS, 'accepted.png') });
  step('the rest accepted with Tab and saved');

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
});
