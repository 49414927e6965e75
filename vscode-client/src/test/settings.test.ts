import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CLIENT_SETTINGS,
  checkPathSettings,
  completionsEnabled,
  configurationChangeParams,
  daemonOptions,
  readSettings,
  settingNamedIn,
} from '../settings';
import { declared, properties, settings } from './fixtures';

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
