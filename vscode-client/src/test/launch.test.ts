import assert from 'node:assert/strict';
import * as cp from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  ConfiguredCommand,
  ProgramSearch,
  formatCommandLine,
  locateProgram,
  resolveBuildCacheCommand,
  resolveModelsListCommand,
  resolveServerCommand,
} from '../commandLines';
import { PYTHON_PROBE_ARGS, VERIFY_DAEMON_ARGS, pipInstallCommand, venvCommand, verifyCommand } from '../install';
import { runProcess } from '../installer';
import { Launch, ensureWorkingFolder, formatLaunch, launchFor, workingFolder } from '../launch';
import { modelPickItems, parseModelList } from '../modelCatalogue';
import { settings } from './fixtures';

const posix = process.platform !== 'win32';

function scratch(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'lookahead-launch-'));
}

describe('where and how programs start', () => {
  const env = { PATH: '/usr/bin', HOME: '/home/u' };
  const at = (c: ConfiguredCommand) => launchFor(c, c.origin, workingFolder('/store'), env);

  it('runs every program in the empty folder of the extension storage', () => {
    assert.equal(workingFolder('/store'), path.join('/store', 'empty'));
    const lines = [
      resolveServerCommand(settings()),
      resolveServerCommand(settings({ pythonPath: '/usr/bin/python3' })),
      resolveServerCommand(settings(), '/store/daemon/bin/python'),
      resolveServerCommand(settings({ serverCommand: ['/opt/la', 'serve'] })),
    ];
    for (const c of lines) assert.equal(at(c).cwd, path.join('/store', 'empty'), c.origin);
  });

  it('isolates the installed daemon with -I, a pythonPath one with PYTHONSAFEPATH, and leaves serverCommand as written', () => {
    const installed = at(resolveServerCommand(settings(), '/store/daemon/bin/python'));
    assert.equal(formatLaunch(installed), '/store/daemon/bin/python -I -m lookahead_lsp serve');
    assert.deepEqual(installed.env, env);
    const python = at(resolveServerCommand(settings({ pythonPath: '/usr/bin/python3' })));
    assert.equal(formatLaunch(python), 'PYTHONSAFEPATH=1 /usr/bin/python3 -m lookahead_lsp serve');
    assert.deepEqual(python.env, { ...env, PYTHONSAFEPATH: '1' });
    const own = at(resolveServerCommand(settings({ serverCommand: ['/usr/bin/python3', 'wrapper.py', 'serve'] })));
    assert.deepEqual([own.command, ...own.args, own.env], ['/usr/bin/python3', 'wrapper.py', 'serve', env]);
  });

  it('keeps the isolation in build-cache, which runs the server program', () => {
    const installed = resolveServerCommand(settings(), '/store/daemon/bin/python');
    const c = resolveBuildCacheCommand(settings(), '/ws', installed);
    assert.equal(formatLaunch(at(c)), '/store/daemon/bin/python -I -m lookahead_lsp build-cache /ws -o /ws/.lookahead/static.cache');
    const python = resolveBuildCacheCommand(settings({ pythonPath: '/usr/bin/python3' }), '/ws');
    assert.equal(at(python).env.PYTHONSAFEPATH, '1');
  });

  it('runs the installer\'s Pythons isolated', () => {
    assert.equal(formatCommandLine(venvCommand('/usr/bin/python3', '/s/d')), '/usr/bin/python3 -I -m venv /s/d');
    assert.equal(pipInstallCommand('/s/d/bin/python', 'x').args[0], '-I');
    assert.equal(formatCommandLine(verifyCommand('/s/d/bin/python', VERIFY_DAEMON_ARGS)).slice(0, 22), '/s/d/bin/python -I -c ');
    assert.equal(PYTHON_PROBE_ARGS[0], '-I');
  });
});

describe('the working folder', () => {
  it('is made private, and tightened when others may write to it', { skip: !posix && 'POSIX modes' }, () => {
    const root = scratch();
    try {
      const dir = workingFolder(path.join(root, 'storage'));
      assert.equal(ensureWorkingFolder(dir), undefined);
      assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
      fs.chmodSync(dir, 0o777);
      assert.equal(ensureWorkingFolder(dir), undefined);
      assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('is refused when a link or a file stands in its place', { skip: !posix && 'POSIX links' }, () => {
    const root = scratch();
    try {
      fs.mkdirSync(path.join(root, 'elsewhere'));
      fs.mkdirSync(path.join(root, 'linked'));
      fs.symlinkSync(path.join(root, 'elsewhere'), workingFolder(path.join(root, 'linked')));
      assert.match(ensureWorkingFolder(workingFolder(path.join(root, 'linked'))) ?? '', /is not a folder/);
      fs.mkdirSync(path.join(root, 'filed'));
      fs.writeFileSync(workingFolder(path.join(root, 'filed')), '');
      assert.match(ensureWorkingFolder(workingFolder(path.join(root, 'filed'))) ?? '', /cannot use|is not a folder/);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The real daemon, started as the extension starts it, with modules planted in the home folder.

/** The project's .venv Python (the Makefile's test-vscode passes it). Unset: the tests below are
 * skipped; set to anything but an interpreter: they fail. */
const TEST_PYTHON = process.env.LOOKAHEAD_TEST_PYTHON;

function testPython(): string {
  const python = TEST_PYTHON ?? '';
  const ok = fs.existsSync(python) && fs.statSync(python).isFile();
  assert.ok(ok, `LOOKAHEAD_TEST_PYTHON=${python} is not an interpreter (make install creates .venv)`);
  return python;
}

interface Answer {
  initialize?: { result?: { capabilities?: unknown }; error?: unknown };
  code: number | null;
  stderr: string;
}

/** Starts the launch as the language client does (stdio), asks `initialize`, then `shutdown`
 * and `exit`; what it answered, its exit status and its stderr. */
async function initializeAndExit(l: Launch, timeoutMs = 90_000): Promise<Answer> {
  const child = cp.spawn(l.command, l.args, { cwd: l.cwd, env: l.env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => void (stderr += d.toString()));
  child.stdin.on('error', () => undefined); // a daemon that died early closed its end
  const exited = new Promise<number | null>((resolve) => {
    child.on('error', (e) => {
      stderr += `${e.message}\n`;
      resolve(null);
    });
    child.on('close', (code) => resolve(code));
  });
  const waiting = new Map<number, (reply: Answer['initialize']) => void>();
  let buffer = Buffer.alloc(0);
  child.stdout.on('data', (d: Buffer) => {
    buffer = Buffer.concat([buffer, d]);
    for (let end = buffer.indexOf('\r\n\r\n'); end >= 0; end = buffer.indexOf('\r\n\r\n')) {
      const length = Number(/Content-Length: *(\d+)/i.exec(buffer.subarray(0, end).toString())?.[1] ?? NaN);
      if (buffer.length < end + 4 + length) return;
      const message = JSON.parse(buffer.subarray(end + 4, end + 4 + length).toString());
      buffer = buffer.subarray(end + 4 + length);
      if (typeof message.id === 'number' && !('method' in message)) waiting.get(message.id)?.(message);
    }
  });
  const send = (message: object) => {
    const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...message }));
    child.stdin.write(Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`), body]));
  };
  const request = (id: number, method: string, params: unknown) =>
    Promise.race([new Promise<Answer['initialize']>((resolve) => {
      waiting.set(id, resolve);
      send({ id, method, params });
    }), exited.then(() => undefined)]);
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  try {
    const initialize = await request(1, 'initialize', { processId: process.pid, rootUri: null, capabilities: {}, initializationOptions: {} });
    if (initialize !== undefined) {
      await request(2, 'shutdown', null);
      send({ method: 'exit' });
    }
    child.stdin.end();
    return { initialize, code: await exited, stderr };
  } finally {
    clearTimeout(timer);
  }
}

describe('a daemon started as the extension starts it', { skip: (!posix && 'POSIX paths') || (TEST_PYTHON === undefined && 'LOOKAHEAD_TEST_PYTHON is not set (make test-vscode sets it)') }, () => {
  /** A home folder holding what a user's home may well hold: a repository cloned under a
   * dependency's name, a script named like a standard module, and a copy of the daemon. Each
   * appends its name to `marker` when imported, then ends the process. */
  function plantedHome(root: string): { home: string; marker: string } {
    const home = path.join(root, 'home');
    const marker = path.join(root, 'imported-from-home');
    const plant = (file: string, name: string) => {
      fs.mkdirSync(path.dirname(path.join(home, file)), { recursive: true });
      const code = `open(${JSON.stringify(marker)}, "a").write("${name}\\n")\nraise SystemExit("shadowed by ~/${file}")\n`;
      fs.writeFileSync(path.join(home, file), code);
    };
    plant('pathspec/__init__.py', 'pathspec');
    plant('secrets.py', 'secrets');
    plant('lookahead_lsp/__init__.py', 'lookahead_lsp');
    return { home, marker };
  }

  /** The four ways the extension runs a daemon, all with this interpreter's environment (as
   * the installed one, too); `lookahead-lsp` is found on a PATH of the interpreter's folder. */
  const daemons: [string, (python: string) => ConfiguredCommand][] = [
    ['pythonPath', (python) => resolveServerCommand(settings({ pythonPath: python }))],
    ['the installed daemon', (python) => resolveServerCommand(settings(), python)],
    ['serverCommand `python -m`', (python) => resolveServerCommand(settings({ serverCommand: [python, '-m', 'lookahead_lsp', 'serve'] }))],
    ['lookahead-lsp from PATH', () => resolveServerCommand(settings())],
  ];

  for (const [name, daemon] of daemons) {
    it(`${name}: answers initialize and imports nothing from the home folder`, async () => {
      const python = testPython();
      const root = scratch();
      const saved = { HOME: process.env.HOME, PYTHONPATH: process.env.PYTHONPATH };
      try {
        const { home, marker } = plantedHome(root);
        // The extension host's environment: this home, and a PYTHONPATH with empty entries (a
        // careless `export PYTHONPATH=$PYTHONPATH:...`), which put the working folder on
        // sys.path whatever -P or PYTHONSAFEPATH say.
        process.env.HOME = home;
        process.env.PYTHONPATH = path.delimiter;
        const configured = daemon(python);
        const search: ProgramSearch = { env: { PATH: path.dirname(python) }, home, isExecutableFile: (f) => fs.existsSync(f) };
        const located = locateProgram(configured, search);
        assert.ok(located.ok, !located.ok ? located.error : '');
        const cwd = workingFolder(path.join(root, 'storage'));
        assert.equal(ensureWorkingFolder(cwd), undefined);
        const launch = launchFor(located.line, configured.origin, cwd, process.env);
        const answer = await initializeAndExit(launch);
        const shown = `${formatLaunch(launch)} (in ${launch.cwd}):\n${answer.stderr}`;
        const imported = fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8').trim().split('\n') : [];
        assert.deepEqual(imported, [], `imported ${imported.join(', ')} from the home folder: ${shown}`);
        assert.ok(answer.initialize?.result?.capabilities, `no answer to initialize: ${shown}`);
        assert.equal(answer.code, 0, shown);
      } finally {
        for (const [key, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[key];
          else process.env[key] = value;
        }
        fs.rmSync(root, { recursive: true, force: true });
      }
    });
  }
});

describe("the daemon's model catalogue, listed as the model picker lists it", { skip: (!posix && 'POSIX paths') || (TEST_PYTHON === undefined && 'LOOKAHEAD_TEST_PYTHON is not set (make test-vscode sets it)') }, () => {
  it('`models list --json` of the installed daemon parses into picker items', async () => {
    const python = testPython();
    const root = scratch();
    try {
      const configured = resolveModelsListCommand(settings(), resolveServerCommand(settings(), python));
      const cwd = workingFolder(path.join(root, 'storage'));
      assert.equal(ensureWorkingFolder(cwd), undefined);
      const launch = launchFor(configured, configured.origin, cwd, process.env);
      const run = await runProcess(launch, { cwd: launch.cwd, env: launch.env, timeoutMs: 60_000, stdoutChars: 1 << 20 });
      assert.equal(run.code, 0, `${formatLaunch(launch)}:\n${run.tail}`);
      const list = parseModelList(run.stdout);
      assert.ok(list.ok, list.ok ? '' : list.error);
      assert.ok(list.entries.some((e) => e.name === 'gemma-3-270m'), 'the default model is listed');
      for (const e of list.entries) assert.ok(e.approxGb !== undefined && e.fim !== undefined && e.licence && e.speed, e.name);
      assert.equal(modelPickItems(list.entries, '').length, list.entries.length + 2);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
