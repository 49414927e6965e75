// The lookahead.* settings as VS Code hands them out (settings.ts reads and checks them), and the
// one message on those refused.

import * as os from 'os';
import * as vscode from 'vscode';
import { LookaheadSettings, checkPathSettings, daemonOptions, readSettings, settingNamedIn } from './settings';

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

export function openSettings(query = 'lookahead.'): void {
  void vscode.commands.executeCommand('workbench.action.openSettings', query);
}

/** The settings as last read: at activation, then on every change (reload). */
export class Configuration {
  private current: LookaheadSettings;
  /** The daemon's settings, as initializationOptions and didChangeConfiguration send them. */
  private options: Record<string, unknown> = {};
  /** The refused settings last shown to the user, so that one message is shown once. */
  private shownProblems = '';

  /** declared: the settings package.json declares (declaredSettings). */
  constructor(
    readonly declared: readonly string[],
    private readonly out: vscode.LogOutputChannel,
  ) {
    this.current = this.load();
  }

  get settings(): LookaheadSettings {
    return this.current;
  }

  get daemonOptions(): Record<string, unknown> {
    return this.options;
  }

  reload(): void {
    this.current = this.load();
  }

  private load(): LookaheadSettings {
    const { settings, options, problems } = loadSettings(this.declared);
    this.options = options;
    const text = problems.join(' ');
    if (text !== '' && text !== this.shownProblems) {
      this.out.info(text);
      void vscode.window.showErrorMessage(`Lookahead: ${text}`, 'Open Settings').then((choice) => {
        if (choice) openSettings(settingNamedIn(text, this.declared));
      });
    }
    this.shownProblems = text;
    return settings;
  }
}
