// Pure logic of the extension: no `vscode` import here, so it runs (and is tested) under plain Node.

import * as fs from 'fs';
import * as path from 'path';

/** The settings the extension itself reads. Every other `lookahead.*` setting of package.json
 * belongs to the daemon, which validates it: the extension forwards those as they are
 * (daemonOptions). modelPath and staticCachePath are read here too, to check them as paths. */
export interface LookaheadSettings {
  enable: boolean;
  serverCommand: string[];
  pythonPath: string;
  installSpec: string;
  modelPath: string;
  staticCachePath: string;
  disabledLanguages: string[];
}

/** The settings only the extension uses: never sent to the daemon. */
export const CLIENT_SETTINGS: readonly string[] = ['enable', 'serverCommand', 'pythonPath', 'installSpec'];

export const DEFAULT_SETTINGS: Readonly<LookaheadSettings> = Object.freeze({
  enable: true,
  serverCommand: [],
  pythonPath: '',
  installSpec: 'lookahead-lsp[model]',
  modelPath: '',
  staticCachePath: '',
  disabledLanguages: [],
});

function strings(value: unknown, fallback: string[]): string[] {
  return Array.isArray(value) && value.every((v) => typeof v === 'string') ? [...value] : [...fallback];
}

function text(value: unknown, fallback: string): string {
  return typeof value === 'string' ? value.trim() : fallback;
}

/** Settings from a getter (VS Code's WorkspaceConfiguration.get); a value of the wrong type
 * falls back to the default, so a hand-edited settings.json cannot break the extension. */
export function readSettings(get: (key: string) => unknown): LookaheadSettings {
  const d = DEFAULT_SETTINGS;
  return {
    enable: typeof get('enable') === 'boolean' ? (get('enable') as boolean) : d.enable,
    serverCommand: strings(get('serverCommand'), d.serverCommand).filter((s) => s !== ''),
    pythonPath: text(get('pythonPath'), d.pythonPath),
    installSpec: text(get('installSpec'), d.installSpec),
    modelPath: text(get('modelPath'), d.modelPath),
    staticCachePath: text(get('staticCachePath'), d.staticCachePath),
    disabledLanguages: strings(get('disabledLanguages'), d.disabledLanguages),
  };
}

/** The `lookahead.*` setting names package.json declares (its contributes.configuration
 * properties), without the prefix. */
export function declaredSettings(properties: Record<string, unknown>): string[] {
  return Object.keys(properties)
    .filter((key) => key.startsWith('lookahead.'))
    .map((key) => key.slice('lookahead.'.length));
}

// ---------------------------------------------------------------------------------------------
// Paths in settings

/** Where a program or path came from, as the user would look it up in the settings. */
export type Origin = 'lookahead.serverCommand' | 'lookahead.pythonPath' | 'installed' | 'default';

function pathApi(platform: string): path.PlatformPath {
  return platform === 'win32' ? path.win32 : path.posix;
}

/** `~` and `~/...` expanded against home, as a shell would; any other value as it is. */
export function expandHome(value: string, home: string, platform: string = process.platform): string {
  if (value === '~') return home;
  const rest = value.startsWith('~/') || (platform === 'win32' && value.startsWith('~\\')) ? value.slice(2) : undefined;
  return rest === undefined ? value : pathApi(platform).join(home, rest);
}

/** Whether a modelPath names a model of `lookahead-lsp models list` rather than a file: a bare
 * name, with no folder and no .gguf ending. */
export function isModelName(value: string): boolean {
  return value !== '' && !/[\\/]/.test(value) && !value.toLowerCase().endsWith('.gguf') && !value.startsWith('~');
}

/** modelPath and staticCachePath as the daemon gets them: `~` expanded, and a relative path
 * refused (reset to the default, with one message each). A relative path would be resolved
 * against the folder the daemon happens to run in, not one the user chose. A modelPath may
 * also be a model's name. */
export function checkPathSettings(
  s: LookaheadSettings,
  home: string,
  platform: string = process.platform,
): { settings: LookaheadSettings; problems: string[] } {
  const problems: string[] = [];
  const absolute = (key: 'modelPath' | 'staticCachePath'): string => {
    const value = expandHome(s[key], home, platform);
    if (value === '' || pathApi(platform).isAbsolute(value) || (key === 'modelPath' && isModelName(value))) return value;
    const allowed = key === 'modelPath' ? 'an absolute path or a name from `lookahead-lsp models list`' : 'an absolute path';
    problems.push(`lookahead.${key} must be ${allowed}, '${s[key]}' is relative; using the default instead.`);
    return DEFAULT_SETTINGS[key];
  };
  return { settings: { ...s, modelPath: absolute('modelPath'), staticCachePath: absolute('staticCachePath') }, problems };
}

// ---------------------------------------------------------------------------------------------
// Command lines

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

/** The `lookahead.*` setting a message names, as `lookahead.modelPath` or as the daemon's bare
 * camelCase key (`modelPath`), so that the message can open it; undefined when it names none.
 * keys: the declared settings (declaredSettings). */
export function settingNamedIn(text: string, keys: readonly string[]): string | undefined {
  const prefixed = /\blookahead\.([A-Za-z]+)\b/.exec(text)?.[1];
  if (prefixed !== undefined && keys.includes(prefixed)) return `lookahead.${prefixed}`;
  // Bare names only when camelCase: `threads` or `draft` are ordinary words in a message.
  const bare = keys.filter((k) => /[A-Z]/.test(k)).find((k) => new RegExp(`\\b${k}\\b`).test(text));
  return bare === undefined ? undefined : `lookahead.${bare}`;
}

/** Whether a settings change needs the server process restarted: what would be run changed
 * (or a program that was not found now is, or the other way round). */
export function needsRestart(before: Located, after: Located): boolean {
  const key = (l: Located) => (l.ok ? formatCommandLine(l.line) : l.error);
  return key(before) !== key(after);
}

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

// ---------------------------------------------------------------------------------------------
// Settings sent to the daemon

/** The daemon's settings object: every declared setting but the extension's own (CLIENT_SETTINGS),
 * with its value as the editor has it, for the daemon validates them and names any it refuses;
 * the paths as checkPathSettings left them, an empty one as null (the daemon's default). */
export function daemonOptions(
  keys: readonly string[],
  get: (key: string) => unknown,
  paths: Pick<LookaheadSettings, 'modelPath' | 'staticCachePath'>,
): Record<string, unknown> {
  const options: Record<string, unknown> = {};
  for (const key of keys) {
    if (CLIENT_SETTINGS.includes(key)) continue;
    const value = key === 'modelPath' || key === 'staticCachePath' ? paths[key] || null : get(key);
    if (value !== undefined) options[key] = value;
  }
  return options;
}

/** Params of workspace/didChangeConfiguration. */
export function configurationChangeParams(options: Record<string, unknown>): { settings: { lookahead: Record<string, unknown> } } {
  return { settings: { lookahead: options } };
}

// ---------------------------------------------------------------------------------------------
// Enablement

/** Whether to ask the server for inline completions in a document of this language. */
export function completionsEnabled(
  s: Pick<LookaheadSettings, 'enable' | 'disabledLanguages'>,
  toggledOff: boolean,
  languageId: string,
): boolean {
  return s.enable && !toggledOff && !s.disabledLanguages.includes(languageId);
}

// ---------------------------------------------------------------------------------------------
// Cursor reports

/** The URI schemes of the documents the language client serves (its documentSelector), so that
 * cursor reports name only documents the daemon was sent didOpen for. Unsaved editors too: the
 * daemon completes them from their text alone. */
export const SERVED_SCHEMES: readonly string[] = ['file', 'untitled'];

/** The quiet time after the last selection or active-editor change before the cursor is
 * reported: long enough that moving through a file or typing sends nothing. */
export const CURSOR_DELAY_MS = 250;

/** An LSP position: UTF-16 code units, as VS Code counts them too. */
export interface CursorPosition {
  line: number;
  character: number;
}

/** Params of the lookahead/cursor notification. */
export interface CursorParams {
  textDocument: { uri: string };
  position: CursorPosition;
}

/** What a cursor report looks at, read when the quiet time is over (so that the version and
 * the settings are those of that moment). VS Code's Selection fits `selections` as it is. */
export interface CursorState {
  /** The language client is running. */
  running: boolean;
  settings: Pick<LookaheadSettings, 'enable' | 'disabledLanguages'>;
  toggledOff: boolean;
  /** The active editor; undefined when there is none. */
  editor?: {
    /** As the client sends it in didOpen. */
    uri: string;
    scheme: string;
    languageId: string;
    version: number;
    selections: readonly { anchor: CursorPosition; active: CursorPosition }[];
  };
}

export interface CursorReport {
  params: CursorParams;
  version: number;
}

/** The report for the state, or undefined when there is none to send: no running client,
 * completions off for the document (the daemon would evaluate a prompt nobody asks to
 * complete), a document the client does not serve, or anything but one empty selection (a
 * selection or several cursors say the user is not about to type at one place). */
export function cursorReport(state: CursorState): CursorReport | undefined {
  const e = state.editor;
  if (!state.running || e === undefined || !SERVED_SCHEMES.includes(e.scheme)) return undefined;
  if (!completionsEnabled(state.settings, state.toggledOff, e.languageId)) return undefined;
  if (e.selections.length !== 1) return undefined;
  const { anchor, active } = e.selections[0];
  if (anchor.line !== active.line || anchor.character !== active.character) return undefined;
  return {
    params: { textDocument: { uri: e.uri }, position: { line: active.line, character: active.character } },
    version: e.version,
  };
}

/** setTimeout and clearTimeout, injectable so that tests run the clock. */
export interface Timers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const NODE_TIMERS: Timers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Tells the daemon where the cursor rests: delayMs after the last moved(), the report of
 * read() at that moment, unless it is the one sent last (same place, same document version),
 * which the daemon has evaluated already. */
export class CursorReporter {
  private timer: unknown;
  private last: CursorReport | undefined;
  private disposed = false;

  constructor(
    private readonly read: () => CursorState,
    private readonly send: (params: CursorParams) => void,
    readonly delayMs = CURSOR_DELAY_MS,
    private readonly timers: Timers = NODE_TIMERS,
  ) {}

  /** The selection or the active editor changed: wait for quiet again. */
  moved(): void {
    if (this.disposed) return;
    this.cancel();
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      this.report();
    }, this.delayMs);
  }

  /** The client stopped or is replaced: nothing waiting goes out, and the next server, which
   * knows no cursor yet, is told even of one that has not moved. */
  reset(): void {
    this.cancel();
    this.last = undefined;
  }

  dispose(): void {
    this.disposed = true;
    this.reset();
  }

  private cancel(): void {
    if (this.timer === undefined) return;
    this.timers.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private report(): void {
    const r = cursorReport(this.read());
    if (r === undefined) return;
    const l = this.last;
    const p = r.params.position;
    if (
      l !== undefined &&
      l.version === r.version &&
      l.params.textDocument.uri === r.params.textDocument.uri &&
      l.params.position.line === p.line &&
      l.params.position.character === p.character
    ) {
      return;
    }
    this.last = r;
    this.send(r.params);
  }
}

// ---------------------------------------------------------------------------------------------
// Restart back-off

/** Restarts after crashes: waits base, 2*base, 4*base, ... for at most maxTries crashes in a
 * row; a server that ran for stableMs before crashing starts the count again. */
export class RestartBackoff {
  private crashes = 0;
  private startedAt: number | undefined;

  constructor(
    readonly maxTries = 5,
    readonly baseMs = 1000,
    readonly stableMs = 60_000,
  ) {}

  /** The server was (re)started at `now`. */
  started(now: number): void {
    this.startedAt = now;
  }

  /** The server died at `now`: the delay before restarting it, or undefined to give up. */
  crashed(now: number): number | undefined {
    if (this.startedAt !== undefined && now - this.startedAt >= this.stableMs) {
      this.crashes = 0;
    }
    this.startedAt = undefined;
    if (this.crashes >= this.maxTries) {
      return undefined;
    }
    const delay = this.baseMs * 2 ** this.crashes;
    this.crashes += 1;
    return delay;
  }

  /** A restart by the user: forget earlier crashes. */
  reset(): void {
    this.crashes = 0;
    this.startedAt = undefined;
  }

  get attempts(): number {
    return this.crashes;
  }
}

// ---------------------------------------------------------------------------------------------
// Status bar

/** The statistics of the daemon's last completion (`last` in lookahead/status). */
export interface LastCompletion {
  tokens?: number;
  tokens_per_s?: number;
  accepted_by_source?: Record<string, number>;
  ms_total?: number;
  stop_reason?: string;
}

/** The parts of the daemon's `lookahead/status` answer the status bar uses. */
export interface DaemonStatus {
  version?: string;
  model?: string | null;
  model_state?: 'loading' | 'ready' | 'error';
  model_error?: string | null;
  index?: { files?: number; tokens?: number; ngrams?: number; state?: 'indexing' | 'ready' };
  draft?: string;
  last?: LastCompletion | null;
}

const MODEL_STATES: readonly unknown[] = ['loading', 'ready', 'error'];

/** The status in a `lookahead/status` answer or a `lookahead/statusChanged` notification (the
 * same object); undefined for anything else a peer might send, which leaves the status bar as
 * it was. */
export function parseDaemonStatus(value: unknown): DaemonStatus | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const status = value as Record<string, unknown>;
  if (!MODEL_STATES.includes(status.model_state)) return undefined;
  const index = status.index;
  if (index !== undefined && (typeof index !== 'object' || index === null || Array.isArray(index))) return undefined;
  return status as DaemonStatus;
}

/** `missing`: no daemon configured, installed or on PATH; `installing`: the extension installs one. */
export type ServerState = 'starting' | 'running' | 'stopped' | 'failed' | 'missing' | 'installing';

export interface StatusView {
  server: ServerState;
  enabled: boolean;
  completing: boolean;
  /** From the server's work-done progress, while a folder is being indexed. */
  indexingPercent?: number;
  status?: DaemonStatus;
}

/** Share of a completion's tokens that came from accepted draft tokens, 0..1. */
export function draftShare(last: LastCompletion): number {
  const tokens = last.tokens ?? 0;
  if (tokens <= 0) return 0;
  const accepted = Object.values(last.accepted_by_source ?? {}).reduce((a, b) => a + (Number(b) || 0), 0);
  return Math.min(1, accepted / tokens);
}

function formatLast(last: LastCompletion): string {
  const speed = Math.round(last.tokens_per_s ?? 0);
  const share = Math.round(100 * draftShare(last));
  return `${last.tokens ?? 0} tok · ${speed} tok/s · ${share}% drafted`;
}

/** Text and tooltip of the status bar item. */
export function formatStatusBar(v: StatusView): { text: string; tooltip: string } {
  const s = v.status;
  const click = 'Click for the Lookahead menu.';
  if (v.server === 'failed') {
    return { text: '$(error) Lookahead', tooltip: `The lookahead-lsp server is not running (see the log). ${click}` };
  }
  if (v.server === 'missing') {
    return { text: '$(cloud-download) Lookahead', tooltip: 'No lookahead-lsp daemon found. Click to install one (Lookahead: Install or Update Daemon).' };
  }
  if (v.server === 'installing') {
    return { text: '$(sync~spin) installing daemon', tooltip: 'Installing the lookahead-lsp daemon (its log: Lookahead: Show Log).' };
  }
  if (v.server === 'stopped') {
    return { text: '$(debug-stop) Lookahead', tooltip: 'The lookahead-lsp server is stopped.' };
  }
  if (v.server === 'starting') {
    return { text: '$(sync~spin) Lookahead', tooltip: 'Starting the lookahead-lsp server.' };
  }
  if (!v.enabled) {
    return { text: '$(circle-slash) Lookahead', tooltip: `Inline completions are off (Lookahead: Toggle). ${click}` };
  }
  if (v.completing) {
    return { text: '$(sync~spin) completing', tooltip: `Waiting for a completion. ${click}` };
  }
  if (v.indexingPercent !== undefined) {
    const pct = Math.max(0, Math.min(100, Math.round(v.indexingPercent)));
    return { text: `$(sync~spin) indexing ${pct}%`, tooltip: `Indexing the workspace. ${click}` };
  }
  if (s?.model_state === 'loading') {
    return { text: '$(sync~spin) loading model', tooltip: `Loading ${s.model ?? 'the model'}. ${click}` };
  }
  if (s?.index?.state === 'indexing') {
    return { text: '$(sync~spin) indexing', tooltip: `Indexing the workspace (${s.index.files ?? 0} files so far). ${click}` };
  }
  if (s?.model_state === 'error') {
    return {
      text: '$(warning) Lookahead',
      tooltip: `The model failed to load: ${s.model_error ?? 'unknown error'}. Set lookahead.modelPath to a GGUF file or a name from \`lookahead-lsp models list\`. ${click}`,
    };
  }
  if (s?.last && typeof s.last.tokens === 'number') {
    return {
      text: `$(zap) ${formatLast(s.last)}`,
      tooltip: `Last completion: ${formatLast(s.last)} (draft: ${s.draft ?? '?'}). ${click}`,
    };
  }
  return { text: '$(check) Lookahead', tooltip: `Lookahead is ready. ${click}` };
}

// ---------------------------------------------------------------------------------------------
// Models

/** A model of the daemon's catalogue, as `models list --json` describes it
 * (daemon/lookahead_lsp/commands/models.py). Only the name is required: the rest is shown. */
export interface ModelEntry {
  name: string;
  /** The file's approximate size (the Hub says the exact one when it is pulled). */
  approxGb?: number;
  /** Has fill-in-the-middle tokens: completions also see the code after the cursor. */
  fim?: boolean;
  licence?: string;
  /** fast, medium or slow on a CPU (from the size). */
  speed?: string;
  note?: string;
  /** How the model is there: 'pulled' (by `models pull`), 'package' (the default model's Python
   * package); undefined when it is not, and a pull downloads it. */
  installed?: string;
}

export type ModelList = { ok: true; entries: ModelEntry[] } | { ok: false; error: string };

const LIST_COMMAND = '`lookahead-lsp models list --json`';

/** A catalogue name that can go on a command line and into modelPath as it is: isModelName's
 * bare name, and nothing argparse would read as an option. */
const CATALOGUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;

function oneLine(text: string, max = 80): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** One entry of the list, or what is wrong with it. A display field of the wrong type is left
 * out rather than refused: the list stays usable with a daemon that changed one. */
function modelEntry(item: unknown): ModelEntry | string {
  if (typeof item !== 'object' || item === null || Array.isArray(item)) return `is ${kindOf(item)}, not an object`;
  const o = item as Record<string, unknown>;
  const name = o.name;
  if (typeof name !== 'string' || !CATALOGUE_NAME.test(name) || !isModelName(name)) {
    return `has no usable name (${typeof name === 'string' ? `'${oneLine(name, 40)}'` : kindOf(name)})`;
  }
  // A string says how the model is there, null that it is not; without `installed`, `downloaded`
  // (pulled or not) is all there is to go by.
  const missing = o.installed === null || o.installed === undefined || o.installed === false || o.installed === '';
  if (!missing && typeof o.installed !== 'string' && o.installed !== true) {
    return `(${name}) does not say whether it is installed (installed is ${kindOf(o.installed)})`;
  }
  const installed = missing ? (o.downloaded === true ? 'pulled' : undefined) : o.installed === true ? 'pulled' : (o.installed as string);
  const str = (v: unknown) => (typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined);
  return {
    name,
    approxGb: typeof o.approx_gb === 'number' && Number.isFinite(o.approx_gb) && o.approx_gb > 0 ? o.approx_gb : undefined,
    fim: typeof o.fim === 'boolean' ? o.fim : undefined,
    licence: str(o.licence),
    speed: str(o.speed),
    note: str(o.note),
    installed,
  };
}

/** The catalogue in the output of `models list --json`, or one line on what is wrong with it
 * (an older daemon, or a serverCommand wrapper that prints something of its own first: the last
 * line is tried when the whole output is no JSON). Never throws: the text comes from a program. */
export function parseModelList(stdout: string): ModelList {
  const printed = stdout.trim();
  if (printed === '') return { ok: false, error: `${LIST_COMMAND} printed nothing` };
  let value: unknown;
  try {
    value = JSON.parse(printed);
  } catch (e) {
    try {
      value = JSON.parse(printed.split(/\r?\n/).at(-1) ?? '');
    } catch {
      return { ok: false, error: `${LIST_COMMAND} printed no JSON (${oneLine((e as Error).message, 60)}): ${oneLine(printed)}` };
    }
  }
  if (!Array.isArray(value)) return { ok: false, error: `${LIST_COMMAND} printed ${kindOf(value)}, not a list of models` };
  const entries: ModelEntry[] = [];
  for (const [i, item] of value.entries()) {
    const entry = modelEntry(item);
    if (typeof entry === 'string') return { ok: false, error: `entry ${i + 1} of ${LIST_COMMAND} ${entry}` };
    if (!entries.some((e) => e.name === entry.name)) entries.push(entry);
  }
  return { ok: true, entries };
}

/** As `models list` writes it: two significant digits. */
export function formatModelSize(gb: number): string {
  return `${Number(gb.toPrecision(2))} GB`;
}

function installedText(installed: string | undefined): string {
  if (installed === undefined) return 'not installed';
  if (installed === 'pulled') return 'installed';
  return installed === 'package' ? 'installed (Python package)' : `installed (${installed})`;
}

export type ModelChoice = { kind: 'default' } | { kind: 'file' } | { kind: 'model'; entry: ModelEntry };

/** An item of the model picker (a QuickPickItem with what choosing it means). */
export interface ModelPickItem {
  label: string;
  description: string;
  detail?: string;
  /** What lookahead.modelPath names now. */
  current: boolean;
  choice: ModelChoice;
}

export const DEFAULT_MODEL_LABEL = 'Default model';
export const CHOOSE_FILE_LABEL = 'Choose a .gguf file...';

/** The model picker: the default model, the catalogue in its order, then a file of one's own.
 * current: lookahead.modelPath as checkPathSettings left it; a value that is neither empty nor a
 * listed name is a file (or a name this daemon does not list), shown on the file item. */
export function modelPickItems(entries: readonly ModelEntry[], current: string): ModelPickItem[] {
  const join = (parts: (string | undefined)[], isCurrent: boolean) =>
    [...parts, isCurrent ? 'current' : undefined].filter((p): p is string => p !== undefined && p !== '').join(' · ');
  const items: ModelPickItem[] = [
    {
      label: DEFAULT_MODEL_LABEL,
      description: join(["the daemon's own (lookahead.modelPath empty)"], current === ''),
      current: current === '',
      choice: { kind: 'default' },
    },
  ];
  for (const entry of entries) {
    const isCurrent = entry.name === current;
    const size = entry.approxGb === undefined ? undefined : formatModelSize(entry.approxGb);
    const fim = entry.fim === undefined ? undefined : entry.fim ? 'FIM' : 'no FIM';
    const detail = [entry.speed && `${entry.speed} on a CPU`, entry.licence, entry.note].filter(Boolean).join(' · ');
    items.push({
      label: entry.name,
      description: join([size, fim, installedText(entry.installed)], isCurrent),
      detail: detail === '' ? undefined : detail,
      current: isCurrent,
      choice: { kind: 'model', entry },
    });
  }
  const ownFile = current !== '' && !entries.some((e) => e.name === current);
  items.push({
    label: CHOOSE_FILE_LABEL,
    description: ownFile ? join([current], true) : 'a GGUF model file on this machine',
    current: ownFile,
    choice: { kind: 'file' },
  });
  return items;
}

/** The question before a pull: what is downloaded, how big, under which licence. */
export function modelPullPrompt(entry: ModelEntry): string {
  const about = [entry.approxGb === undefined ? undefined : `about ${formatModelSize(entry.approxGb)}`, entry.licence]
    .filter(Boolean)
    .join(', ');
  return `Lookahead: ${entry.name} is not downloaded yet. Download it${about === '' ? '' : ` (${about})`} from the Hugging Face Hub and use it?`;
}

// ---------------------------------------------------------------------------------------------
// Status bar menu

export interface MenuState {
  /** lookahead.enable. */
  enable: boolean;
  /** Turned off by the toggle command (for this window). */
  toggledOff: boolean;
  /** lookahead.modelPath as checkPathSettings left it. */
  modelPath: string;
}

/** An entry of the status bar menu: the command it runs. */
export interface MenuEntry {
  label: string;
  /** A codicon name. */
  icon: string;
  command: string;
  args?: unknown[];
  description?: string;
}

/** What the menu says of a modelPath: a file by its name alone (the picker shows the path). */
function modelShown(modelPath: string): string {
  if (modelPath === '') return 'default model';
  return isModelName(modelPath) ? modelPath : (modelPath.split(/[\\/]/).at(-1) ?? modelPath);
}

/** The status bar menu. The toggle says what choosing it does; with lookahead.enable off, the
 * toggle would change nothing, so the entry opens that setting instead. */
export function menuEntries(s: MenuState): MenuEntry[] {
  const on = s.enable && !s.toggledOff;
  const toggle: MenuEntry = on
    ? { label: 'Disable Inline Completions', icon: 'circle-slash', command: 'lookahead.toggle', description: 'in this window' }
    : s.enable
      ? { label: 'Enable Inline Completions', icon: 'check', command: 'lookahead.toggle' }
      : {
          label: 'Enable Inline Completions',
          icon: 'check',
          command: 'workbench.action.openSettings',
          args: ['lookahead.enable'],
          description: 'lookahead.enable is off in the settings',
        };
  return [
    toggle,
    { label: 'Select Model...', icon: 'library', command: 'lookahead.selectModel', description: modelShown(s.modelPath) },
    { label: 'Rebuild Workspace Index', icon: 'refresh', command: 'lookahead.rebuildIndex' },
    { label: 'Show Log', icon: 'output', command: 'lookahead.showLog' },
    { label: 'Show Server Status', icon: 'info', command: 'lookahead.showStatus' },
    { label: 'Restart Server', icon: 'debug-restart', command: 'lookahead.restart' },
  ];
}
