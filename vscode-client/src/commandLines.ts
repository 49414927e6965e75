// The command lines of the daemon's program (serve, build-cache, models list and pull), how their
// program is found, and the folder build-cache writes to. No `vscode` import: tested under plain Node.

import * as fs from 'fs';
import * as path from 'path';
import { LookaheadSettings, expandHome, pathApi } from './settings';

/** Where a program or path came from, as the user would look it up in the settings. */
export type Origin = 'lookahead.serverCommand' | 'lookahead.pythonPath' | 'installed' | 'default';

export interface CommandLine {
  command: string;
  args: string[];
}

/** A command line as the settings give it, before its program is located. */
export interface ConfiguredCommand extends CommandLine {
  origin: Origin;
}

/** How the server is started: serverCommand as given; else `<pythonPath> -m lookahead_lsp serve`;
 * else, when the extension installed a daemon, `<its python> -I -m lookahead_lsp serve`; else
 * `lookahead-lsp serve` from PATH. The installed daemon runs in Python's isolated mode (`-I`: no
 * working directory on sys.path, no user site-packages, no PYTHON* variables), for nothing
 * outside its own environment belongs to it; a pythonPath interpreter may need its user
 * site-packages or PYTHONPATH, so it gets launch.ts's safer path instead. */
export function resolveServerCommand(
  s: Pick<LookaheadSettings, 'serverCommand' | 'pythonPath'>,
  installedPython?: string,
): ConfiguredCommand {
  if (s.serverCommand.length > 0) {
    return { command: s.serverCommand[0], args: s.serverCommand.slice(1), origin: 'lookahead.serverCommand' };
  }
  if (s.pythonPath !== '') {
    return { command: s.pythonPath, args: ['-m', 'lookahead_lsp', 'serve'], origin: 'lookahead.pythonPath' };
  }
  if (installedPython !== undefined) {
    return { command: installedPython, args: ['-I', '-m', 'lookahead_lsp', 'serve'], origin: 'installed' };
  }
  return { command: 'lookahead-lsp', args: ['serve'], origin: 'default' };
}

/** The `build-cache` invocation for a workspace folder, from the same program the server runs:
 * the server's command line up to its `serve` argument (so `python -m lookahead_lsp` stays), then
 * `build-cache <folder> -o <folder>/.lookahead/static.cache`, with the configured model's
 * tokenizer when one is set. */
export function resolveBuildCacheCommand(
  s: Pick<LookaheadSettings, 'serverCommand' | 'pythonPath' | 'modelPath'>,
  folder: string,
  server: ConfiguredCommand = resolveServerCommand(s),
): ConfiguredCommand & { output: string } {
  const output = path.join(cacheFolder(folder), 'static.cache');
  const args = ['build-cache', folder, '-o', output];
  if (s.modelPath !== '') {
    args.push('--model', s.modelPath);
  }
  return { ...daemonSubcommand(server, args), output };
}

/** `models list --json` of the program the server runs (as resolveBuildCacheCommand builds its
 * line): the catalogue parseModelList reads. */
export function resolveModelsListCommand(
  s: Pick<LookaheadSettings, 'serverCommand' | 'pythonPath'>,
  server: ConfiguredCommand = resolveServerCommand(s),
): ConfiguredCommand {
  return daemonSubcommand(server, ['models', 'list', '--json']);
}

/** `models pull NAME` of the program the server runs. name: a catalogue name as parseModelList
 * returns it (a plain name, never one that argparse would read as an option). */
export function resolveModelsPullCommand(
  s: Pick<LookaheadSettings, 'serverCommand' | 'pythonPath'>,
  name: string,
  server: ConfiguredCommand = resolveServerCommand(s),
): ConfiguredCommand {
  return daemonSubcommand(server, ['models', 'pull', name]);
}

/** Another subcommand of the server's program: its command line up to the `serve` argument, so
 * that `python -I -m lookahead_lsp` or a wrapper's own arguments stay, then `args`. */
function daemonSubcommand(server: ConfiguredCommand, args: readonly string[]): ConfiguredCommand {
  const serveAt = server.args.indexOf('serve');
  const base = serveAt >= 0 ? server.args.slice(0, serveAt) : [];
  return { command: server.command, args: [...base, ...args], origin: server.origin };
}

/** A command line as a user would type it into a shell (for messages and the log). */
export function formatCommandLine(c: CommandLine): string {
  return [c.command, ...c.args]
    .map((a) => (a === '' || /[\s"'\\$`]/.test(a) ? `'${a.replace(/'/g, `'\\''`)}'` : a))
    .join(' ');
}

// ---------------------------------------------------------------------------------------------
// Locating the program

/** What locating a program looks at. */
export interface ProgramSearch {
  env: { PATH?: string; PATHEXT?: string };
  home: string;
  isExecutableFile: (file: string) => boolean;
  /** Folders whose PATH entries are skipped: the workspace folders while the workspace is not
   * trusted, so that a program shipped in it never runs. */
  excludedFolders?: readonly string[];
  platform?: string;
}

export type Located = { ok: true; line: CommandLine } | { ok: false; error: string };

function isInside(p: path.PlatformPath, dir: string, folder: string): boolean {
  const rel = p.relative(p.resolve(folder), p.resolve(dir));
  return rel !== '..' && !rel.startsWith('..' + p.sep) && !p.isAbsolute(rel);
}

/** The command line with its program as an absolute path, so that nothing is looked up in the
 * folder the process starts in (an empty or relative PATH entry, or Windows' search of the
 * current folder, would find a program a repository ships). A path from a setting must be
 * absolute (after `~`); a bare name is searched on the absolute PATH entries outside the
 * excluded folders (with PATHEXT suffixes on Windows). */
export function locateProgram(c: ConfiguredCommand, search: ProgramSearch): Located {
  const platform = search.platform ?? process.platform;
  const p = pathApi(platform);
  const windows = platform === 'win32';
  const suffixes = windows ? ['', ...(search.env.PATHEXT ?? '.EXE;.CMD;.BAT;.COM').split(';').filter(Boolean)] : [''];
  const find = (base: string) => suffixes.map((x) => base + x).find(search.isExecutableFile);
  const found = (program: string): Located => ({ ok: true, line: { command: program, args: [...c.args] } });
  const from = c.origin === 'default' ? '' : c.origin === 'installed' ? 'the daemon the extension installed: ' : `${c.origin}: `;
  const command = expandHome(c.command, search.home, platform);
  if (p.isAbsolute(command)) {
    const program = find(p.normalize(command));
    return program ? found(program) : { ok: false, error: `${from}'${command}' is not an executable file` };
  }
  if (command.includes('/') || (windows && command.includes('\\'))) {
    return { ok: false, error: `${from}'${c.command}' is a relative path; give an absolute one` };
  }
  let skipped = 0;
  for (const dir of (search.env.PATH ?? '').split(windows ? ';' : ':')) {
    if (!p.isAbsolute(dir)) continue;
    if ((search.excludedFolders ?? []).some((f) => isInside(p, dir, f))) {
      skipped += 1;
      continue;
    }
    const program = find(p.join(dir, command));
    if (program) return found(program);
  }
  const note = skipped > 0 ? ` (${skipped} PATH entries inside the untrusted workspace were skipped)` : '';
  return { ok: false, error: `${from}'${command}' was not found on PATH${note}` };
}

/** Whether a settings change needs the server process restarted: what would be run changed
 * (or a program that was not found now is, or the other way round). */
export function needsRestart(before: Located, after: Located): boolean {
  const key = (l: Located) => (l.ok ? formatCommandLine(l.line) : l.error);
  return key(before) !== key(after);
}

// ---------------------------------------------------------------------------------------------
// The static cache folder

/** `<folder>/.lookahead`, where build-cache writes and the daemon looks for a static cache. */
export function cacheFolder(folder: string): string {
  return path.join(folder, '.lookahead');
}

/** Makes `dir` for build-cache's output when it is missing. Anything there but a real folder is
 * refused: a symbolic link planted in a repository would send the cache somewhere else.
 * Returns the reason it cannot be used, or undefined. */
export function ensureCacheFolder(dir: string): string | undefined {
  try {
    fs.mkdirSync(dir);
    return undefined;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') return `cannot create ${dir}: ${(e as Error).message}`;
  }
  const stat = fs.lstatSync(dir);
  return stat.isDirectory() ? undefined : `${dir} is not a folder (a link or a file); remove it and try again`;
}
