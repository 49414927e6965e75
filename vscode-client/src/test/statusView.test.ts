import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { draftShare, formatStatusBar, menuEntries, parseDaemonStatus } from '../statusView';
import { contributed } from './fixtures';

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
