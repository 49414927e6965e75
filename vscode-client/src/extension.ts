import * as cp from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  LanguageClientOptions,
  Middleware,
  MessageType,
  RevealOutputChannelOn,
  ServerOptions,
  ShowMessageNotification,
  State,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
} from 'vscode-languageclient/node';
import {
  CommandLine,
  ConfiguredCommand,
  CursorParams,
  CursorReporter,
  CursorState,
  DaemonStatus,
  Located,
  LookaheadSettings,
  ModelEntry,
  ModelList,
  ModelPickItem,
  Origin,
  ProgramSearch,
  RestartBackoff,
  SERVED_SCHEMES,
  ServerState,
  cacheFolder,
  checkPathSettings,
  completionsEnabled,
  configurationChangeParams,
  daemonOptions,
  declaredSettings,
  ensureCacheFolder,
  formatCommandLine,
  formatStatusBar,
  locateProgram,
  menuEntries,
  modelPickItems,
  modelPullPrompt,
  needsRestart,
  parseDaemonStatus,
  parseModelList,
  readSettings,
  resolveBuildCacheCommand,
  resolveModelsListCommand,
  resolveModelsPullCommand,
  settingNamedIn,
} from './logic';
import { DaemonChoice, MIN_PYTHON, VERIFY_DAEMON_ARGS, checkInstallSpec, chooseDaemon, lastLine, privateVenvFolder } from './install';
import { findPython, installDaemon, runProcess } from './installer';
import { Launch, ensureWorkingFolder, formatLaunch, launchFor, workingFolder } from './launch';

const STATUS_REQUEST = 'lookahead/status';
const STATUS_CHANGED_NOTIFICATION = 'lookahead/statusChanged';
const REBUILD_INDEX_REQUEST = 'lookahead/rebuildIndex';
const CURSOR_NOTIFICATION = 'lookahead/cursor';

/** The settings, the daemon's share of them, and what is wrong with them. In an untrusted
 * workspace VS Code hands out only user-level values of the restricted settings (package.json's
 * untrustedWorkspaces). declared: every setting package.json declares. */
function loadSettings(declared: readonly string[]): {
  settings: LookaheadSettings;
  options: Record<string, unknown>;
  problems: string[];
} {
  const config = vscode.workspace.getConfiguration('lookahead');
  const get = (key: string): unknown => config.get(key);
  const { settings, problems } = checkPathSettings(readSettings(get), os.homedir());
  return { settings, options: daemonOptions(declared, get, settings), problems };
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

/** Where programs are looked for. Programs in the workspace's folders are not looked for on PATH
 * until the user trusts the workspace. */
function programSearch(): ProgramSearch {
  const folders = vscode.workspace.isTrusted ? [] : (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  return { env: process.env, home: os.homedir(), isExecutableFile, excludedFolders: folders };
}

/** The command line with its program as an absolute path (or why there is none). */
function locate(line: ConfiguredCommand): Located {
  return locateProgram(line, programSearch());
}

function openSettings(query = 'lookahead.'): void {
  void vscode.commands.executeCommand('workbench.action.openSettings', query);
}

/** The extension while it is active: one language client at a time (replaced on restart), the
 * status bar item that mirrors the daemon, and the commands. */
class LookaheadExtension implements vscode.Disposable {
  private readonly out = vscode.window.createOutputChannel('Lookahead', { log: true });
  private readonly statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  private readonly backoff = new RestartBackoff(5, 1000);
  private settings: LookaheadSettings;
  /** The daemon's settings, as initializationOptions and didChangeConfiguration send them. */
  private daemonOptions: Record<string, unknown> = {};
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
  /** Where the cursor rests, for the daemon to evaluate the prompt there while the model idles. */
  private readonly cursor = new CursorReporter(
    () => this.cursorState(),
    (params) => this.sendCursor(params),
  );
  /** The environment the extension installs the daemon into. */
  private readonly privateVenv: string;
  /** Where every program of the extension runs (launch.ts): never a workspace folder nor the
   * home folder, where `python -m` would import whatever modules lie there. Arguments carry
   * absolute paths. */
  private readonly cwd: string;
  private installing = false;

  /** declared: the settings package.json declares (declaredSettings). */
  constructor(
    storage: string,
    private readonly declared: readonly string[],
  ) {
    this.privateVenv = privateVenvFolder(storage);
    this.cwd = this.prepareWorkingFolder(storage);
    this.settings = this.loadSettings();
    this.statusItem.name = 'Lookahead';
    this.statusItem.command = 'lookahead.menu';
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
      vscode.commands.registerCommand('lookahead.installDaemon', () => this.installDaemon()),
      vscode.commands.registerCommand('lookahead.menu', () => this.showMenu()),
      vscode.commands.registerCommand('lookahead.selectModel', () => this.selectModel()),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('lookahead')) this.settingsChanged();
      }),
      // Trust lets workspace values of the restricted settings and the PATH entries in the
      // workspace count.
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.settingsChanged()),
      vscode.window.onDidChangeTextEditorSelection((e) => {
        if (e.textEditor === vscode.window.activeTextEditor) this.cursor.moved();
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.cursor.moved()),
    ];
  }

  dispose(): void {
    this.cursor.dispose();
    this.statusItem.dispose();
    this.out.dispose();
  }

  log(line: string): void {
    this.out.info(line);
  }

  /** workingFolder(storage), or, when it cannot be made, a fresh private folder of the system's
   * temporary folder (never the temporary folder itself: anyone may write there). */
  private prepareWorkingFolder(storage: string): string {
    const dir = workingFolder(storage);
    const problem = ensureWorkingFolder(dir);
    if (problem === undefined) return dir;
    const fallback = fs.mkdtempSync(path.join(os.tmpdir(), 'lookahead-'));
    this.log(`${problem}; programs run in ${fallback} instead`);
    return fallback;
  }

  /** How a command line of this origin starts (launch.ts). */
  private launch(line: CommandLine, origin: Origin): Launch {
    return launchFor(line, origin, this.cwd, process.env);
  }

  private loadSettings(): LookaheadSettings {
    const { settings, options, problems } = loadSettings(this.declared);
    this.daemonOptions = options;
    const text = problems.join(' ');
    if (text !== '' && text !== this.shownProblems) {
      this.log(text);
      void vscode.window.showErrorMessage(`Lookahead: ${text}`, 'Open Settings').then((choice) => {
        if (choice) openSettings(settingNamedIn(text, this.declared));
      });
    }
    this.shownProblems = text;
    return settings;
  }

  /** The daemon that runs: configured, installed by the extension, or on PATH. */
  private daemon(): DaemonChoice {
    return chooseDaemon(this.settings, this.privateVenv, programSearch());
  }

  // -- the language client ---------------------------------------------------------------------

  async startServer(): Promise<void> {
    const gen = ++this.generation;
    this.cursor.reset();
    const { configured, located, missing } = this.daemon();
    this.launched = located;
    this.serverState = 'starting';
    this.lastStatus = undefined;
    this.indexingPercent = undefined;
    this.updateStatusBar();

    if (!located.ok) {
      this.serverState = missing ? 'missing' : 'failed';
      this.updateStatusBar();
      if (missing) this.offerInstall();
      else this.reportStartFailure(formatCommandLine(configured), located.error, configured.origin);
      return;
    }
    const launch = this.launch(located.line, configured.origin);
    const shown = formatLaunch(launch);

    this.log(`starting: ${shown} (in ${launch.cwd})`);
    // No `transport`: with TransportKind.stdio the client would append --stdio to the user's
    // command line, which a wrapper script may not accept. Stdio is what it uses anyway.
    const serverOptions: ServerOptions = { command: launch.command, args: launch.args, options: { cwd: launch.cwd, env: launch.env } };
    let died = false;
    const clientOptions: LanguageClientOptions = {
      documentSelector: SERVED_SCHEMES.map((scheme) => ({ scheme })),
      outputChannel: this.out,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: this.daemonOptions,
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
    // Replaces the client's own handler (registered before start, it is installed after it).
    c.onNotification(ShowMessageNotification.type, ({ type, message }) => this.showDaemonMessage(type, message));
    // The daemon says when its status changes (at most a few times a second): no polling.
    c.onNotification(STATUS_CHANGED_NOTIFICATION, (params: unknown) => {
      if (gen !== this.generation) return;
      this.lastStatus = parseDaemonStatus(params) ?? this.lastStatus;
      this.updateStatusBar();
    });
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
      this.reportStartFailure(shown, message(e), configured.origin);
      return;
    }
    if (gen !== this.generation) return;
    this.serverState = 'running';
    this.log(`server running: ${shown}`);
    this.watchIndexingProgress(c, gen);
    this.updateStatusBar();
    void this.requestStatus(); // in case the first notification came before the client was running
    this.cursor.moved(); // a new server knows no cursor: the one resting now, once it is quiet
  }

  /** What a cursor report looks at now: the active editor, as the client names its document. */
  private cursorState(): CursorState {
    const c = this.client;
    const editor = vscode.window.activeTextEditor;
    const doc = editor?.document;
    return {
      running: c?.state === State.Running,
      settings: this.settings,
      toggledOff: this.toggledOff,
      editor:
        c && editor && doc
          ? {
              uri: c.code2ProtocolConverter.asUri(doc.uri),
              scheme: doc.uri.scheme,
              languageId: doc.languageId,
              version: doc.version,
              selections: editor.selections,
            }
          : undefined,
    };
  }

  private sendCursor(params: CursorParams): void {
    const c = this.client;
    if (!c) return;
    c.sendNotification(CURSOR_NOTIFICATION, params).catch((e) => this.log(`${CURSOR_NOTIFICATION} failed: ${message(e)}`));
  }

  /** No request at all while completions are off. Requests go out at once: the daemon waits
   * debounceMs, and a newer request for the document replaces a waiting one. */
  private middleware(): Middleware {
    return {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const where = `${vscode.workspace.asRelativePath(document.uri)}:${position.line + 1}:${position.character + 1}`;
        if (!completionsEnabled(this.settings, this.toggledOff, document.languageId)) return undefined;
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
        }
      },
    };
  }

  private reportStartFailure(shown: string, reason: string, origin: Origin): void {
    const text = `Lookahead: could not start the server (${reason}). Command tried: ${shown}`;
    this.log(text);
    const installed = origin === 'installed';
    this.log(
      installed
        ? 'Run "Lookahead: Install or Update Daemon" to install the daemon again.'
        : 'Correct lookahead.serverCommand or lookahead.pythonPath (or clear both to use the daemon the extension installs), then run "Lookahead: Restart Server".',
    );
    const fix = installed ? 'Install Again' : 'Open Settings';
    void vscode.window.showErrorMessage(text, fix, 'Show Log').then((choice) => {
      if (choice === 'Install Again') void this.installDaemon();
      if (choice === 'Open Settings') openSettings(settingNamedIn(reason, this.declared));
      if (choice === 'Show Log') this.out.show(true);
    });
  }

  /** A message the daemon shows the user (window/showMessage), with a button to the setting it
   * names (e.g. lookahead.modelPath when no model could be loaded). */
  private showDaemonMessage(type: MessageType, text: string): void {
    const setting = settingNamedIn(text, this.declared);
    const buttons = setting ? [`Open ${setting}`] : [];
    const show =
      type === MessageType.Error
        ? vscode.window.showErrorMessage
        : type === MessageType.Warning
          ? vscode.window.showWarningMessage
          : vscode.window.showInformationMessage;
    void show(text, ...buttons).then((choice) => {
      if (choice) openSettings(setting);
    });
  }

  /** Nothing configured, installed or on PATH: offer to install the daemon. */
  private offerInstall(): void {
    const text =
      "Lookahead: no lookahead-lsp daemon found ('lookahead-lsp' not on PATH; lookahead.serverCommand and " +
      "lookahead.pythonPath unset). Install it into the extension's own Python environment? The first install " +
      'compiles llama.cpp (about 10 minutes).';
    this.log(`${text} It would run: pip install ${this.settings.installSpec} (lookahead.installSpec).`);
    void vscode.window.showWarningMessage(text, 'Install', 'Settings').then((choice) => {
      if (choice === 'Install') void this.installDaemon();
      if (choice === 'Settings') openSettings();
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
    this.cursor.reset();
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
    if (this.launched !== undefined && needsRestart(this.launched, this.daemon().located)) {
      this.log('server command changed; restarting');
      void this.restartServer();
    } else if (this.client?.state === State.Running) {
      this.client
        .sendNotification(DidChangeConfigurationNotification.type, configurationChangeParams(this.daemonOptions))
        .catch((e) => this.log(`didChangeConfiguration failed: ${message(e)}`));
    }
  }

  // -- status ------------------------------------------------------------------------------------

  private updateStatusBar(): void {
    const { text, tooltip } = formatStatusBar({
      server: this.installing ? 'installing' : this.serverState,
      enabled: this.settings.enable && !this.toggledOff,
      completing: this.inFlight > 0,
      indexingPercent: this.indexingPercent,
      status: this.lastStatus,
    });
    this.statusItem.text = text;
    this.statusItem.tooltip = tooltip;
    this.statusItem.command = this.serverState === 'missing' && !this.installing ? 'lookahead.installDaemon' : 'lookahead.menu';
  }

  /** The daemon's status now (the status bar otherwise follows its notifications). */
  private async requestStatus(): Promise<DaemonStatus | undefined> {
    const c = this.client;
    if (!c || c.state !== State.Running) return undefined;
    try {
      // The daemon wants params present: an empty object rather than none.
      this.lastStatus = parseDaemonStatus(await c.sendRequest<unknown>(STATUS_REQUEST, {}));
    } catch {
      // Not worth a message: the next notification brings the status.
      this.lastStatus = undefined;
    }
    this.updateStatusBar();
    return this.lastStatus;
  }

  // -- commands ----------------------------------------------------------------------------------

  private async showStatus(): Promise<void> {
    const status = await this.requestStatus();
    const body =
      status === undefined
        ? `(no answer: the server is ${this.serverState}; command: ${formatCommandLine(this.daemon().configured)})`
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
  }

  private runLogged(launch: Launch, token: vscode.CancellationToken): Promise<number> {
    return new Promise((resolve, reject) => {
      const child = cp.spawn(launch.command, launch.args, { cwd: launch.cwd, env: launch.env, stdio: ['ignore', 'pipe', 'pipe'] });
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
    const daemon = this.daemon();
    const configured = resolveBuildCacheCommand(this.settings, folder.uri.fsPath, daemon.configured);
    const located = locate(configured);
    if (daemon.missing) {
      this.offerInstall();
      return;
    }
    const unusable = located.ok ? ensureCacheFolder(cacheFolder(folder.uri.fsPath)) : located.error;
    if (!located.ok || unusable !== undefined) {
      const text = `Lookahead: cannot build the static cache (${unusable}). Command: ${formatCommandLine(configured)}`;
      this.log(text);
      void vscode.window.showErrorMessage(text);
      return;
    }
    const launch = this.launch(located.line, configured.origin);
    const shown = formatLaunch(launch);
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
        (_progress, token) => this.runLogged(launch, token),
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

  /** The status bar item's menu: the everyday commands, the toggle saying what it would do. */
  private async showMenu(): Promise<void> {
    const entries = menuEntries({ enable: this.settings.enable, toggledOff: this.toggledOff, modelPath: this.settings.modelPath });
    const chosen = await vscode.window.showQuickPick(
      entries.map((entry) => ({ label: entry.label, description: entry.description, iconPath: new vscode.ThemeIcon(entry.icon), entry })),
      { placeHolder: 'Lookahead' },
    );
    if (chosen) await vscode.commands.executeCommand(chosen.entry.command, ...(chosen.entry.args ?? []));
  }

  /** A subcommand of the daemon's program (line: built from the server's configured command
   * line), located and ready to start; undefined once the user was told why not (with no daemon
   * at all, the offer to install one). */
  private daemonLaunch(line: (server: ConfiguredCommand) => ConfiguredCommand, what: string): Launch | undefined {
    const daemon = this.daemon();
    if (daemon.missing) {
      this.offerInstall();
      return undefined;
    }
    const configured = line(daemon.configured);
    const located = locate(configured);
    if (!located.ok) {
      const error = located.error;
      const text = `Lookahead: cannot ${what} (${error}). Command: ${formatCommandLine(configured)}`;
      this.log(text);
      void vscode.window.showErrorMessage(text, 'Open Settings').then((c) => c && openSettings(settingNamedIn(error, this.declared)));
      return undefined;
    }
    return this.launch(located.line, configured.origin);
  }

  /** "Select Model": the daemon's catalogue (`models list --json`), the default model, or a file
   * of one's own; a model not downloaded yet is pulled first. The choice goes to the user
   * settings, and the daemon loads it on the configuration change. */
  private async selectModel(): Promise<void> {
    const list = this.daemonLaunch((server) => resolveModelsListCommand(this.settings, server), 'list the models');
    if (list === undefined) return;
    const current = this.settings.modelPath;
    type Item = vscode.QuickPickItem & { item: ModelPickItem };
    const toItems = (items: ModelPickItem[]): Item[] =>
      items.map((item) => ({
        label: item.label,
        description: item.description,
        detail: item.detail,
        iconPath: item.current ? new vscode.ThemeIcon('check') : undefined,
        item,
      }));
    const pick = vscode.window.createQuickPick<Item>();
    pick.title = 'Lookahead: Select Model';
    pick.placeholder = "Listing the daemon's models…";
    pick.matchOnDescription = true;
    pick.busy = true;
    // The default model and a file of one's own need no list: choosable while the CLI starts.
    pick.items = toItems(modelPickItems([], current));
    const abort = new AbortController();
    void this.listModels(list, abort.signal).then((listed) => {
      if (abort.signal.aborted) return;
      pick.busy = false;
      if (!listed.ok) {
        this.log(`listing the models failed: ${listed.error}`);
        pick.placeholder = 'The catalogue could not be listed (see the log): the default model or a .gguf file';
        void vscode.window.showErrorMessage(`Lookahead: could not list the models: ${listed.error}`);
        return;
      }
      pick.items = toItems(modelPickItems(listed.entries, current));
      pick.activeItems = pick.items.filter((i) => i.item.current);
      pick.placeholder = 'The model for completions (lookahead.modelPath, in your user settings)';
    });
    const chosen = await new Promise<ModelPickItem | undefined>((resolve) => {
      pick.onDidAccept(() => {
        resolve(pick.selectedItems[0]?.item);
        pick.hide();
      });
      pick.onDidHide(() => resolve(undefined));
      pick.show();
    });
    abort.abort(); // a list still running is not waited for
    pick.dispose();
    if (chosen) await this.useModel(chosen);
  }

  /** `models list --json`, run and read; a failure as one line, its last line of stderr. */
  private async listModels(launch: Launch, signal: AbortSignal): Promise<ModelList> {
    let lastError = '';
    const run = await runProcess(launch, {
      cwd: launch.cwd,
      env: launch.env,
      signal,
      timeoutMs: 60_000,
      stdoutChars: 1 << 20, // the whole list, however long a catalogue grows
      output: (line, from) => {
        if (from.stderr && line.trim() !== '') lastError = line.trim();
      },
    });
    if (run.cancelled) return { ok: false, error: 'cancelled' };
    if (run.code !== 0) {
      return { ok: false, error: `${formatLaunch(launch)} failed (status ${run.code}): ${lastError || lastLine(run.tail) || 'no output'}` };
    }
    return parseModelList(run.stdout);
  }

  private async useModel(item: ModelPickItem): Promise<void> {
    const choice = item.choice;
    if (choice.kind === 'default') {
      await this.setModelPath('', 'the default model');
      return;
    }
    if (choice.kind === 'file') {
      const current = this.settings.modelPath;
      // A path of a remote window's setting is one on the remote machine, not here.
      const start = vscode.env.remoteName === undefined && path.isAbsolute(current) ? { defaultUri: vscode.Uri.file(path.dirname(current)) } : {};
      const files = await vscode.window.showOpenDialog({
        ...start,
        canSelectFiles: true,
        canSelectFolders: false,
        canSelectMany: false,
        filters: { 'GGUF models': ['gguf'] },
        openLabel: 'Use Model',
        title: 'Lookahead: a GGUF model file',
      });
      const file = files?.[0];
      if (file) await this.setModelPath(file.fsPath, path.basename(file.fsPath));
      return;
    }
    const { entry } = choice;
    if (entry.installed === undefined) {
      const answer = await vscode.window.showInformationMessage(modelPullPrompt(entry), { modal: true }, 'Download');
      if (answer !== 'Download' || !(await this.pullModel(entry))) return;
    }
    await this.setModelPath(entry.name, entry.name);
  }

  /** `models pull NAME`, in a cancellable notification that shows what the CLI says as it says
   * it. Cancelling kills it; the partial download it keeps is resumed by the next pull. True
   * when the model is there. */
  private async pullModel(entry: ModelEntry): Promise<boolean> {
    const launch = this.daemonLaunch((server) => resolveModelsPullCommand(this.settings, entry.name, server), `download ${entry.name}`);
    if (launch === undefined) return false;
    const shown = formatLaunch(launch);
    this.log(`running: ${shown} (in ${launch.cwd})`);
    let lastError = '';
    const run = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Lookahead: downloading ${entry.name}`, cancellable: true },
      (progress, token) => {
        const abort = new AbortController();
        token.onCancellationRequested(() => abort.abort());
        return runProcess(launch, {
          cwd: launch.cwd,
          env: launch.env,
          signal: abort.signal,
          output: (line, from) => {
            const text = line.trim();
            if (text === '') return;
            // A progress bar redraws its line many times a second: the log keeps its last state.
            if (!from.redrawn) this.out.info(text);
            if (!from.stderr) return;
            lastError = text;
            progress.report({ message: text.slice(0, 160) });
          },
        });
      },
    );
    if (run.cancelled) {
      this.log(`downloading ${entry.name}: cancelled (a later pull resumes it)`);
      return false;
    }
    if (run.code !== 0) {
      const text = `Lookahead: downloading ${entry.name} failed: ${lastError || lastLine(run.tail) || `status ${run.code}`}`;
      this.log(`${text} (status ${run.code}; command: ${shown})`);
      void vscode.window.showErrorMessage(text, 'Show Log').then((c) => c && this.out.show(true));
      return false;
    }
    this.log(`${entry.name} downloaded: ${lastLine(run.stdout)}`);
    return true;
  }

  /** lookahead.modelPath in the user settings (empty: removed there, so the default counts). The
   * daemon is told through the configuration change that follows. */
  private async setModelPath(value: string, shown: string): Promise<void> {
    const config = vscode.workspace.getConfiguration('lookahead');
    try {
      await config.update('modelPath', value === '' ? undefined : value, vscode.ConfigurationTarget.Global);
    } catch (e) {
      const text = `Lookahead: could not set lookahead.modelPath in the user settings (${message(e)}).`;
      this.log(text);
      void vscode.window.showErrorMessage(text);
      return;
    }
    this.log(`lookahead.modelPath in the user settings: ${value === '' ? '(none: the default model)' : value}`);
    // A workspace's value counts before the user's (in a trusted workspace): say why nothing changes.
    const inspected = config.inspect<string>('modelPath');
    const overriding = inspected?.workspaceFolderValue ?? inspected?.workspaceValue;
    if (vscode.workspace.isTrusted && overriding !== undefined && overriding !== value) {
      const text = `Lookahead: ${shown} is set in your user settings, but this workspace sets lookahead.modelPath to '${overriding}', which counts first.`;
      void vscode.window.showWarningMessage(text, 'Open Settings').then((c) => c && openSettings('lookahead.modelPath'));
      return;
    }
    void vscode.window.setStatusBarMessage(`Lookahead: using ${shown}`, 5000);
  }

  /** "Install or Update Daemon": a fresh private environment with lookahead.installSpec, moved
   * into place when the daemon loads from it, then the server restarted on it. */
  private async installDaemon(): Promise<void> {
    if (this.installing) {
      void vscode.window.showInformationMessage('Lookahead: the daemon is being installed already.');
      return;
    }
    const spec = checkInstallSpec(this.settings.installSpec, os.homedir());
    if (!spec.ok) {
      this.log(spec.error);
      void vscode.window.showErrorMessage(`Lookahead: ${spec.error}.`, 'Open Settings').then((c) => c && openSettings('lookahead.installSpec'));
      return;
    }
    this.installing = true;
    this.updateStatusBar();
    try {
      await this.runInstall(spec.spec);
    } finally {
      this.installing = false;
      this.updateStatusBar();
    }
  }

  private async runInstall(spec: string): Promise<void> {
    const python = await findPython(programSearch(), this.cwd);
    if (!python.ok) {
      const text = `Lookahead: cannot install the daemon: ${python.error}. Install Python ${MIN_PYTHON.join('.')} or newer with its venv module, or set lookahead.serverCommand.`;
      this.log(text);
      void vscode.window.showErrorMessage(text, 'Open Settings').then((c) => c && openSettings());
      return;
    }
    this.log(`installing the daemon (${spec}) into ${this.privateVenv}, with ${python.python}`);
    this.log("pip's log follows. The first install compiles llama.cpp (about 10 minutes); pip keeps the wheel it builds in its cache, so later installs and updates reuse it.");
    let stoppedServer = false;
    const result = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: 'Lookahead: installing the daemon (the first install compiles llama.cpp, about 10 minutes)',
        cancellable: true,
      },
      (progress, token) => {
        const abort = new AbortController();
        token.onCancellationRequested(() => abort.abort());
        return installDaemon({
          python: python.python,
          storage: path.dirname(this.privateVenv),
          spec,
          verifyArgs: VERIFY_DAEMON_ARGS,
          cwd: this.cwd,
          output: (line) => {
            if (line.trim() === '') return;
            this.out.info(line);
            progress.report({ message: line.slice(0, 160) });
          },
          stage: (text) => progress.report({ message: text }),
          signal: abort.signal,
          // A daemon running from the environment being replaced is stopped first (Windows
          // cannot rename a folder a running program was started from).
          beforeSwap: async () => {
            if (this.launched?.ok && this.launched.line.command.startsWith(this.privateVenv)) {
              stoppedServer = true;
              await this.stopServer();
            }
          },
        });
      },
    );
    if (!result.ok) {
      if (stoppedServer) await this.restartServer();
      if (result.cancelled) {
        this.log('installing the daemon: cancelled; nothing was changed');
        return;
      }
      const text = `Lookahead: installing the daemon failed: ${result.error}`;
      this.log(text);
      void vscode.window.showErrorMessage(text, 'Show Log', 'Open Settings').then((c) => {
        if (c === 'Show Log') this.out.show(true);
        if (c === 'Open Settings') openSettings('lookahead.installSpec');
      });
      return;
    }
    this.log(`daemon installed: ${result.venv}`);
    const setting = this.daemon().configured.origin;
    if (setting === 'lookahead.serverCommand' || setting === 'lookahead.pythonPath') {
      void vscode.window
        .showInformationMessage(`Lookahead: daemon installed, but ${setting} is set and is what runs; clear it to use the installed one.`, 'Open Settings')
        .then((c) => c && openSettings(setting));
      if (stoppedServer) await this.restartServer();
      return;
    }
    void vscode.window.setStatusBarMessage('Lookahead: daemon installed', 5000);
    await this.restartServer();
  }
}

let extension: LookaheadExtension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const declared = declaredSettings(context.extension.packageJSON.contributes?.configuration?.properties ?? {});
  extension = new LookaheadExtension(context.globalStorageUri.fsPath, declared);
  context.subscriptions.push(extension, ...extension.commands());
  extension.log(`Lookahead ${context.extension.packageJSON.version ?? ''} activated`);
  void extension.startServer(); // not awaited: activation does not wait for the model to load
}

export async function deactivate(): Promise<void> {
  await extension?.stopServer();
  extension = undefined;
}
