// Where and how the extension starts its programs (the daemon, build-cache, the installer's
// Pythons), so that none imports anything from the folder it starts in or from the user's home.
// `python -m` and `python -c` put their working directory first on sys.path: a `secrets.py` or a
// `pathspec/` cloned into that folder would shadow the standard library or a dependency.
// No `vscode` import: tested under plain Node, with a real interpreter.

import * as fs from 'fs';
import * as path from 'path';
import { CommandLine, Origin, formatCommandLine } from './commandLines';

/** Python's isolated mode: neither the working directory nor a script's folder on sys.path, no
 * user site-packages, no PYTHON* variables (3.4 and newer; `-P` alone needs 3.11). For the
 * interpreters the extension makes or probes itself, whose environment is all they need. */
export const ISOLATED = '-I';

/** A program as child_process starts it: the command line, its working folder and environment. */
export interface Launch extends CommandLine {
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** The variables this launch sets on top of the extension host's environment (for the log). */
  setEnv: Readonly<Record<string, string>>;
}

/** The folder every program of the extension runs in: `<storage>/empty`, in the extension's
 * global storage, private to the user and holding nothing. */
export function workingFolder(storage: string): string {
  return path.join(storage, 'empty');
}

/** Makes `dir` (mode 0700) when it is missing and tightens it when others may write to it. A
 * link or a file there is refused: it could lead into a folder someone else fills. Returns why
 * it cannot be used, or undefined. */
export function ensureWorkingFolder(dir: string): string | undefined {
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const stat = fs.lstatSync(dir);
    if (!stat.isDirectory()) return `${dir} is not a folder (a link or a file)`;
    if (process.platform !== 'win32' && (stat.mode & 0o077) !== 0) fs.chmodSync(dir, 0o700);
    return undefined;
  } catch (e) {
    return `cannot use ${dir}: ${(e as Error).message}`;
  }
}

/** How a command line of this origin starts: in `cwd` (workingFolder's), with the environment
 * given. A `<pythonPath> -m lookahead_lsp` line also gets PYTHONSAFEPATH=1 (what `-P` does:
 * Python 3.11 and newer leave the working directory off sys.path; 3.10 ignores it, and then
 * finds only the empty folder there). Not `-I` for it: that interpreter may have the daemon
 * in its user site-packages or on PYTHONPATH. The installed daemon's line carries `-I` already
 * (resolveServerCommand), and serverCommand is run as the user wrote it: only its folder is
 * chosen here (a wrapper script may import modules beside it, which PYTHONSAFEPATH would hide). */
export function launchFor(line: CommandLine, origin: Origin, cwd: string, env: NodeJS.ProcessEnv): Launch {
  const setEnv: Record<string, string> = origin === 'lookahead.pythonPath' ? { PYTHONSAFEPATH: '1' } : {};
  return { command: line.command, args: [...line.args], cwd, env: { ...env, ...setEnv }, setEnv };
}

/** A launch as a shell line, with the variables it sets in front (for messages and the log). */
export function formatLaunch(l: Launch): string {
  const vars = Object.entries(l.setEnv).map(([k, v]) => `${k}=${v} `);
  return vars.join('') + formatCommandLine(l);
}
