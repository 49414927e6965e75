// The daemon's model catalogue (`models list --json`) and the model picker's items made from it.
// No `vscode` import: tested under plain Node.

import { isModelName } from './settings';

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
