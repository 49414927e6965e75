// Which daemon runs and where and how the extension starts its programs, as this window has it:
// the workspace's trust and folders decide where programs are looked for (install.ts's
// chooseDaemon, launch.ts's launchFor).

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import { CommandLine, ConfiguredCommand, Located, Origin, ProgramSearch, locateProgram } from './commandLines';
import { Configuration } from './configuration';
import { DaemonChoice, chooseDaemon, privateVenvFolder } from './install';
import { Launch, ensureWorkingFolder, launchFor, workingFolder } from './launch';

function isExecutableFile(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) return false;
    if (process.platform !== 'win32') fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Where programs are looked for. Programs in the workspace's folders are not looked for on PATH
 * until the user trusts the workspace. */
export function programSearch(): ProgramSearch {
  const folders = vscode.workspace.isTrusted ? [] : (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  return { env: process.env, home: os.homedir(), isExecutableFile, excludedFolders: folders };
}

/** The command line with its program as an absolute path (or why there is none). */
export function locate(line: ConfiguredCommand): Located {
  return locateProgram(line, programSearch());
}

/** workingFolder(storage), or, when it cannot be made, a fresh private folder of the system's
 * temporary folder (never the temporary folder itself: anyone may write there). */
export function prepareWorkingFolder(storage: string, out: vscode.LogOutputChannel): string {
  const dir = workingFolder(storage);
  const problem = ensureWorkingFolder(dir);
  if (problem === undefined) return dir;
  const fallback = fs.mkdtempSync(path.join(os.tmpdir(), 'lookahead-'));
  out.info(`${problem}; programs run in ${fallback} instead`);
  return fallback;
}

export class Programs {
  /** The environment the extension installs the daemon into. */
  readonly privateVenv: string;

  /** storage: the extension's global storage folder. */
  constructor(
    storage: string,
    /** Where every program of the extension runs (launch.ts; prepareWorkingFolder's): never a
     * workspace folder nor the home folder, where `python -m` would import whatever modules lie
     * there. Arguments carry absolute paths. */
    readonly cwd: string,
    private readonly config: Configuration,
  ) {
    this.privateVenv = privateVenvFolder(storage);
  }

  /** The daemon that runs: configured, installed by the extension, or on PATH. */
  daemon(): DaemonChoice {
    return chooseDaemon(this.config.settings, this.privateVenv, programSearch());
  }

  /** How a command line of this origin starts (launch.ts). */
  launch(line: CommandLine, origin: Origin): Launch {
    return launchFor(line, origin, this.cwd, process.env);
  }
}
