// What the status bar item says (from the daemon's lookahead/status) and what its menu lists.
// No `vscode` import: tested under plain Node.

import { isModelName } from './settings';

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
