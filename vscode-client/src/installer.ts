// Installs the daemon into the extension's private virtual environment: find a Python, make the
// environment in a folder of its own, pip install, check that the daemon loads, then move it into
// place. Processes only, no `vscode` import: the extension adds the notification and the log.

import * as cp from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { CommandLine, ProgramSearch, formatCommandLine, locateProgram } from './commandLines';
import {
  DAEMON_DISTRIBUTION,
  INTERPRETER_PROBE_ARGS,
  Interpreter,
  MIN_PYTHON,
  PYTHON_PROBE_ARGS,
  PipStep,
  bundledRequirement,
  installPlan,
  lastLine,
  lineSplitter,
  parseInterpreterProbe,
  parsePythonProbe,
  parseWheelName,
  privateVenvFolder,
  pythonCandidates,
  pythonUnusable,
  venvCommand,
  venvLayout,
  verifyCommand,
} from './install';

/** Output kept for the error message: the end of it is what failed. */
const TAIL_CHARS = 16_384;
/** Leftovers of an install that was killed with the editor: no install takes a day. */
const STALE_MS = 24 * 3600 * 1000;

/** Where a line of output came from (lineSplitter says whether it is a progress bar's redraw). */
export interface LineSource {
  stderr: boolean;
  redrawn: boolean;
}

export interface RunOptions {
  /** The folder it runs in (the extension's: launch.ts's workingFolder, which holds nothing). */
  cwd: string;
  env?: NodeJS.ProcessEnv;
  /** Every line of stdout and stderr as it comes. */
  output?: (line: string, from: LineSource) => void;
  /** How much of stdout is kept for RunResult.stdout (TAIL_CHARS unless given). */
  stdoutChars?: number;
  signal?: AbortSignal;
  timeoutMs?: number;
}

export interface RunResult {
  /** The exit status; 127 when the program could not be started. */
  code: number;
  stdout: string;
  /** The end of stdout and stderr together. */
  tail: string;
  cancelled: boolean;
}

/** Runs a program to its end, stdin closed. */
export function runProcess(line: CommandLine, o: RunOptions): Promise<RunResult> {
  return new Promise((resolve) => {
    let stdout = '';
    let tail = '';
    let cancelled = false;
    const child = cp.spawn(line.command, line.args, { cwd: o.cwd, env: o.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const kill = () => {
      cancelled = true;
      child.kill();
    };
    const timer = o.timeoutMs === undefined ? undefined : setTimeout(() => child.kill(), o.timeoutMs);
    if (o.signal?.aborted) kill();
    o.signal?.addEventListener('abort', kill);
    const emit = (stderr: boolean) => (line: string, redrawn: boolean) => o.output?.(line, { stderr, redrawn });
    const streams = { stdout: lineSplitter(emit(false)), stderr: lineSplitter(emit(true)) };
    const take = (chunk: Buffer, isStdout: boolean) => {
      const text = chunk.toString();
      if (isStdout && stdout.length < (o.stdoutChars ?? TAIL_CHARS)) stdout += text;
      tail = (tail + text).slice(-TAIL_CHARS);
      streams[isStdout ? 'stdout' : 'stderr'].push(text);
    };
    child.stdout.on('data', (d: Buffer) => take(d, true));
    child.stderr.on('data', (d: Buffer) => take(d, false));
    const finish = (code: number) => {
      streams.stdout.end();
      streams.stderr.end();
      clearTimeout(timer);
      o.signal?.removeEventListener('abort', kill);
      resolve({ code, stdout, tail, cancelled });
    };
    child.on('error', (e) => {
      tail += `${e.message}\n`;
      finish(127);
    });
    child.on('close', (code, signal) => finish(code ?? (signal ? 128 : 1)));
  });
}

export type Found = { ok: true; python: string } | { ok: false; error: string };

/** The first interpreter on PATH (absolute entries only, by locateProgram's rules) that is
 * Python 3.10 or newer and can create virtual environments. */
export async function findPython(search: ProgramSearch, cwd: string): Promise<Found> {
  const tried = new Set<string>();
  const reasons: string[] = [];
  for (const name of pythonCandidates(search.platform ?? process.platform)) {
    const located = locateProgram({ command: name, args: [], origin: 'default' }, search);
    if (!located.ok || tried.has(located.line.command)) continue;
    const program = located.line.command;
    tried.add(program);
    const probe = await runProcess({ command: program, args: [...PYTHON_PROBE_ARGS] }, { cwd, env: search.env, timeoutMs: 30_000 });
    const why = pythonUnusable(program, parsePythonProbe(probe.stdout), lastLine(probe.tail));
    if (why === undefined) return { ok: true, python: program };
    reasons.push(why);
  }
  const found = reasons.length > 0 ? `: ${reasons.join('; ')}` : ' (none of python3, python on PATH)';
  return { ok: false, error: `no Python ${MIN_PYTHON.join('.')} or newer that can create virtual environments was found${found}` };
}

/** Whether `wheelhouse` holds a wheel of the daemon, as a platform build of the extension's does
 * (the universal build has no such folder): Install then takes about a minute, not the ten that
 * compiling llama.cpp takes. */
export function carriesDaemon(wheelhouse: string): boolean {
  try {
    return fs.readdirSync(wheelhouse).some((f) => parseWheelName(f)?.distribution === DAEMON_DISTRIBUTION);
  } catch {
    return false;
  }
}

export interface InstallOptions {
  /** The interpreter the environment is made from (findPython's). */
  python: string;
  /** The extension's global storage folder; the environment becomes `<storage>/daemon`. */
  storage: string;
  /** What pip installs (checkInstallSpec's). */
  spec: string;
  /** The extension's bundled wheels (install.ts's bundledWheelhouse; the folder may be missing,
   * as in the universal build): the daemon comes from there when the spec names it unpinned
   * and a wheel there suits the Python (installPlan). */
  wheelhouse?: string;
  /** Python arguments that must succeed in the new environment before it is put in place
   * (run isolated: verifyCommand). */
  verifyArgs: readonly string[];
  /** The folder the processes run in (launch.ts's workingFolder). */
  cwd: string;
  env?: NodeJS.ProcessEnv;
  platform?: string;
  /** Every line the processes write. */
  output: (line: string) => void;
  /** One line on what is being done. */
  stage: (text: string) => void;
  signal: AbortSignal;
  /** Called just before the environment is replaced (where a running daemon holds its files). */
  beforeSwap?: () => Promise<void>;
}

export type InstallResult =
  | {
      ok: true;
      venv: string;
      python: string;
      /** What an optional step could not install (the extras, offline), as logged. */
      warnings: string[];
    }
  | { ok: false; cancelled: boolean; error: string };

/** Makes a fresh environment beside the current one and moves it into place once the daemon
 * loads from it; a failed or cancelled install leaves the current one (or none) as it was. */
export async function installDaemon(o: InstallOptions): Promise<InstallResult> {
  const platform = o.platform ?? process.platform;
  await fs.promises.mkdir(o.storage, { recursive: true });
  await removeStale(o.storage);
  const partial = await fs.promises.mkdtemp(path.join(o.storage, 'daemon.partial-'));
  try {
    const python = venvLayout(partial, platform).python;
    let interpreter: Interpreter | undefined;
    let files: string[] = [];
    if (o.wheelhouse !== undefined && bundledRequirement(o.spec) !== undefined) {
      files = await fs.promises.readdir(o.wheelhouse).catch(() => []);
      if (files.length > 0) {
        const probe = await runProcess({ command: o.python, args: [...INTERPRETER_PROBE_ARGS] }, { cwd: o.cwd, env: o.env, signal: o.signal, timeoutMs: 30_000 });
        if (probe.cancelled) return { ok: false, cancelled: true, error: 'cancelled' };
        interpreter = parseInterpreterProbe(probe.stdout);
      }
    }
    const plan = installPlan(python, o.spec, interpreter, o.wheelhouse, files);
    if (plan.note !== undefined) o.output(plan.note);
    const steps: PipStep[] = [
      { stage: 'creating a Python environment', line: venvCommand(o.python, partial) },
      ...plan.steps,
      { stage: 'checking that the daemon loads', line: verifyCommand(python, o.verifyArgs) },
    ];
    const warnings: string[] = [];
    for (const { stage, line, optional } of steps) {
      o.stage(stage);
      o.output(`$ ${formatCommandLine(line)}`);
      const run = await runProcess(line, { cwd: o.cwd, env: o.env, output: o.output, signal: o.signal });
      if (run.cancelled) return { ok: false, cancelled: true, error: 'cancelled' };
      if (run.code !== 0 && optional !== undefined) {
        const warning = `${optional} (${stage} ended with status ${run.code}: ${lastLine(run.tail) || 'no output'})`;
        o.output(warning);
        warnings.push(warning);
      } else if (run.code !== 0) {
        return { ok: false, cancelled: false, error: `${stage} failed (status ${run.code}): ${lastLine(run.tail) || 'no output'}` };
      }
    }
    o.stage('moving the environment into place');
    await o.beforeSwap?.();
    const venv = await swapIntoPlace(partial, privateVenvFolder(o.storage, platform));
    return { ok: true, venv, python: venvLayout(venv, platform).python, warnings };
  } catch (e) {
    return { ok: false, cancelled: false, error: e instanceof Error ? e.message : String(e) };
  } finally {
    await fs.promises.rm(partial, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** Renames `ready` to `target`, the environment there before (if any) moved aside and removed.
 * The environment runs by `python -m`, which, unlike the scripts pip wrote, does not name the
 * folder it was made in. */
async function swapIntoPlace(ready: string, target: string): Promise<string> {
  const old = `${target}.old-${path.basename(ready).split('-').at(-1)}`;
  let movedAside = false;
  try {
    await fs.promises.rename(target, old);
    movedAside = true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  try {
    await fs.promises.rename(ready, target);
  } catch (e) {
    if (movedAside) await fs.promises.rename(old, target).catch(() => undefined);
    throw e;
  }
  if (movedAside) await fs.promises.rm(old, { recursive: true, force: true }).catch(() => undefined);
  return target;
}

/** Folders of installs that died with their editor, and old environments that could not be
 * removed at the time (a daemon of another window still held them). */
async function removeStale(storage: string): Promise<void> {
  for (const name of await fs.promises.readdir(storage)) {
    if (!/^daemon\.(partial|old)-/.test(name)) continue;
    const folder = path.join(storage, name);
    const stat = await fs.promises.lstat(folder).catch(() => undefined);
    if (stat && Date.now() - stat.mtimeMs > STALE_MS) {
      await fs.promises.rm(folder, { recursive: true, force: true }).catch(() => undefined);
    }
  }
}
