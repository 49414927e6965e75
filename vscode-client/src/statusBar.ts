// The status bar item, which mirrors the daemon (statusView.ts says what it shows), and the menu
// a click on it opens.

import * as vscode from 'vscode';
import { DaemonClient } from './client';
import { Configuration } from './configuration';
import { DaemonInstall } from './daemonInstall';
import { formatStatusBar, menuEntries } from './statusView';

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  private readonly subscriptions: vscode.Disposable[];

  constructor(
    private readonly config: Configuration,
    private readonly server: DaemonClient,
    private readonly install: DaemonInstall,
  ) {
    this.item.name = 'Lookahead';
    this.item.command = 'lookahead.menu';
    this.subscriptions = [server.onDidChange(() => this.update()), install.onDidChange(() => this.update())];
    this.update();
    this.item.show();
  }

  dispose(): void {
    for (const s of this.subscriptions) s.dispose();
    this.item.dispose();
  }

  private update(): void {
    const view = this.server.statusView();
    const installing = this.install.installing;
    const { text, tooltip } = formatStatusBar({ ...view, server: installing ? 'installing' : view.server });
    this.item.text = text;
    this.item.tooltip = tooltip;
    this.item.command = view.server === 'missing' && !installing ? 'lookahead.installDaemon' : 'lookahead.menu';
  }

  /** The status bar item's menu: the everyday commands, the toggle saying what it would do. */
  async showMenu(): Promise<void> {
    const entries = menuEntries({ enable: this.config.settings.enable, toggledOff: this.server.toggledOff, modelPath: this.config.settings.modelPath });
    const chosen = await vscode.window.showQuickPick(
      entries.map((entry) => ({ label: entry.label, description: entry.description, iconPath: new vscode.ThemeIcon(entry.icon), entry })),
      { placeHolder: 'Lookahead' },
    );
    if (chosen) await vscode.commands.executeCommand(chosen.entry.command, ...(chosen.entry.args ?? []));
  }
}
