#!/usr/bin/env node
// Runs the arm64 prebuilt binary for real on an x64 machine: Debian's arm64 Node (18, from
// the Debian archive) under qemu-user, with the package's prebuilds/linux-arm64 (the x64
// build/ does not load there, so the loader falls through to the prebuilt binary), through
// `weft info` (the core, and the fabric addon opening arm64 libfabric) and these tests: the
// native core, every reduction kernel against its reference, and the shm NIC API. Not part of `npm test` (it adds the arm64 architecture to
// dpkg and downloads about 30 MB); run it before a release, after scripts/prebuild.mjs:
//
//   node scripts/check-arm64.mjs            (root, Debian/Ubuntu with apt-get)
//
// The arm64 root file system is unpacked into ~/.cache/weft-arm64 (kept for the next run).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cache = path.join(homedir(), '.cache', 'weft-arm64');
const sysroot = path.join(cache, 'root');
const debs = path.join(cache, 'debs');
const TESTS = ['native/native', 'reduce/kernels', 'nic/shm-api'];
// Node and what it loads (Debian 12 names); libfabric and its libraries for the ofi check.
const PACKAGES = [
  'nodejs', 'libnode108', 'libbrotli1', 'libc-ares2', 'libc6', 'libgcc-s1', 'libicu72', 'libnghttp2-14', 'libssl3', 'libstdc++6', 'libuv1', 'zlib1g',
  'libfabric1', 'libatomic1', 'libibverbs1', 'librdmacm1', 'libnl-3-200', 'libnl-route-3-200', 'ibverbs-providers',
].map((p) => `${p}:arm64`).concat(['node-acorn', 'node-cjs-module-lexer', 'node-undici', 'node-busboy']);

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...opts });
  if (r.status !== 0) {
    console.error(`check-arm64: ${cmd} ${args.join(' ')} failed (${r.status ?? r.signal})`);
    process.exit(1);
  }
  return r;
}
const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;

if (!existsSync(path.join(root, 'prebuilds', 'linux-arm64', 'weft.node'))) {
  console.error('check-arm64: prebuilds/linux-arm64 is missing: run node scripts/prebuild.mjs first');
  process.exit(1);
}
if (!existsSync(path.join(sysroot, 'usr', 'bin', 'node'))) {
  if (process.getuid?.() !== 0 || !has('apt-get')) {
    console.error('check-arm64: the arm64 root file system is not there yet and making it needs root and apt-get');
    process.exit(1);
  }
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (!has('qemu-aarch64')) sh('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'qemu-user'], { env });
  sh('dpkg', ['--add-architecture', 'arm64']);
  sh('apt-get', ['update', '-qq'], { env });
  mkdirSync(debs, { recursive: true });
  sh('apt-get', ['download', ...PACKAGES], { cwd: debs, env });
  mkdirSync(sysroot, { recursive: true });
  for (const f of readdirSync(debs)) if (f.endsWith('.deb')) sh('dpkg', ['-x', path.join(debs, f), sysroot]);
}

// The tests start child processes with process.execPath (an arm64 binary): the kernel runs
// those through qemu only with a binfmt_misc entry. One is registered for this run (and
// removed after) when none is there; QEMU_LD_PREFIX points qemu at the arm64 root.
const BINFMT = '/proc/sys/fs/binfmt_misc';
const ENTRY = 'weft-check-aarch64';
const ELF_AARCH64 = ':M::\\x7f\\x45\\x4c\\x46\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:';
let registered = false;
if (!readdirSync(BINFMT, { withFileTypes: true }).some((e) => /aarch64/.test(e.name))) {
  if (!existsSync(path.join(BINFMT, 'register'))) spawnSync('mount', ['-t', 'binfmt_misc', 'binfmt_misc', BINFMT]);
  const qemu = spawnSync('sh', ['-c', 'command -v qemu-aarch64'], { encoding: 'utf8' }).stdout.trim();
  try {
    writeFileSync(path.join(BINFMT, 'register'), `:${ENTRY}${ELF_AARCH64}${qemu}:`);
    registered = true;
  } catch (err) {
    console.error(`check-arm64: cannot register qemu-aarch64 with binfmt_misc (${err.message}); the tests that start processes will fail`);
  }
}
process.on('exit', () => {
  if (registered) writeFileSync(path.join(BINFMT, ENTRY), '-1');
});

const node = path.join(sysroot, 'usr', 'bin', 'node');
const env = { ...process.env, QEMU_LD_PREFIX: sysroot };
const run = (args) => spawnSync('qemu-aarch64', ['-L', sysroot, node, ...args], { cwd: root, env, encoding: 'utf8', timeout: 900_000 });
const info = run([path.join(root, 'bin', 'weft.js'), 'info']);
process.stdout.write(info.stdout);
if (info.status !== 0 || !/binary +prebuilt/.test(info.stdout) || !/yes +ofi/.test(info.stdout)) {
  console.error(`check-arm64: weft info under arm64 Node did not run the prebuilt binaries (core and fabric)\n${info.stderr}`);
  process.exit(1);
}
// Endpoints over libfabric's tcp provider do not progress under qemu-user (its netlink and
// epoll emulation): the fabric addon is checked to load libfabric and list its providers.
console.log('check-arm64: ok   weft info: the prebuilt core and fabric addon load (libfabric opened at run time)');
let failed = 0;
for (const t of TESTS) {
  const r = run([path.join(root, 'dist', 'test', `${t}.test.js`)]);
  const total = /Total:\s+(\d+)/.exec(r.stdout)?.[1] ?? '?';
  const passed = /Passed:\s+(\d+)/.exec(r.stdout)?.[1] ?? '0';
  const ok = r.status === 0 && total === passed;
  if (!ok) failed++;
  console.log(`check-arm64: ${ok ? 'ok  ' : 'FAIL'} ${t}: ${passed} of ${total} passed${ok ? '' : `\n${r.stdout.slice(-2000)}${r.stderr.slice(-2000)}`}`);
}
console.log(`check-arm64: ${TESTS.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
