// "Build Static Cache for Workspace": build-cache run on a workspace folder, its output in the log,
// and the server restarted to use the cache.

import * as cp from 'child_process';
import * as vscode from 'vscode';
import { DaemonClient } from './client';
import { cacheFolder, ensureCacheFolder, formatCommandLine, resolveBuildCacheCommand } from './commandLines';
import { Configuration } from './configuration';
import { DaemonInstall } from './daemonInstall';
import { message } from './errors';
import { Launch, formatLaunch } from './launch';
import { Programs, locate } from './programs';

export class StaticCacheBuild {
  constructor(
    private readonly out: vscode.LogOutputChannel,
    private readonly config: Configuration,
    private readonly programs: Programs,
    private readonly server: DaemonClient,
    private readonly install: DaemonInstall,
  ) {}

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

  async buildStaticCache(): Promise<void> {
    const folders = vscode.workspace.workspaceFolders?.filter((f) => f.uri.scheme === 'file') ?? [];
    if (folders.length === 0) {
      void vscode.window.showWarningMessage('Lookahead: open a folder to build its static cache.');
      return;
    }
    const folder =
      folders.length === 1 ? folders[0] : await vscode.window.showWorkspaceFolderPick({ placeHolder: 'Folder to index' });
    if (!folder) return;
    const daemon = this.programs.daemon();
    const configured = resolveBuildCacheCommand(this.config.settings, folder.uri.fsPath, daemon.configured);
    const located = locate(configured);
    if (daemon.missing) {
      this.install.offerInstall();
      return;
    }
    const unusable = located.ok ? ensureCacheFolder(cacheFolder(folder.uri.fsPath)) : located.error;
    if (!located.ok || unusable !== undefined) {
      const text = `Lookahead: cannot build the static cache (${unusable}). Command: ${formatCommandLine(configured)}`;
      this.out.info(text);
      void vscode.window.showErrorMessage(text);
      return;
    }
    const launch = this.programs.launch(located.line, configured.origin);
    const shown = formatLaunch(launch);
    this.out.show(true);
    this.out.info(`running: ${shown}`);
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
      this.out.info(`build-cache could not run (${message(e)}): ${shown}`);
      void vscode.window.showErrorMessage(`Lookahead: could not run ${shown} (${message(e)})`);
      return;
    }
    if (code !== 0) {
      this.out.info(`build-cache exited with status ${code}: ${shown}`);
      const choice = await vscode.window.showErrorMessage(
        `Lookahead: building the static cache failed (status ${code}). Command: ${shown}`,
        'Show Log',
      );
      if (choice) this.out.show(true);
      return;
    }
    this.out.info(`static cache written: ${configured.output}`);
    const choice = await vscode.window.showInformationMessage(
      `Lookahead: static cache written to ${configured.output}. Restart the server to use it?`,
      'Restart',
    );
    if (choice === 'Restart') await this.server.restartServer();
  }
}
