// The daemon the extension installs for itself: which daemon runs, where the private one lives,
// and the command lines that make it. No `vscode` import and no processes: tested under plain Node.

import * as path from 'path';
import {
  CommandLine,
  ConfiguredCommand,
  DEFAULT_SETTINGS,
  Located,
  LookaheadSettings,
  ProgramSearch,
  expandHome,
  locateProgram,
  resolveServerCommand,
} from './logic';
import { ISOLATED } from './launch';

/** What `lookahead.installSpec` installs when it is empty: the daemon and its default model. */
export const DEFAULT_INSTALL_SPEC = DEFAULT_SETTINGS.installSpec;

/** The oldest Python the daemon supports (pyproject's requires-python). */
export const MIN_PYTHON: readonly [number, number] = [3, 10];

/** The private environment's folder inside the extension's global storage. */
export function privateVenvFolder(storage: string, platform: string = process.platform): string {
  return (platform === 'win32' ? path.win32 : path.posix).join(storage, 'daemon');
}

/** Where a virtual environment keeps its programs: bin/ on POSIX, Scripts\ with .exe on Windows. */
export function venvLayout(venv: string, platform: string = process.platform): { python: string; daemon: string } {
  if (platform === 'win32') {
    return { python: path.win32.join(venv, 'Scripts', 'python.exe'), daemon: path.win32.join(venv, 'Scripts', 'lookahead-lsp.exe') };
  }
  return { python: path.posix.join(venv, 'bin', 'python'), daemon: path.posix.join(venv, 'bin', 'lookahead-lsp') };
}

/** Which daemon runs, and whether to offer installing one. */
export interface DaemonChoice {
  configured: ConfiguredCommand;
  located: Located;
  /** Nothing configured, nothing installed, and `lookahead-lsp` not on PATH. */
  missing: boolean;
}

/** The daemon to run, first found of: serverCommand; pythonPath; the private environment the
 * extension installed (its Python, as `python -I -m lookahead_lsp`, which keeps working after the
 * environment was moved into place); `lookahead-lsp` on PATH. A broken serverCommand or
 * pythonPath is reported, not passed over: the user chose it. */
export function chooseDaemon(
  s: Pick<LookaheadSettings, 'serverCommand' | 'pythonPath'>,
  privateVenv: string,
  search: ProgramSearch,
): DaemonChoice {
  const python = venvLayout(privateVenv, search.platform ?? process.platform).python;
  const installed = s.serverCommand.length === 0 && s.pythonPath === '' && search.isExecutableFile(python);
  const configured = resolveServerCommand(s, installed ? python : undefined);
  const located = locateProgram(configured, search);
  return { configured, located, missing: configured.origin === 'default' && !located.ok };
}

/** lookahead.installSpec checked: a requirement (`lookahead-lsp[model]`, `lookahead-lsp==0.1.0`,
 * a URL) as it is; a path to a wheel or a source folder expanded (`~`) and required absolute,
 * since pip would resolve a relative one against the folder it happens to run in; anything
 * that starts with `-` refused, since pip would read it as an option. */
export function checkInstallSpec(
  value: string,
  home: string,
  platform: string = process.platform,
): { ok: true; spec: string } | { ok: false; error: string } {
  const spec = value.trim() === '' ? DEFAULT_INSTALL_SPEC : value.trim();
  if (spec.startsWith('-')) {
    return { ok: false, error: `lookahead.installSpec '${spec}' looks like a pip option; give a requirement or the path of a wheel` };
  }
  const url = /^[a-z][a-z0-9+.-]*:\/\//i.test(spec) || spec.includes(' @ ');
  const looksLikePath =
    spec.includes('/') || (platform === 'win32' && spec.includes('\\')) || spec.startsWith('~') || spec.startsWith('.') || /\.(whl|zip|tar\.gz)$/i.test(spec);
  if (url || !looksLikePath) return { ok: true, spec };
  const expanded = expandHome(spec, home, platform);
  if (!(platform === 'win32' ? path.win32 : path.posix).isAbsolute(expanded)) {
    return { ok: false, error: `lookahead.installSpec '${spec}' is a relative path; give an absolute one` };
  }
  return { ok: true, spec: expanded };
}

// The installer's Pythons all run isolated (launch.ts's ISOLATED): a module in the folder they
// start in, or in the user's site-packages, must not replace venv, pip or what they import.

/** `python -I -m venv FOLDER`. */
export function venvCommand(python: string, folder: string): CommandLine {
  return { command: python, args: [ISOLATED, '-m', 'venv', folder] };
}

/** pip inside the environment, one plain line per step (no progress bars, no questions, no
 * nagging about its own version). pip's wheel cache is left on: it keeps the llama.cpp wheel
 * it compiled, so a later install or update reuses it. */
export function pipInstallCommand(venvPython: string, spec: string): CommandLine {
  return {
    command: venvPython,
    args: [ISOLATED, '-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '--progress-bar', 'off', spec],
  };
}

/** Run with the environment's Python after pip (verifyCommand): fails unless the daemon, its
 * native core and llama.cpp load, so that an environment that could not run is never put in place. */
export const VERIFY_DAEMON_ARGS: readonly string[] = [
  '-c',
  'import lookahead_lsp, lookahead_lsp._lookup, llama_cpp; print("lookahead-lsp", lookahead_lsp.__version__, "loads")',
];

/** `python -I <verifyArgs>`: the check that the new environment loads, run isolated like pip. */
export function verifyCommand(venvPython: string, verifyArgs: readonly string[]): CommandLine {
  return { command: venvPython, args: [ISOLATED, ...verifyArgs] };
}

/** Interpreter names tried on PATH, in order: the system's own choice first, then the newest. */
export function pythonCandidates(platform: string = process.platform): string[] {
  if (platform === 'win32') return ['python', 'python3'];
  return ['python3', 'python', 'python3.14', 'python3.13', 'python3.12', 'python3.11', 'python3.10'];
}

/** Run by each candidate: its version, then whether it can make virtual environments (Debian
 * and Ubuntu ship ensurepip apart, in python3-venv). */
export const PYTHON_PROBE_ARGS: readonly string[] = [
  ISOLATED,
  '-c',
  'import sys; print("%d.%d" % sys.version_info[:2]); import ensurepip, venv; print("venv")',
];

export interface PythonProbe {
  version: [number, number];
  venv: boolean;
}

/** The probe's output read back; undefined when it is not a Python's. */
export function parsePythonProbe(stdout: string): PythonProbe | undefined {
  const lines = stdout.split(/\r?\n/).map((l) => l.trim());
  const version = /^(\d+)\.(\d+)$/.exec(lines[0] ?? '');
  if (!version) return undefined;
  return { version: [Number(version[1]), Number(version[2])], venv: lines[1] === 'venv' };
}

/** Why a probed interpreter cannot be used, or undefined when it can. output: the probe's last
 * line, shown when it did not answer (a Python 2 says `Unknown option: -I`). */
export function pythonUnusable(program: string, probe: PythonProbe | undefined, output = ''): string | undefined {
  if (probe === undefined) return `${program} did not run${output === '' ? '' : ` (${output})`}`;
  const [major, minor] = probe.version;
  const version = `${major}.${minor}`;
  if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
    return `${program} is Python ${version}, older than ${MIN_PYTHON.join('.')}`;
  }
  if (!probe.venv) return `${program} (Python ${version}) cannot create virtual environments (apt-get install python3-venv)`;
  return undefined;
}

/** Cuts a stream's chunks into lines for `emit`; `end()` hands over an unfinished last line.
 * redrawn: the line ended in a lone `\r`, as a progress bar's do when it draws itself again
 * (worth showing as it comes, not worth keeping in a log). */
export function lineSplitter(emit: (line: string, redrawn: boolean) => void): { push(chunk: string): void; end(): void } {
  let carry = '';
  return {
    push(chunk: string) {
      // With the separators kept: [line, separator, line, separator, ..., rest].
      const parts = (carry + chunk).split(/(\r\n|\n|\r)/);
      carry = parts.pop() ?? '';
      // A `\r` that ends the chunk may be the first half of a `\r\n` the next chunk completes.
      if (carry === '' && parts.at(-1) === '\r') {
        parts.pop();
        carry = `${parts.pop() ?? ''}\r`;
      }
      for (let i = 0; i + 1 < parts.length; i += 2) emit(parts[i], parts[i + 1] === '\r');
    },
    end() {
      if (carry.endsWith('\r')) emit(carry.slice(0, -1), true);
      else if (carry !== '') emit(carry, false);
      carry = '';
    },
  };
}

/** The last non-empty line of a process's output: what failed, as pip reports it. */
export function lastLine(output: string): string {
  const lines = output.split(/\r?\n/).map((l) => l.trimEnd()).filter((l) => l.trim() !== '');
  return lines.at(-1)?.trim() ?? '';
}
