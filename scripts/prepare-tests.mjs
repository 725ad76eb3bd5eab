#!/usr/bin/env node
// The set-up `npm test` (and .ci/run) does before the tests: the system packages the tests
// use (libfabric, redis-server, Open MPI, Gloo, the tools to build the addon, iproute2 for the
// emulated hosts, the arm64 cross compiler for the prebuilt binaries). Missing ones are installed with apt-get when this runs as root or with
// passwordless sudo, and the addon is rebuilt when libfabric arrived (node-gyp finds it with
// pkg-config at build time). Where it cannot install, it stops at once with one line naming the
// command to run and one line listing what the tests would skip; WEFT_TEST_ALLOW_MISSING=1 runs
// the tests anyway (those skip, saying why). WEFT_TEST_NO_INSTALL=1 never installs.
// Exit codes: 0 ready (or allowed to go on), 1 packages missing.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
const pkgConfig = (name) => spawnSync('pkg-config', ['--exists', name], { stdio: 'ignore' }).status === 0;

/** Debian package, whether it is there, and what the tests skip without it. */
const PACKAGES = [
  { pkg: 'g++', ok: () => has('g++'), skips: 'the native addon cannot be built (every test)' },
  { pkg: 'make', ok: () => has('make'), skips: 'the native addon cannot be built (every test)' },
  { pkg: 'python3', ok: () => has('python3'), skips: 'the native addon cannot be built (every test)' },
  { pkg: 'pkg-config', ok: () => has('pkg-config'), skips: 'the libfabric provider (ofi tests, jobs across hosts)' },
  { pkg: 'libfabric-dev', ok: () => has('pkg-config') && pkgConfig('libfabric'), skips: 'the libfabric provider (ofi tests, jobs across hosts)', rebuild: true },
  { pkg: 'libfabric-bin', ok: () => has('fi_info'), skips: 'fi_pingpong comparisons' },
  { pkg: 'redis-server', ok: () => has('redis-server'), skips: 'the Redis store tests' },
  { pkg: 'openmpi-bin', ok: () => has('mpirun'), skips: 'mpirun launch tests and Open MPI comparisons' },
  { pkg: 'libopenmpi-dev', ok: () => has('mpicc'), skips: 'Open MPI comparisons' },
  { pkg: 'libgloo-dev', ok: () => existsSync('/usr/include/gloo/config.h'), skips: 'Gloo comparisons' },
  { pkg: 'iproute2', ok: () => has('ip'), skips: 'jobs across emulated hosts (network namespaces)' },
  // The package test builds the arm64 prebuilt binary too (cross-compiled on x64).
  ...(process.arch === 'x64' ? [{ pkg: 'g++-aarch64-linux-gnu', ok: () => has('aarch64-linux-gnu-g++'), skips: 'the arm64 prebuilt binary in the package test' }] : []),
];

const missing = () => PACKAGES.filter((p) => !p.ok());
let need = missing();
if (need.length === 0) process.exit(0);

const root_ = process.getuid?.() === 0;
const sudo = !root_ && has('sudo') && spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0;
const canInstall = process.env.WEFT_TEST_NO_INSTALL !== '1' && has('apt-get') && (root_ || sudo);
const names = need.map((p) => p.pkg);

if (canInstall) {
  const pre = root_ ? [] : ['sudo', '-n'];
  const run = (args) => {
    const [cmd, ...rest] = [...pre, ...args];
    return spawnSync(cmd, rest, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } }).status === 0;
  };
  console.log(`npm test: installing ${names.join(' ')} (apt-get${root_ ? '' : ' with sudo'})`);
  if (run(['apt-get', 'update', '-qq']) && run(['apt-get', 'install', '-y', '-qq', '--no-install-recommends', ...names])) {
    // An addon already built without libfabric is rebuilt; before `npm ci` there is none yet.
    const gyp = path.join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
    if (need.some((p) => p.rebuild) && pkgConfig('libfabric') && existsSync(path.join(root, 'build')) && existsSync(gyp)) {
      console.log('npm test: libfabric arrived: rebuilding the addon');
      const r = spawnSync(process.execPath, [gyp, 'rebuild'], { cwd: root, stdio: 'inherit' });
      if (r.status !== 0) {
        console.error('npm test: rebuilding the addon failed; run `npx node-gyp rebuild` and read its output');
        process.exit(1);
      }
    }
    need = missing();
    if (need.length === 0) process.exit(0);
  }
}

const skips = [...new Set(need.map((p) => p.skips))].join('; ');
const sudoWord = root_ ? '' : 'sudo ';
console.error(`npm test: missing system packages; run: ${sudoWord}apt-get install -y ${need.map((p) => p.pkg).join(' ')} && npm rebuild   (or WEFT_TEST_ALLOW_MISSING=1 npm test to run without them)`);
console.error(`npm test: without them the tests skip: ${skips}`);
process.exit(process.env.WEFT_TEST_ALLOW_MISSING === '1' ? 0 : 1);
