import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  Located,
  ProgramSearch,
  cacheFolder,
  ensureCacheFolder,
  formatCommandLine,
  locateProgram,
  needsRestart,
  resolveBuildCacheCommand,
  resolveServerCommand,
} from '../commandLines';
import { LookaheadSettings } from '../settings';
import { settings } from './fixtures';

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
