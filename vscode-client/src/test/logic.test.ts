import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CancelLike,
  DEFAULT_SETTINGS,
  LookaheadSettings,
  RestartBackoff,
  completionsEnabled,
  configurationChangeParams,
  debounce,
  draftShare,
  findExecutable,
  formatCommandLine,
  formatStatusBar,
  needsRestart,
  readSettings,
  resolveBuildCacheCommand,
  resolveServerCommand,
  toInitializationOptions,
} from '../logic';

function settings(overrides: Partial<LookaheadSettings> = {}): LookaheadSettings {
  return { ...DEFAULT_SETTINGS, serverCommand: [], ignoreGlobs: [], disabledLanguages: [], ...overrides };
}

/** A cancellation token the test cancels by hand. */
function cancellable(): CancelLike & { cancel(): void } {
  const listeners = new Set<() => unknown>();
  const token = {
    isCancellationRequested: false,
    onCancellationRequested(listener: () => unknown) {
      listeners.add(listener);
      return { dispose: () => listeners.delete(listener) };
    },
    cancel() {
      token.isCancellationRequested = true;
      for (const l of [...listeners]) l();
    },
  };
  return token;
}

describe('server command line', () => {
  it('runs `lookahead-lsp serve` from PATH by default', () => {
    const c = resolveServerCommand(settings());
    assert.deepEqual(c, { command: 'lookahead-lsp', args: ['serve'] });
    assert.equal(formatCommandLine(c), 'lookahead-lsp serve');
  });

  it('runs the module with the configured Python when pythonPath is set', () => {
    const c = resolveServerCommand(settings({ pythonPath: '/repo/.venv/bin/python' }));
    assert.equal(formatCommandLine(c), '/repo/.venv/bin/python -m lookahead_lsp serve');
  });

  it('prefers an explicit serverCommand over pythonPath', () => {
    const c = resolveServerCommand(settings({ serverCommand: ['/opt/la', 'serve', '--log-level', 'debug'], pythonPath: '/usr/bin/python3' }));
    assert.deepEqual(c, { command: '/opt/la', args: ['serve', '--log-level', 'debug'] });
  });

  it('quotes arguments with spaces in the command line shown to the user', () => {
    assert.equal(formatCommandLine({ command: '/My Tools/python', args: ['-m', 'x'] }), "'/My Tools/python' -m x");
  });

  it('restarts the server only when its command line changes', () => {
    assert.equal(needsRestart(settings(), settings({ maxTokens: 10, draft: 'none' })), false);
    assert.equal(needsRestart(settings(), settings({ pythonPath: '/usr/bin/python3' })), true);
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

describe('finding the executable', () => {
  const files = new Set(['/usr/local/bin/lookahead-lsp', '/home/u/venv/bin/python']);
  const exists = (f: string) => files.has(f);

  it('searches PATH for a bare name', () => {
    assert.equal(findExecutable('lookahead-lsp', { PATH: '/usr/bin:/usr/local/bin' }, '/', exists, 'linux'), '/usr/local/bin/lookahead-lsp');
    assert.equal(findExecutable('lookahead-lsp', { PATH: '/usr/bin' }, '/', exists, 'linux'), undefined);
  });

  it('checks a path as given, relative to the workspace', () => {
    assert.equal(findExecutable('venv/bin/python', { PATH: '' }, '/home/u', exists, 'linux'), '/home/u/venv/bin/python');
    assert.equal(findExecutable('/nope/python', { PATH: '/home/u/venv/bin' }, '/', exists, 'linux'), undefined);
  });
});

describe('settings sent to the daemon', () => {
  it('uses the daemon keys only, with empty paths as null', () => {
    const opts = toInitializationOptions(settings({ maxTokens: 32, draft: 'lookahead', ignoreGlobs: ['*.min.js'], threads: 4 }));
    assert.deepEqual(Object.keys(opts).sort(), [
      'contextSize', 'disabledLanguages', 'draft', 'extraContextTokens', 'ignoreGlobs', 'maxTokens', 'modelPath',
      'prefixTokens', 'staticCachePath', 'suffixTokens', 'threads', 'timeBudgetMs',
    ]);
    assert.equal(opts.maxTokens, 32);
    assert.equal(opts.draft, 'lookahead');
    assert.equal(opts.modelPath, null);
    assert.equal(opts.staticCachePath, null);
    assert.deepEqual(opts.ignoreGlobs, ['*.min.js']);
    assert.equal(opts.threads, 4);
  });

  it('wraps a configuration change in the lookahead section', () => {
    const params = configurationChangeParams(settings({ modelPath: '/m.gguf' }));
    assert.equal(params.settings.lookahead.modelPath, '/m.gguf');
  });

  it('falls back to defaults for values of the wrong type', () => {
    const raw: Record<string, unknown> = { draft: 'fast', maxTokens: '12', serverCommand: 'lookahead-lsp', enable: false, debounceMs: -5 };
    const s = readSettings((k) => raw[k]);
    assert.equal(s.draft, 'auto');
    assert.equal(s.maxTokens, 64);
    assert.deepEqual(s.serverCommand, []);
    assert.equal(s.enable, false);
    assert.equal(s.debounceMs, 0);
    assert.equal(readSettings(() => undefined).debounceMs, 75);
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

describe('debounce', () => {
  it('resolves true after the wait', async () => {
    const t0 = Date.now();
    assert.equal(await debounce(30, cancellable()), true);
    assert.ok(Date.now() - t0 >= 25);
  });

  it('resolves false as soon as the request is cancelled', async () => {
    const token = cancellable();
    const t0 = Date.now();
    const waiting = debounce(5000, token);
    setTimeout(() => token.cancel(), 10);
    assert.equal(await waiting, false);
    assert.ok(Date.now() - t0 < 1000);
  });

  it('does not wait for an already cancelled request', async () => {
    const token = cancellable();
    token.cancel();
    assert.equal(await debounce(5000, token), false);
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
    assert.match(formatStatusBar({ ...running, status: { model_state: 'error', model_error: 'no such file' } }).tooltip, /no such file/);
  });
});
