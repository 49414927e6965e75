// "Select Model": the daemon's catalogue listed (`models list`) in a picker, a model pulled
// (`models pull`) when it is not downloaded, and the choice written to lookahead.modelPath.

import * as path from 'path';
import * as vscode from 'vscode';
import { ConfiguredCommand, formatCommandLine, resolveModelsListCommand, resolveModelsPullCommand } from './commandLines';
import { Configuration, openSettings } from './configuration';
import { DaemonInstall } from './daemonInstall';
import { message } from './errors';
import { lastLine } from './install';
import { runProcess } from './installer';
import { Launch, formatLaunch } from './launch';
import { ModelEntry, ModelList, ModelPickItem, modelPickItems, modelPullPrompt, parseModelList } from './modelCatalogue';
import { Programs, locate } from './programs';
import { settingNamedIn } from './settings';

export class ModelPicker {
  constructor(
    private readonly out: vscode.LogOutputChannel,
    private readonly config: Configuration,
    private readonly programs: Programs,
    private readonly install: DaemonInstall,
  ) {}

  /** A subcommand of the daemon's program (line: built from the server's configured command
   * line), located and ready to start; undefined once the user was told why not (with no daemon
   * at all, the offer to install one). */
  private daemonLaunch(line: (server: ConfiguredCommand) => ConfiguredCommand, what: string): Launch | undefined {
    const daemon = this.programs.daemon();
    if (daemon.missing) {
      this.install.offerInstall();
      return undefined;
    }
    const configured = line(daemon.configured);
    const located = locate(configured);
    if (!located.ok) {
      const error = located.error;
      const text = `Lookahead: cannot ${what} (${error}). Command: ${formatCommandLine(configured)}`;
      this.out.info(text);
      void vscode.window.showErrorMessage(text, 'Open Settings').then((c) => c && openSettings(settingNamedIn(error, this.config.declared)));
      return undefined;
    }
    return this.programs.launch(located.line, configured.origin);
  }

  /** "Select Model": the daemon's catalogue (`models list --json`), the default model, or a file
   * of one's own; a model not downloaded yet is pulled first. The choice goes to the user
   * settings, and the daemon loads it on the configuration change. */
  async selectModel(): Promise<void> {
    const list = this.daemonLaunch((server) => resolveModelsListCommand(this.config.settings, server), 'list the models');
    if (list === undefined) return;
    const current = this.config.settings.modelPath;
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
        this.out.info(`listing the models failed: ${listed.error}`);
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
      const current = this.config.settings.modelPath;
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
    const launch = this.daemonLaunch((server) => resolveModelsPullCommand(this.config.settings, entry.name, server), `download ${entry.name}`);
    if (launch === undefined) return false;
    const shown = formatLaunch(launch);
    this.out.info(`running: ${shown} (in ${launch.cwd})`);
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
      this.out.info(`downloading ${entry.name}: cancelled (a later pull resumes it)`);
      return false;
    }
    if (run.code !== 0) {
      const text = `Lookahead: downloading ${entry.name} failed: ${lastError || lastLine(run.tail) || `status ${run.code}`}`;
      this.out.info(`${text} (status ${run.code}; command: ${shown})`);
      void vscode.window.showErrorMessage(text, 'Show Log').then((c) => c && this.out.show(true));
      return false;
    }
    this.out.info(`${entry.name} downloaded: ${lastLine(run.stdout)}`);
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
      this.out.info(text);
      void vscode.window.showErrorMessage(text);
      return;
    }
    this.out.info(`lookahead.modelPath in the user settings: ${value === '' ? '(none: the default model)' : value}`);
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
}
