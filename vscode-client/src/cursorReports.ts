// Cursor reports: where the cursor rests, told to the daemon (lookahead/cursor) so that it evaluates
// the prompt there while the model idles. No `vscode` import: tested under plain Node.

import { LookaheadSettings, completionsEnabled } from './settings';

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

/** Tells the daemon where the cursor rests: delayMs after the last moved() (at once after a
 * jump), the report of read() at that moment, unless it is the one sent last (same place, same
 * document version), which the daemon has evaluated already. */
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

  /** The selection or the active editor changed: wait for quiet again. jump: another editor
   * became active, or a command put the cursor somewhere (go to definition, to a line); the
   * cursor lands where the user is about to look, and the prompt there is the longest to
   * evaluate (nothing of it is cached yet), so it is reported without the quiet time (on the
   * next tick, so that the events of one jump send one report). */
  moved(jump = false): void {
    if (this.disposed) return;
    this.cancel();
    this.timer = this.timers.setTimeout(
      () => {
        this.timer = undefined;
        this.report();
      },
      jump ? 0 : this.delayMs,
    );
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
