import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { DEFAULT_SETTINGS } from '../settings';
import { contributed, declared, manifest, properties } from './fixtures';

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

describe('package.json commands and keybindings', () => {
  it('declares Show Menu and Select Model in the Lookahead category', () => {
    const find = (command: string) => contributed.find((c) => c.command === command);
    assert.deepEqual(find('lookahead.menu'), { command: 'lookahead.menu', title: 'Show Menu', category: 'Lookahead' });
    assert.deepEqual(find('lookahead.selectModel'), { command: 'lookahead.selectModel', title: 'Select Model', category: 'Lookahead' });
    for (const c of contributed) assert.equal(c.category, 'Lookahead', c.command);
  });

  it('registers every command it declares', () => {
    const source = fs.readFileSync(path.join(__dirname, '..', '..', 'src', 'commands.ts'), 'utf8');
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
