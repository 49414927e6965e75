// The daemon's language client: the server process started, restarted after crashes (with a
// back-off) and stopped; what it is sent (settings, cursor reports, the editor's requests) and
// what it tells (status, indexing progress, messages), kept for the status bar.

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
import { Located, Origin, formatCommandLine, needsRestart } from './commandLines';
import { Configuration, openSettings } from './configuration';
import { CursorParams, CursorReporter, CursorState, SERVED_SCHEMES } from './cursorReports';
import { message } from './errors';
import { formatLaunch } from './launch';
import { Programs } from './programs';
import { RestartBackoff } from './restartBackoff';
import { completionsEnabled, configurationChangeParams, settingNamedIn } from './settings';
import { DaemonStatus, ServerState, StatusView, parseDaemonStatus } from './statusView';

const STATUS_REQUEST = 'lookahead/status';
const STATUS_CHANGED_NOTIFICATION = 'lookahead/statusChanged';
const REBUILD_INDEX_REQUEST = 'lookahead/rebuildIndex';
const CURSOR_NOTIFICATION = 'lookahead/cursor';

/** What the client asks of the install flow (daemonInstall.ts). */
export interface InstallOffer {
  /** Nothing configured, installed or on PATH: offer to install the daemon. */
  offerInstall(): void;
  installDaemon(): Promise<void>;
}

/** One language client at a time, replaced on restart. */
export class DaemonClient implements vscode.Disposable {
  private readonly backoff = new RestartBackoff(5, 1000);
  /** What the current server runs (or why it could not): a change restarts it. */
  private launched: Located | undefined;
  private client: LanguageClient | undefined;
  /** Bumped for every client started or stopped, so that events of an older one are ignored. */
  private generation = 0;
  private serverState: ServerState = 'stopped';
  /** Turned off by the toggle command (for this window). */
  private completionsOff = false;
  private inFlight = 0;
  private indexingPercent: number | undefined;
  private lastStatus: DaemonStatus | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  /** Where the cursor rests, for the daemon to evaluate the prompt there while the model idles. */
  private readonly cursor = new CursorReporter(
    () => this.cursorState(),
    (params) => this.sendCursor(params),
  );
  private readonly changes = new vscode.EventEmitter<void>();
  /** Fired when what statusView() shows changes. */
  readonly onDidChange = this.changes.event;

  constructor(
    private readonly out: vscode.LogOutputChannel,
    private readonly config: Configuration,
    private readonly programs: Programs,
    private readonly install: InstallOffer,
  ) {}

  dispose(): void {
    this.cursor.dispose();
    this.changes.dispose();
  }

  get toggledOff(): boolean {
    return this.completionsOff;
  }

  /** The status bar's view of the server (but for an install running, which daemonInstall.ts knows). */
  statusView(): StatusView {
    return {
      server: this.serverState,
      enabled: this.config.settings.enable && !this.completionsOff,
      completing: this.inFlight > 0,
      indexingPercent: this.indexingPercent,
      status: this.lastStatus,
    };
  }

  /** Whether the server runs a program inside folder. */
  runsFrom(folder: string): boolean {
    const l = this.launched;
    return l !== undefined && l.ok && l.line.command.startsWith(folder);
  }

  /** The selection or the active editor changed; jump: see CursorReporter.moved. */
  cursorMoved(jump: boolean): void {
    this.cursor.moved(jump);
  }

  async startServer(): Promise<void> {
    const gen = ++this.generation;
    this.cursor.reset();
    const { configured, located, missing } = this.programs.daemon();
    this.launched = located;
    this.serverState = 'starting';
    this.lastStatus = undefined;
    this.indexingPercent = undefined;
    this.changes.fire();

    if (!located.ok) {
      this.serverState = missing ? 'missing' : 'failed';
      this.changes.fire();
      if (missing) this.install.offerInstall();
      else this.reportStartFailure(formatCommandLine(configured), located.error, configured.origin);
      return;
    }
    const launch = this.programs.launch(located.line, configured.origin);
    const shown = formatLaunch(launch);

    this.out.info(`starting: ${shown} (in ${launch.cwd})`);
    // No `transport`: with TransportKind.stdio the client would append --stdio to the user's
    // command line, which a wrapper script may not accept. Stdio is what it uses anyway.
    const serverOptions: ServerOptions = { command: launch.command, args: launch.args, options: { cwd: launch.cwd, env: launch.env } };
    let died = false;
    const clientOptions: LanguageClientOptions = {
      documentSelector: SERVED_SCHEMES.map((scheme) => ({ scheme })),
      outputChannel: this.out,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: this.config.daemonOptions,
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
      this.changes.fire();
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
      this.changes.fire();
      this.reportStartFailure(shown, message(e), configured.origin);
      return;
    }
    if (gen !== this.generation) return;
    this.serverState = 'running';
    this.out.info(`server running: ${shown}`);
    this.watchIndexingProgress(c, gen);
    this.changes.fire();
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
      settings: this.config.settings,
      toggledOff: this.completionsOff,
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
    c.sendNotification(CURSOR_NOTIFICATION, params).catch((e) => this.out.info(`${CURSOR_NOTIFICATION} failed: ${message(e)}`));
  }

  /** No request at all while completions are off. Requests go out at once: the daemon waits
   * debounceMs, and a newer request for the document replaces a waiting one. */
  private middleware(): Middleware {
    return {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const where = `${vscode.workspace.asRelativePath(document.uri)}:${position.line + 1}:${position.character + 1}`;
        if (!completionsEnabled(this.config.settings, this.completionsOff, document.languageId)) return undefined;
        this.out.debug(`inline completion at ${where}: asking the server`);
        this.inFlight += 1;
        this.changes.fire();
        try {
          const answer = await next(document, position, context, token);
          const items = Array.isArray(answer) ? answer : (answer?.items ?? []);
          this.out.debug(`inline completion at ${where}: ${items.length} item(s)${token.isCancellationRequested ? ', too late' : ''}`);
          return answer;
        } finally {
          this.inFlight -= 1;
          this.changes.fire();
        }
      },
    };
  }

  private reportStartFailure(shown: string, reason: string, origin: Origin): void {
    const text = `Lookahead: could not start the server (${reason}). Command tried: ${shown}`;
    this.out.info(text);
    const installed = origin === 'installed';
    this.out.info(
      installed
        ? 'Run "Lookahead: Install or Update Daemon" to install the daemon again.'
        : 'Correct lookahead.serverCommand or lookahead.pythonPath (or clear both to use the daemon the extension installs), then run "Lookahead: Restart Server".',
    );
    const fix = installed ? 'Install Again' : 'Open Settings';
    void vscode.window.showErrorMessage(text, fix, 'Show Log').then((choice) => {
      if (choice === 'Install Again') void this.install.installDaemon();
      if (choice === 'Open Settings') openSettings(settingNamedIn(reason, this.config.declared));
      if (choice === 'Show Log') this.out.show(true);
    });
  }

  /** A message the daemon shows the user (window/showMessage), with a button to the setting it
   * names (e.g. lookahead.modelPath when no model could be loaded). */
  private showDaemonMessage(type: MessageType, text: string): void {
    const setting = settingNamedIn(text, this.config.declared);
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

  private onServerDied(gen: number, shown: string): void {
    if (gen !== this.generation) return;
    this.lastStatus = undefined;
    this.indexingPercent = undefined;
    const delay = this.backoff.crashed(Date.now());
    if (delay === undefined) {
      this.serverState = 'failed';
      this.changes.fire();
      const text = `Lookahead: the server stopped ${this.backoff.maxTries + 1} times in a row; not restarting it. Command: ${shown}`;
      this.out.info(text);
      void vscode.window.showErrorMessage(text, 'Restart', 'Show Log').then((choice) => {
        if (choice === 'Restart') void this.restartServer();
        if (choice === 'Show Log') this.out.show(true);
      });
      return;
    }
    this.serverState = 'starting';
    this.changes.fire();
    this.out.info(`server exited; restarting in ${delay / 1000} s (attempt ${this.backoff.attempts} of ${this.backoff.maxTries}): ${shown}`);
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
        this.changes.fire();
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
        this.out.info(`stopping the server: ${message(e)}`);
      }
    }
  }

  async restartServer(): Promise<void> {
    await this.stopServer();
    this.backoff.reset();
    await this.startServer();
  }

  /** The settings changed (or the workspace was trusted): read again, and the server restarted
   * when what it runs changed, else sent the daemon's share. */
  settingsChanged(): void {
    this.config.reload();
    this.changes.fire();
    if (this.launched !== undefined && needsRestart(this.launched, this.programs.daemon().located)) {
      this.out.info('server command changed; restarting');
      void this.restartServer();
    } else if (this.client?.state === State.Running) {
      this.client
        .sendNotification(DidChangeConfigurationNotification.type, configurationChangeParams(this.config.daemonOptions))
        .catch((e) => this.out.info(`didChangeConfiguration failed: ${message(e)}`));
    }
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
    this.changes.fire();
    return this.lastStatus;
  }

  async showStatus(): Promise<void> {
    const status = await this.requestStatus();
    const body =
      status === undefined
        ? `(no answer: the server is ${this.serverState}; command: ${formatCommandLine(this.programs.daemon().configured)})`
        : JSON.stringify(status, null, 2);
    this.out.info(`lookahead/status at ${new Date().toISOString()}:\n${body}`);
    this.out.show(true);
  }

  toggle(): void {
    this.completionsOff = !this.completionsOff;
    this.changes.fire();
    const on = completionsEnabled(this.config.settings, this.completionsOff, '');
    void vscode.window.setStatusBarMessage(`Lookahead inline completions ${on ? 'on' : 'off'}`, 3000);
  }

  async rebuildIndex(): Promise<void> {
    const c = this.client;
    if (!c || c.state !== State.Running) {
      void vscode.window.showWarningMessage(`Lookahead: the server is ${this.serverState}; nothing to rebuild.`);
      return;
    }
    this.out.info('rebuilding the workspace index');
    try {
      await c.sendRequest(REBUILD_INDEX_REQUEST, {});
    } catch (e) {
      this.out.info(`rebuilding the index failed: ${message(e)}`);
      void vscode.window.showErrorMessage(`Lookahead: rebuilding the index failed (${message(e)}).`);
    }
  }
}
