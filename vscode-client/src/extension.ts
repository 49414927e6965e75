// The extension's entry points: activate makes its parts and wires them together, deactivate
// stops the server. Where each behaviour lives: commands.ts names the part behind every command.

import * as vscode from 'vscode';
import { StaticCacheBuild } from './cacheBuild';
import { DaemonClient } from './client';
import { registerCommands } from './commands';
import { Configuration } from './configuration';
import { DaemonInstall } from './daemonInstall';
import { ModelPicker } from './modelPicker';
import { Programs, prepareWorkingFolder } from './programs';
import { declaredSettings } from './settings';
import { StatusBar } from './statusBar';

let server: DaemonClient | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const declared = declaredSettings(context.extension.packageJSON.contributes?.configuration?.properties ?? {});
  const storage = context.globalStorageUri.fsPath;
  const out = vscode.window.createOutputChannel('Lookahead', { log: true });
  const cwd = prepareWorkingFolder(storage, out);
  const config = new Configuration(declared, out);
  const programs = new Programs(storage, cwd, config);
  // The server offers an install when it finds no daemon, and an install stops and restarts the
  // server: the server gets the offer as functions, first called once it is started (below).
  const client: DaemonClient = new DaemonClient(out, config, programs, {
    offerInstall: () => install.offerInstall(),
    installDaemon: () => install.installDaemon(),
  });
  const install = new DaemonInstall(context.extensionPath, out, config, programs, client);
  const statusBar = new StatusBar(config, client, install);
  const cacheBuild = new StaticCacheBuild(out, config, programs, client, install);
  const models = new ModelPicker(out, config, programs, install);
  context.subscriptions.push(client, statusBar, out, install, ...registerCommands({ out, server: client, install, statusBar, cacheBuild, models }));
  out.info(`Lookahead ${context.extension.packageJSON.version ?? ''} activated`);
  server = client;
  void client.startServer(); // not awaited: activation does not wait for the model to load
}

export async function deactivate(): Promise<void> {
  await server?.stopServer();
  server = undefined;
}
