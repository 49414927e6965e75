import * as cp from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as vscode from 'vscode';
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  TransportKind,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
} from 'vscode-languageclient/node';
import {
  CommandLine,
  DaemonStatus,
  LookaheadSettings,
  RestartBackoff,
  ServerState,
  completionsEnabled,
  configurationChangeParams,
  debounce,
  findExecutable,
  formatCommandLine,
  formatStatusBar,
  needsRestart,
  readSettings,
  resolveBuildCacheCommand,
  resolveServerCommand,
  toInitializationOptions,
} from './logic';

const POLL_MS = 2000;

let out: vscode.LogOutputChannel;
let statusItem: vscode.StatusBarItem;
let settings: LookaheadSettings;
let client: LanguageClient | undefined;
let generation = 0; // bumped for every client, so events of an old one are ignored
let serverState: ServerState = 'stopped';
let toggledOff = false;
let inFlight = 0;
let indexingPercent: number | undefined;
let lastStatus: DaemonStatus | undefined;
let restartTimer: NodeJS.Timeout | undefined;
const backoff = new RestartBackoff(5, 1000);

function loadSettings(): LookaheadSettings {
  const config = vscode.workspace.getConfiguration('lookahead');
  return readSettings((key) => config.get(key));
}

function log(line: string): void {
  out.info(line);
}

function updateStatusBar(): void {
  const enabled = settings.enable && !toggledOff;
  const { text, tooltip } = formatStatusBar({
    server: serverState,
    enabled,
    completing: inFlight > 0,
    indexingPercent,
    status: lastStatus,
  });
  statusItem.text = text;
  statusItem.tooltip = tooltip;
}

async function pollStatus(): Promise<DaemonStatus | undefined> {
  const c = client;
  if (!c || c.state !== State.Running) return undefined;
  try {
    // The daemon needs params present, so an empty object rather than none.
    lastStatus = await c.sendRequest<DaemonStatus>('lookahead/status', {});
  } catch (e) {
    // A status request failing is not worth a notification; the next poll tries again.
    lastStatus = undefined;
  }
  updateStatusBar();
  return lastStatus;
}

// ---------------------------------------------------------------------------------------------
// The language client

async function startServer(): Promise<void> {
  const gen = ++generation;
  const line = resolveServerCommand(settings);
  const shown = formatCommandLine(line);
  const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? os.homedir();
  serverState = 'starting';
  lastStatus = undefined;
  indexingPercent = undefined;
  updateStatusBar();

  if (!findExecutable(line.command, process.env, cwd, isExecutableFile)) {
    serverState = 'failed';
    updateStatusBar();
    reportStartFailure(shown, `'${line.command}' was not found (PATH or the given path)`);
    return;
  }

  log(`starting: ${shown}`);
  const serverOptions: ServerOptions = {
    command: line.command,
    args: line.args,
    transport: TransportKind.stdio,
    options: { cwd },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }],
    outputChannel: out,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: toInitializationOptions(settings),
    errorHandler: {
      error: () => ({ action: ErrorAction.Continue }),
      closed: () => {
        died = true;
        onServerDied(gen, shown);
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    },
    middleware: {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        if (!completionsEnabled(settings, toggledOff, document.languageId)) {
          return undefined;
        }
        if (!(await debounce(settings.debounceMs, token))) {
          return undefined;
        }
        inFlight += 1;
        updateStatusBar();
        try {
          return await next(document, position, context, token);
        } finally {
          inFlight -= 1;
          updateStatusBar();
          if (!token.isCancellationRequested) void pollStatus(); // show the new completion's stats
        }
      },
    },
  };

  let died = false;
  const c = new LanguageClient('lookahead', 'Lookahead', serverOptions, clientOptions);
  client = c;
  backoff.started(Date.now());
  try {
    await c.start();
  } catch (e) {
    // A process that started and then exited was handled by `closed` (restart with back-off);
    // anything else is a failure to launch or to initialize.
    if (gen !== generation || died) return;
    generation++;
    serverState = 'failed';
    updateStatusBar();
    reportStartFailure(shown, e instanceof Error ? e.message : String(e));
    return;
  }
  if (gen !== generation) return;
  serverState = 'running';
  log(`server running: ${shown}`);
  watchIndexingProgress(c, gen);
  updateStatusBar();
  void pollStatus();
}

function isExecutableFile(file: string): boolean {
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) return false;
    if (process.platform !== 'win32') fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function reportStartFailure(shown: string, reason: string): void {
  const message = `Lookahead: could not start the server (${reason}). Command tried: ${shown}`;
  log(message);
  log('Set lookahead.serverCommand or lookahead.pythonPath, then run "Lookahead: Restart Server".');
  void vscode.window.showErrorMessage(message, 'Open Settings', 'Show Log').then((choice) => {
    if (choice === 'Open Settings') void vscode.commands.executeCommand('workbench.action.openSettings', 'lookahead.');
    if (choice === 'Show Log') out.show(true);
  });
}

function onServerDied(gen: number, shown: string): void {
  if (gen !== generation) return;
  lastStatus = undefined;
  indexingPercent = undefined;
  const delay = backoff.crashed(Date.now());
  if (delay === undefined) {
    serverState = 'failed';
    updateStatusBar();
    const message = `Lookahead: the server stopped ${backoff.maxTries + 1} times in a row; not restarting it. Command: ${shown}`;
    log(message);
    void vscode.window.showErrorMessage(message, 'Restart', 'Show Log').then((choice) => {
      if (choice === 'Restart') void vscode.commands.executeCommand('lookahead.restart');
      if (choice === 'Show Log') out.show(true);
    });
    return;
  }
  serverState = 'starting';
  updateStatusBar();
  log(`server exited; restarting in ${delay / 1000} s (attempt ${backoff.attempts} of ${backoff.maxTries}): ${shown}`);
  clearTimeout(restartTimer);
  restartTimer = setTimeout(() => {
    if (gen !== generation) return;
    void startServer();
  }, delay);
}

/** Indexing percentages from the server's work-done progress. The client's own handler (a
 * window progress) is replaced so the percentage can go to our status bar item instead. */
function watchIndexingProgress(c: LanguageClient, gen: number): void {
  c.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
    const sub = c.onProgress(WorkDoneProgress.type, token, (value) => {
      if (gen !== generation) return;
      if (value.kind === 'end') {
        indexingPercent = undefined;
        sub.dispose();
        void pollStatus();
      } else if (typeof value.percentage === 'number') {
        indexingPercent = value.percentage;
      } else if (value.kind === 'begin') {
        indexingPercent = 0;
      }
      updateStatusBar();
    });
  });
}

async function stopServer(): Promise<void> {
  generation++;
  clearTimeout(restartTimer);
  const c = client;
  client = undefined;
  serverState = 'stopped';
  inFlight = 0;
  if (c) {
    try {
      if (c.state !== State.Stopped) await c.stop(3000);
    } catch (e) {
      log(`stopping the server: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}

async function restartServer(): Promise<void> {
  await stopServer();
  backoff.reset();
  await startServer();
}

// ---------------------------------------------------------------------------------------------
// Commands

async function showStatus(): Promise<void> {
  const status = await pollStatus();
  out.appendLine(`--- lookahead/status at ${new Date().toISOString()} ---`);
  if (status === undefined) {
    out.appendLine(`(no answer: the server is ${serverState}; command: ${formatCommandLine(resolveServerCommand(settings))})`);
  } else {
    out.appendLine(JSON.stringify(status, null, 2));
  }
  out.show(true);
}

async function toggle(): Promise<void> {
  toggledOff = !toggledOff;
  updateStatusBar();
  void vscode.window.setStatusBarMessage(
    `Lookahead inline completions ${completionsEnabled(settings, toggledOff, '') ? 'on' : 'off'}`,
    3000,
  );
}

function runLogged(line: CommandLine, cwd: string, token: vscode.CancellationToken): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = cp.spawn(line.command, line.args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    const cancel = token.onCancellationRequested(() => child.kill());
    child.stdout.on('data', (d: Buffer) => out.append(d.toString()));
    child.stderr.on('data', (d: Buffer) => out.append(d.toString()));
    child.on('error', (e) => {
      cancel.dispose();
      reject(e);
    });
    child.on('close', (code, signal) => {
      cancel.dispose();
      resolve(code ?? (signal ? 128 : 1));
    });
  });
}

async function buildStaticCache(): Promise<void> {
  const folders = vscode.workspace.workspaceFolders?.filter((f) => f.uri.scheme === 'file') ?? [];
  if (folders.length === 0) {
    void vscode.window.showWarningMessage('Lookahead: open a folder to build its static cache.');
    return;
  }
  const folder =
    folders.length === 1 ? folders[0] : await vscode.window.showWorkspaceFolderPick({ placeHolder: 'Folder to index' });
  if (!folder) return;
  const line = resolveBuildCacheCommand(settings, folder.uri.fsPath);
  const shown = formatCommandLine(line);
  out.show(true);
  log(`running: ${shown}`);
  try {
    const code = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `Lookahead: building the static cache of ${folder.name}`,
        cancellable: true,
      },
      (_progress, token) => runLogged(line, folder.uri.fsPath, token),
    );
    if (code === 0) {
      log(`static cache written: ${line.output}`);
      const choice = await vscode.window.showInformationMessage(
        `Lookahead: static cache written to ${line.output}. Restart the server to use it?`,
        'Restart',
      );
      if (choice === 'Restart') await restartServer();
    } else {
      log(`build-cache exited with status ${code}: ${shown}`);
      void vscode.window.showErrorMessage(`Lookahead: building the static cache failed (status ${code}). Command: ${shown}`, 'Show Log')
        .then((c) => c && out.show(true));
    }
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    log(`build-cache could not run (${reason}): ${shown}`);
    void vscode.window.showErrorMessage(`Lookahead: could not run ${shown} (${reason})`);
  }
}

// ---------------------------------------------------------------------------------------------

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  out = vscode.window.createOutputChannel('Lookahead', { log: true });
  settings = loadSettings();
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.name = 'Lookahead';
  statusItem.command = 'lookahead.showStatus';
  updateStatusBar();
  statusItem.show();

  const poll = setInterval(() => void pollStatus(), POLL_MS);
  context.subscriptions.push(
    out,
    statusItem,
    { dispose: () => clearInterval(poll) },
    vscode.commands.registerCommand('lookahead.toggle', toggle),
    vscode.commands.registerCommand('lookahead.restart', restartServer),
    // The daemon has no "rebuild index" request; a restart re-reads every workspace folder
    // (its saved index is reloaded and only changed files are tokenized again).
    vscode.commands.registerCommand('lookahead.rebuildIndex', restartServer),
    vscode.commands.registerCommand('lookahead.buildStaticCache', buildStaticCache),
    vscode.commands.registerCommand('lookahead.showLog', () => out.show(true)),
    vscode.commands.registerCommand('lookahead.showStatus', showStatus),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration('lookahead')) return;
      const before = settings;
      settings = loadSettings();
      updateStatusBar();
      if (needsRestart(before, settings)) {
        log('server command changed; restarting');
        void restartServer();
      } else if (client && client.state === State.Running) {
        void client
          .sendNotification(DidChangeConfigurationNotification.type, configurationChangeParams(settings))
          .catch((err) => log(`didChangeConfiguration failed: ${String(err)}`));
      }
    }),
  );
  log(`Lookahead ${context.extension.packageJSON.version ?? ''} activated`);
  void startServer(); // not awaited: activation should not wait for the model to load
}

export async function deactivate(): Promise<void> {
  await stopServer();
}
