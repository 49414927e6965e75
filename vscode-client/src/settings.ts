// The lookahead.* settings: read and checked as VS Code hands them out, the share of them the daemon
// gets, and whether completions are on. No `vscode` import: tested under plain Node.

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

/** Windows' path rules or POSIX's: platform is a parameter so that tests try both on any machine. */
export function pathApi(platform: string): path.PlatformPath {
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
// Settings named in messages

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
