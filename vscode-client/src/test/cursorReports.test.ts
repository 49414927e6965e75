import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CURSOR_DELAY_MS,
  CursorParams,
  CursorReporter,
  CursorState,
  SERVED_SCHEMES,
  Timers,
  cursorReport,
} from '../cursorReports';
import { settings } from './fixtures';

/** Timers run by hand: advance(ms) fires what falls due, in order. */
class FakeTimers implements Timers {
  now = 0;
  private next = 0;
  private readonly due = new Map<number, { at: number; callback: () => void }>();

  setTimeout(callback: () => void, ms: number): unknown {
    this.next += 1;
    this.due.set(this.next, { at: this.now + ms, callback });
    return this.next;
  }

  clearTimeout(handle: unknown): void {
    this.due.delete(handle as number);
  }

  get pending(): number {
    return this.due.size;
  }

  advance(ms: number): void {
    const end = this.now + ms;
    const first = () => [...this.due].sort(([, a], [, b]) => a.at - b.at).find(([, t]) => t.at <= end);
    for (let f = first(); f !== undefined; f = first()) {
      const [id, t] = f;
      this.due.delete(id);
      this.now = t.at;
      t.callback();
    }
    this.now = end;
  }
}

describe('cursor reports', () => {
  const cursorAt = (line: number, character: number) => ({ anchor: { line, character }, active: { line, character } });
  const editor = (overrides: Partial<NonNullable<CursorState['editor']>> = {}): NonNullable<CursorState['editor']> => ({
    uri: 'file:///ws/a.py',
    scheme: 'file',
    languageId: 'python',
    version: 1,
    selections: [cursorAt(3, 4)],
    ...overrides,
  });
  const state = (overrides: Partial<CursorState> = {}): CursorState => ({
    running: true,
    settings: settings(),
    toggledOff: false,
    editor: editor(),
    ...overrides,
  });
  /** A reporter over a state the test changes, with what it sent. */
  const setup = (initial: CursorState = state()) => {
    const timers = new FakeTimers();
    const sent: CursorParams[] = [];
    const world = { state: initial };
    const reporter = new CursorReporter(() => world.state, (p) => sent.push(p), CURSOR_DELAY_MS, timers);
    /** The state changes as a selection or active-editor event would say. */
    const move = (s: CursorState) => {
      world.state = s;
      reporter.moved();
    };
    return { timers, sent, world, reporter, move };
  };
  const at = (line: number, character: number, uri = 'file:///ws/a.py'): CursorParams => ({ textDocument: { uri }, position: { line, character } });

  it('sends the resting cursor as lookahead/cursor params', () => {
    assert.equal(CURSOR_DELAY_MS, 250);
    assert.deepEqual(cursorReport(state()), { params: at(3, 4), version: 1 });
  });

  it('sends only the last position, once the selection was unchanged for 250 ms', () => {
    const { timers, sent, move } = setup();
    move(state({ editor: editor({ selections: [cursorAt(1, 0)] }) }));
    timers.advance(200);
    move(state({ editor: editor({ selections: [cursorAt(1, 1)] }) }));
    timers.advance(200);
    move(state({ editor: editor({ selections: [cursorAt(1, 2)] }) }));
    timers.advance(249);
    assert.deepEqual(sent, []);
    timers.advance(1);
    assert.deepEqual(sent, [at(1, 2)]);
    assert.equal(timers.pending, 0);
  });

  it('restarts the wait when the active editor changes, and reports the new editor', () => {
    const { timers, sent, move } = setup();
    move(state());
    timers.advance(100);
    move(state({ editor: editor({ uri: 'untitled:Untitled-1', scheme: 'untitled', selections: [cursorAt(0, 0)] }) }));
    timers.advance(249);
    assert.deepEqual(sent, []);
    timers.advance(1);
    assert.deepEqual(sent, [at(0, 0, 'untitled:Untitled-1')]);
  });

  it('sends a jump at once: another editor, or a command that moved the cursor', () => {
    const { timers, sent, world, reporter } = setup();
    world.state = state({ editor: editor({ uri: 'file:///ws/b.py', selections: [cursorAt(40, 2)] }) });
    reporter.moved(true);
    reporter.moved(true); // the selection event of the same jump
    timers.advance(0);
    assert.deepEqual(sent, [at(40, 2, 'file:///ws/b.py')]);
    // Moving on from there waits for quiet again, and a move cancels a jump not yet sent.
    world.state = state({ editor: editor({ uri: 'file:///ws/b.py', selections: [cursorAt(41, 0)] }) });
    reporter.moved(true);
    reporter.moved();
    timers.advance(249);
    assert.equal(sent.length, 1);
    timers.advance(1);
    assert.deepEqual(sent.at(-1), at(41, 0, 'file:///ws/b.py'));
  });

  it('sends nothing for a selection or several cursors', () => {
    const selection = { anchor: { line: 3, character: 0 }, active: { line: 3, character: 4 } };
    const sameLineOtherColumn = { anchor: { line: 2, character: 4 }, active: { line: 3, character: 4 } };
    for (const selections of [[selection], [sameLineOtherColumn], [cursorAt(3, 4), cursorAt(5, 4)], []]) {
      const { timers, sent, move } = setup();
      move(state({ editor: editor({ selections }) }));
      timers.advance(1000);
      assert.deepEqual(sent, [], JSON.stringify(selections));
    }
  });

  it('sends nothing for documents the client does not serve, or with no active editor', () => {
    assert.deepEqual([...SERVED_SCHEMES], ['file', 'untitled']);
    for (const s of [
      state({ editor: editor({ uri: 'output:extension-output-lookahead', scheme: 'output' }) }),
      state({ editor: editor({ uri: 'git:/ws/a.py', scheme: 'git' }) }),
      state({ editor: undefined }),
    ]) {
      const { timers, sent, move } = setup();
      move(s);
      timers.advance(1000);
      assert.deepEqual(sent, [], s.editor?.scheme ?? 'no editor');
    }
  });

  it('sends nothing while completions are off: the setting, the toggle or the language', () => {
    for (const s of [
      state({ settings: settings({ enable: false }) }),
      state({ toggledOff: true }),
      state({ settings: settings({ disabledLanguages: ['python'] }) }),
    ]) {
      const { timers, sent, move } = setup();
      move(s);
      timers.advance(1000);
      assert.deepEqual(sent, []);
    }
  });

  it('does not send the same position of the same version twice in a row', () => {
    const { timers, sent, move } = setup();
    move(state());
    timers.advance(250);
    // A selection made and collapsed again where it was: nothing new for the daemon.
    move(state({ editor: editor({ selections: [{ anchor: { line: 3, character: 0 }, active: { line: 3, character: 4 } }] }) }));
    timers.advance(250);
    move(state());
    timers.advance(250);
    assert.deepEqual(sent, [at(3, 4)]);
  });

  it('sends the same position again when the document changed, or after another one', () => {
    const { timers, sent, move } = setup();
    move(state());
    timers.advance(250);
    move(state({ editor: editor({ version: 2 }) }));
    timers.advance(250);
    move(state({ editor: editor({ version: 2, selections: [cursorAt(0, 0)] }) }));
    timers.advance(250);
    move(state({ editor: editor({ version: 2 }) }));
    timers.advance(250);
    move(state({ editor: editor({ version: 2, uri: 'file:///ws/b.py' }) }));
    timers.advance(250);
    assert.deepEqual(sent, [at(3, 4), at(3, 4), at(0, 0), at(3, 4), at(3, 4, 'file:///ws/b.py')]);
  });

  it('reads the document version when the wait is over', () => {
    const { timers, sent, world, move } = setup();
    move(state());
    timers.advance(250);
    move(state());
    // An edit that leaves the cursor where it is (Delete) while the wait runs.
    world.state = state({ editor: editor({ version: 2 }) });
    timers.advance(250);
    assert.deepEqual(sent, [at(3, 4), at(3, 4)]);
  });

  it('sends nothing to a stopped client', () => {
    const { timers, sent, world, reporter, move } = setup();
    move(state({ running: false }));
    timers.advance(1000);
    assert.deepEqual(sent, []);
    // Stopped while a report waits.
    move(state());
    timers.advance(100);
    world.state = state({ running: false });
    reporter.reset();
    assert.equal(timers.pending, 0);
    timers.advance(1000);
    assert.deepEqual(sent, []);
  });

  it('tells a new server of the cursor even where it has not moved', () => {
    const { timers, sent, reporter, move } = setup();
    move(state());
    timers.advance(250);
    reporter.reset();
    move(state());
    timers.advance(250);
    assert.deepEqual(sent, [at(3, 4), at(3, 4)]);
  });

  it('cancels a waiting report when disposed, and starts no timer after', () => {
    const { timers, sent, reporter, move } = setup();
    move(state());
    timers.advance(100);
    reporter.dispose();
    assert.equal(timers.pending, 0);
    move(state({ editor: editor({ selections: [cursorAt(9, 9)] }) }));
    assert.equal(timers.pending, 0);
    timers.advance(1000);
    assert.deepEqual(sent, []);
  });
});
