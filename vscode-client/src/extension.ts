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
  Middleware,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
} from 'vscode-languageclient/node';
import {
  CommandLine,
  ConfiguredCommand,
  DaemonStatus,
  Located,
  LookaheadSettings,
  RestartBackoff,
  ServerState,
  cacheFolder,
  checkPathSettings,
  completionsEnabled,
  configurationChangeParams,
  debounce,
  ensureCacheFolder,
  formatCommandLine,
  formatStatusBar,
  locateProgram,
  needsRestart,
  readSettings,
  resolveBuildCacheCommand,
  resolveServerCommand,
  toInitializationOptions,
} from './logic';

const POLL_MS = 2000;
const STATUS_REQUEST = 'lookahead/status';
const REBUILD_INDEX_REQUEST = 'lookahead/rebuildIndex';

/** The settings and what is wrong with them. In an untrusted workspace VS Code hands out only
 * user-level values of the restricted settings (package.json's untrustedWorkspaces). */
function loadSettings(): { settings: LookaheadSettings; problems: string[] } {
  const config = vscode.workspace.getConfiguration('lookahead');
  return checkPathSettings(readSettings((key) => config.get(key)), os.homedir());
}

function isExecutableFile(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) return false;
    if (process.platform !== 'win32') fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The command line with its program as an absolute path (or why there is none). Programs in the
 * workspace's folders are not looked for on PATH until the user trusts the workspace. */
function locate(line: ConfiguredCommand): Located {
  const folders = vscode.workspace.isTrusted ? [] : (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  return locateProgram(line, { env: process.env, home: os.homedir(), isExecutableFile, excludedFolders: folders });
}

/** Where the server and build-cache start: never a workspace folder, where `python -m` would
 * import the repository's own modules first. Their arguments carry absolute paths. */
const PROCESS_CWD = os.homedir();

/** The extension while it is active: one language client at a time (replaced on restart), the
 * status bar item that mirrors the daemon, and the commands. */
class LookaheadExtension implements vscode.Disposable {
  private readonly out = vscode.window.createOutputChannel('Lookahead', { log: true });
  private readonly statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  private readonly backoff = new RestartBackoff(5, 1000);
  private readonly poll = setInterval(() => void this.pollStatus(), POLL_MS);
  private settings: LookaheadSettings;
  /** The refused settings last shown to the user, so that one message is shown once. */
  private shownProblems = '';
  /** What the current server runs (or why it could not): a change restarts it. */
  private launched: Located | undefined;
  private client: LanguageClient | undefined;
  /** Bumped for every client started or stopped, so that events of an older one are ignored. */
  private generation = 0;
  private serverState: ServerState = 'stopped';
  private toggledOff = false;
  private inFlight = 0;
  private indexingPercent: number | undefined;
  private lastStatus: DaemonStatus | undefined;
  private restartTimer: NodeJS.Timeout | undefined;

  constructor() {
    this.settings = this.loadSettings();
    this.statusItem.name = 'Lookahead';
    this.statusItem.command = 'lookahead.showStatus';
    this.updateStatusBar();
    this.statusItem.show();
  }

  commands(): vscode.Disposable[] {
    return [
      vscode.commands.registerCommand('lookahead.toggle', () => this.toggle()),
      vscode.commands.registerCommand('lookahead.restart', () => this.restartServer()),
      vscode.commands.registerCommand('lookahead.rebuildIndex', () => this.rebuildIndex()),
      vscode.commands.registerCommand('lookahead.buildStaticCache', () => this.buildStaticCache()),
      vscode.commands.registerCommand('lookahead.showLog', () => this.out.show(true)),
      vscode.commands.registerCommand('lookahead.showStatus', () => this.showStatus()),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('lookahead')) this.settingsChanged();
      }),
      // Trust lets workspace values of the restricted settings and the PATH entries in the
      // workspace count.
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.settingsChanged()),
    ];
  }

  dispose(): void {
    clearInterval(this.poll);
    this.statusItem.dispose();
    this.out.dispose();
  }

  log(line: string): void {
    this.out.info(line);
  }

  private loadSettings(): LookaheadSettings {
    const { settings, problems } = loadSettings();
    const text = problems.join(' ');
    if (text !== '' && text !== this.shownProblems) {
      this.log(text);
      void vscode.window.showErrorMessage(`Lookahead: ${text}`, 'Open Settings').then((choice) => {
        if (choice) void vscode.commands.executeCommand('workbench.action.openSettings', 'lookahead.');
      });
    }
    this.shownProblems = text;
    return settings;
  }

  // -- the language client ---------------------------------------------------------------------

  async startServer(): Promise<void> {
    const gen = ++this.generation;
    const configured = resolveServerCommand(this.settings);
    const located = locate(configured);
    this.launched = located;
    this.serverState = 'starting';
    this.lastStatus = undefined;
    this.indexingPercent = undefined;
    this.updateStatusBar();

    if (!located.ok) {
      this.serverState = 'failed';
      this.updateStatusBar();
      this.reportStartFailure(formatCommandLine(configured), located.error);
      return;
    }
    const line = located.line;
    const shown = formatCommandLine(line);

    this.log(`starting: ${shown}`);
    // No `transport`: with TransportKind.stdio the client would append --stdio to the user's
    // command line, which a wrapper script may not accept. Stdio is what it uses anyway.
    const serverOptions: ServerOptions = { command: line.command, args: line.args, options: { cwd: PROCESS_CWD } };
    let died = false;
    const clientOptions: LanguageClientOptions = {
      // Unsaved editors too: the daemon completes them from their text alone.
      documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
      outputChannel: this.out,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: toInitializationOptions(this.settings),
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue }),
        closed: () => {
          died = true;
          this.onServerDied(gen, shown);
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
      middleware: this.middleware(),
    };
    const c = new LanguageClient('lookahead', 'Lookahead', serverOptions, clientOptions);
    this.client = c;
    this.backoff.started(Date.now());
    try {
      await c.start();
    } catch (e) {
      // A process that started and then exited was handled by `closed` (restart with back-off);
      // anything else is a failure to launch or to initialize.
      if (gen !== this.generation || died) return;
      this.generation++;
      this.serverState = 'failed';
      this.updateStatusBar();
      this.reportStartFailure(shown, message(e));
      return;
    }
    if (gen !== this.generation) return;
    this.serverState = 'running';
    this.log(`server running: ${shown}`);
    this.watchIndexingProgress(c, gen);
    this.updateStatusBar();
    void this.pollStatus();
  }

  /** Client-side debounce, and no request at all while completions are off. */
  private middleware(): Middleware {
    return {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const where = `${vscode.workspace.asRelativePath(document.uri)}:${position.line + 1}:${position.character + 1}`;
        if (!completionsEnabled(this.settings, this.toggledOff, document.languageId)) return undefined;
        if (!(await debounce(this.settings.debounceMs, token))) {
          this.out.debug(`inline completion at ${where}: superseded while waiting`);
          return undefined;
        }
        this.out.debug(`inline completion at ${where}: asking the server`);
        this.inFlight += 1;
        this.updateStatusBar();
        try {
          const answer = await next(document, position, context, token);
          const items = Array.isArray(answer) ? answer : (answer?.items ?? []);
          this.out.debug(`inline completion at ${where}: ${items.length} item(s)${token.isCancellationRequested ? ', too late' : ''}`);
          return answer;
        } finally {
          this.inFlight -= 1;
          this.updateStatusBar();
          if (!token.isCancellationRequested) void this.pollStatus(); // the new completion's figures
        }
      },
    };
  }

  private reportStartFailure(shown: string, reason: string): void {
    const text = `Lookahead: could not start the server (${reason}). Command tried: ${shown}`;
    this.log(text);
    this.log('Set lookahead.serverCommand or lookahead.pythonPath, then run "Lookahead: Restart Server".');
    void vscode.window.showErrorMessage(text, 'Open Settings', 'Show Log').then((choice) => {
      if (choice === 'Open Settings') void vscode.commands.executeCommand('workbench.action.openSettings', 'lookahead.');
      if (choice === 'Show Log') this.out.show(true);
    });
  }

  private onServerDied(gen: number, shown: string): void {
    if (gen !== this.generation) return;
    this.lastStatus = undefined;
    this.indexingPercent = undefined;
    const delay = this.backoff.crashed(Date.now());
    if (delay === undefined) {
      this.serverState = 'failed';
      this.updateStatusBar();
      const text = `Lookahead: the server stopped ${this.backoff.maxTries + 1} times in a row; not restarting it. Command: ${shown}`;
      this.log(text);
      void vscode.window.showErrorMessage(text, 'Restart', 'Show Log').then((choice) => {
        if (choice === 'Restart') void this.restartServer();
        if (choice === 'Show Log') this.out.show(true);
      });
      return;
    }
    this.serverState = 'starting';
    this.updateStatusBar();
    this.log(`server exited; restarting in ${delay / 1000} s (attempt ${this.backoff.attempts} of ${this.backoff.maxTries}): ${shown}`);
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => {
      if (gen === this.generation) void this.startServer();
    }, delay);
  }

  /** Indexing percentages from the server's work-done progress. The client's own handler (a
   * window progress) is replaced so that the percentage goes to our status bar item instead. */
  private watchIndexingProgress(c: LanguageClient, gen: number): void {
    c.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
      const sub = c.onProgress(WorkDoneProgress.type, token, (value) => {
        if (gen !== this.generation) return;
        if (value.kind === 'end') {
          this.indexingPercent = undefined;
          sub.dispose();
          void this.pollStatus();
        } else if (typeof value.percentage === 'number') {
          this.indexingPercent = value.percentage;
        } else if (value.kind === 'begin') {
          this.indexingPercent = 0;
        }
        this.updateStatusBar();
      });
    });
  }

  async stopServer(): Promise<void> {
    this.generation++;
    clearTimeout(this.restartTimer);
    const c = this.client;
    this.client = undefined;
    this.serverState = 'stopped';
    this.inFlight = 0;
    if (c && c.state !== State.Stopped) {
      try {
        await c.stop(3000);
      } catch (e) {
        this.log(`stopping the server: ${message(e)}`);
      }
    }
  }

  private async restartServer(): Promise<void> {
    await this.stopServer();
    this.backoff.reset();
    await this.startServer();
  }

  private settingsChanged(): void {
    this.settings = this.loadSettings();
    this.updateStatusBar();
    if (this.launched !== undefined && needsRestart(this.launched, locate(resolveServerCommand(this.settings)))) {
      this.log('server command changed; restarting');
      void this.restartServer();
    } else if (this.client?.state === State.Running) {
      this.client
        .sendNotification(DidChangeConfigurationNotification.type, configurationChangeParams(this.settings))
        .catch((e) => this.log(`didChangeConfiguration failed: ${message(e)}`));
    }
  }

  // -- status ------------------------------------------------------------------------------------

  private updateStatusBar(): void {
    const { text, tooltip } = formatStatusBar({
      server: this.serverState,
      enabled: this.settings.enable && !this.toggledOff,
      completing: this.inFlight > 0,
      indexingPercent: this.indexingPercent,
      status: this.lastStatus,
    });
    this.statusItem.text = text;
    this.statusItem.tooltip = tooltip;
  }

  private async pollStatus(): Promise<DaemonStatus | undefined> {
    const c = this.client;
    if (!c || c.state !== State.Running) return undefined;
    try {
      // The daemon wants params present: an empty object rather than none.
      this.lastStatus = await c.sendRequest<DaemonStatus>(STATUS_REQUEST, {});
    } catch {
      // Not worth a notification: the next poll asks again.
      this.lastStatus = undefined;
    }
    this.updateStatusBar();
    return this.lastStatus;
  }

  // -- commands ----------------------------------------------------------------------------------

  private async showStatus(): Promise<void> {
    const status = await this.pollStatus();
    const body =
      status === undefined
        ? `(no answer: the server is ${this.serverState}; command: ${formatCommandLine(resolveServerCommand(this.settings))})`
        : JSON.stringify(status, null, 2);
    this.out.info(`lookahead/status at ${new Date().toISOString()}:\n${body}`);
    this.out.show(true);
  }

  private toggle(): void {
    this.toggledOff = !this.toggledOff;
    this.updateStatusBar();
    const on = completionsEnabled(this.settings, this.toggledOff, '');
    void vscode.window.setStatusBarMessage(`Lookahead inline completions ${on ? 'on' : 'off'}`, 3000);
  }

  private async rebuildIndex(): Promise<void> {
    const c = this.client;
    if (!c || c.state !== State.Running) {
      void vscode.window.showWarningMessage(`Lookahead: the server is ${this.serverState}; nothing to rebuild.`);
      return;
    }
    this.log('rebuilding the workspace index');
    try {
      await c.sendRequest(REBUILD_INDEX_REQUEST, {});
    } catch (e) {
      this.log(`rebuilding the index failed: ${message(e)}`);
      void vscode.window.showErrorMessage(`Lookahead: rebuilding the index failed (${message(e)}).`);
    }
    void this.pollStatus();
  }

  private runLogged(line: CommandLine, token: vscode.CancellationToken): Promise<number> {
    return new Promise((resolve, reject) => {
      const child = cp.spawn(line.command, line.args, { cwd: PROCESS_CWD, stdio: ['ignore', 'pipe', 'pipe'] });
      const cancel = token.onCancellationRequested(() => child.kill());
      child.stdout.on('data', (d: Buffer) => this.out.append(d.toString()));
      child.stderr.on('data', (d: Buffer) => this.out.append(d.toString()));
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

  private async buildStaticCache(): Promise<void> {
    const folders = vscode.workspace.workspaceFolders?.filter((f) => f.uri.scheme === 'file') ?? [];
    if (folders.length === 0) {
      void vscode.window.showWarningMessage('Lookahead: open a folder to build its static cache.');
      return;
    }
    const folder =
      folders.length === 1 ? folders[0] : await vscode.window.showWorkspaceFolderPick({ placeHolder: 'Folder to index' });
    if (!folder) return;
    const configured = resolveBuildCacheCommand(this.settings, folder.uri.fsPath);
    const located = locate(configured);
    const unusable = located.ok ? ensureCacheFolder(cacheFolder(folder.uri.fsPath)) : located.error;
    if (!located.ok || unusable !== undefined) {
      const text = `Lookahead: cannot build the static cache (${unusable}). Command: ${formatCommandLine(configured)}`;
      this.log(text);
      void vscode.window.showErrorMessage(text);
      return;
    }
    const line = located.line;
    const shown = formatCommandLine(line);
    this.out.show(true);
    this.log(`running: ${shown}`);
    let code: number;
    try {
      code = await vscode.window.withProgress(
        {
          location: vscode.ProgressLocation.Notification,
          title: `Lookahead: building the static cache of ${folder.name}`,
          cancellable: true,
        },
        (_progress, token) => this.runLogged(line, token),
      );
    } catch (e) {
      this.log(`build-cache could not run (${message(e)}): ${shown}`);
      void vscode.window.showErrorMessage(`Lookahead: could not run ${shown} (${message(e)})`);
      return;
    }
    if (code !== 0) {
      this.log(`build-cache exited with status ${code}: ${shown}`);
      const choice = await vscode.window.showErrorMessage(
        `Lookahead: building the static cache failed (status ${code}). Command: ${shown}`,
        'Show Log',
      );
      if (choice) this.out.show(true);
      return;
    }
    this.log(`static cache written: ${configured.output}`);
    const choice = await vscode.window.showInformationMessage(
      `Lookahead: static cache written to ${configured.output}. Restart the server to use it?`,
      'Restart',
    );
    if (choice === 'Restart') await this.restartServer();
  }
}

let extension: LookaheadExtension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  extension = new LookaheadExtension();
  context.subscriptions.push(extension, ...extension.commands());
  extension.log(`Lookahead ${context.extension.packageJSON.version ?? ''} activated`);
  void extension.startServer(); // not awaited: activation does not wait for the model to load
}

export async function deactivate(): Promise<void> {
  await extension?.stopServer();
  extension = undefined;
}
