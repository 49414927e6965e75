// What runs each command of package.json and each editor event the extension follows: every one
// hands over to the part that does the work.

import * as vscode from 'vscode';
import { StaticCacheBuild } from './cacheBuild';
import { DaemonClient } from './client';
import { DaemonInstall } from './daemonInstall';
import { ModelPicker } from './modelPicker';
import { StatusBar } from './statusBar';

export interface Parts {
  out: vscode.LogOutputChannel;
  server: DaemonClient;
  install: DaemonInstall;
  statusBar: StatusBar;
  cacheBuild: StaticCacheBuild;
  models: ModelPicker;
}

export function registerCommands({ out, server, install, statusBar, cacheBuild, models }: Parts): vscode.Disposable[] {
  return [
    vscode.commands.registerCommand('lookahead.toggle', () => server.toggle()),
    vscode.commands.registerCommand('lookahead.restart', () => server.restartServer()),
    vscode.commands.registerCommand('lookahead.rebuildIndex', () => server.rebuildIndex()),
    vscode.commands.registerCommand('lookahead.buildStaticCache', () => cacheBuild.buildStaticCache()),
    vscode.commands.registerCommand('lookahead.showLog', () => out.show(true)),
    vscode.commands.registerCommand('lookahead.showStatus', () => server.showStatus()),
    vscode.commands.registerCommand('lookahead.installDaemon', () => install.installDaemon()),
    vscode.commands.registerCommand('lookahead.menu', () => statusBar.showMenu()),
    vscode.commands.registerCommand('lookahead.selectModel', () => models.selectModel()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('lookahead')) server.settingsChanged();
    }),
    // Trust lets workspace values of the restricted settings and the PATH entries in the
    // workspace count.
    vscode.workspace.onDidGrantWorkspaceTrust(() => server.settingsChanged()),
    vscode.window.onDidChangeTextEditorSelection((e) => {
      const jump = e.kind === vscode.TextEditorSelectionChangeKind.Command;
      if (e.textEditor === vscode.window.activeTextEditor) server.cursorMoved(jump);
    }),
    vscode.window.onDidChangeActiveTextEditor(() => server.cursorMoved(true)),
  ];
}
