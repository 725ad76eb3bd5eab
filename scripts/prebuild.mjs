#!/usr/bin/env node
// Builds the binaries the package ships: prebuilds/linux-<arch>/weft.node and weft_ofi.node
// for x64 and arm64 (glibc), so that `npm install weftjs` needs no compiler, as zeromq.js and
// better-sqlite3 ship theirs. scripts/install.mjs uses them at install time and
// src/native/binding.ts loads them; node-gyp from source stays the fallback.
//
//   node scripts/prebuild.mjs                 every architecture (x64 and arm64)
//   node scripts/prebuild.mjs --arch x64      one of them
//   node scripts/prebuild.mjs --arch x64 --from-build
//       this machine's architecture from the checkout's build/Release (what npm ci compiled
//       from the same binding.gyp and sources) when it is newer than every source; else it
//       compiles. npm test's package test uses it: the compile costs 15 s of its 15 minutes,
//       and the soak run (WEFT_SOAK=1) and `npm run check:arm64` compile as a release does.
//
// Each architecture is built in a staging copy of binding.gyp and native/ (the checkout's own
// build/ is left alone) with node-gyp and Node's headers (npm's nodedir, or the ones beside
// this Node). arm64 on an x64 machine is cross-compiled with Debian's g++-aarch64-linux-gnu.
// The fabric addon needs only libfabric's headers (libfabric-dev): it opens libfabric.so.1 at
// run time, so one binary serves machines with and without libfabric. The glibc and
// libstdc++ versions the binaries need (the highest symbol versions they reference) are
// printed and written to prebuilds/linux-<arch>/manifest.json. Built on Debian 12 that is
// glibc 2.34 (shm_open and dlopen moved into libc there) and GLIBCXX 3.4.22; linking
// libstdc++ statically was tried and needs glibc 2.36 (arc4random, _dl_find_object).
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ARCHES = {
  x64: { gnu: 'x86_64-linux-gnu' },
  arm64: { gnu: 'aarch64-linux-gnu' },
};
const HOST_ARCH = process.arch;

function fail(message) {
  console.error(`prebuild: ${message}`);
  process.exit(1);
}

const { values } = parseArgs({ options: { arch: { type: 'string' }, 'from-build': { type: 'boolean' } } });
const arches = values.arch ? values.arch.split(',') : Object.keys(ARCHES);
for (const a of arches) if (!(a in ARCHES)) fail(`unknown architecture '${a}' (x64, arm64)`);

const run = (cmd, args, opts = {}) => spawnSync(cmd, args, { encoding: 'utf8', ...opts });
const has = (cmd) => run('sh', ['-c', `command -v ${cmd}`]).status === 0;

/** libfabric's headers (rdma/*.h) and their version: the fabric addon is built against them. */
function fabricHeaders() {
  const dir = '/usr/include/rdma';
  const header = path.join(dir, 'fabric.h');
  if (!existsSync(header)) fail("libfabric's headers are missing (the fabric addon is built against them): apt-get install libfabric-dev");
  const text = readFileSync(header, 'utf8');
  const major = /#define FI_MAJOR_VERSION (\d+)/.exec(text)?.[1];
  const minor = /#define FI_MINOR_VERSION (\d+)/.exec(text)?.[1];
  // native/fabric_library.cc pins libfabric's symbol versions for the 1.17 headers; a binary
  // built against other headers would call whatever the machine's libfabric defaults to.
  if (`${major}.${minor}` !== '1.17') fail(`libfabric's headers are ${major}.${minor}; the prebuilt binaries are built against 1.17 (Debian 12's libfabric-dev), whose symbol versions native/fabric_library.cc pins`);
  return { dir, version: `${major}.${minor}` };
}

/** Node's headers for node-gyp, without a download (this machine may have no network). */
function nodedir() {
  if (process.env.npm_config_nodedir) return process.env.npm_config_nodedir;
  const npmrc = run('npm', ['config', 'get', 'nodedir']).stdout?.trim();
  if (npmrc && npmrc !== 'undefined' && existsSync(path.join(npmrc, 'include', 'node', 'node_api.h'))) return npmrc;
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  if (existsSync(path.join(prefix, 'include', 'node', 'node_api.h'))) return prefix;
  return undefined;
}

/** The highest `<tag>_x.y[.z]` symbol version a binary needs (readelf reads any architecture). */
function versionNeeded(file, tag) {
  const out = run('readelf', ['-W', '--dyn-syms', file]).stdout ?? '';
  let best = '0';
  for (const m of out.matchAll(new RegExp(`@${tag}_([0-9.]+)`, 'g'))) if (newer(m[1], best)) best = m[1];
  return best;
}

const newer = (a, b) => a.localeCompare(b, undefined, { numeric: true }) > 0;

/** The checkout's build/Release, when --from-build may use it: built after every source it comes from. */
function checkoutBuild(files) {
  const dir = path.join(root, 'build', 'Release');
  const built = files.map((f) => path.join(dir, f));
  if (!built.every((f) => existsSync(f))) return undefined;
  const oldest = Math.min(...built.map((f) => statSync(f).mtimeMs));
  const sources = [path.join(root, 'binding.gyp'), ...readdirSync(path.join(root, 'native')).map((f) => path.join(root, 'native', f))];
  return sources.every((f) => statSync(f).mtimeMs <= oldest) ? dir : undefined;
}

const gyp = path.join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
if (!existsSync(gyp)) fail('node-gyp is missing: run npm ci first');
const headers = fabricHeaders();
const nodeHeaders = nodedir();

/** Compiles both addons for `arch` in a staging copy of the sources (stage/build/Release). */
function compile(arch, stage, env) {
  const { gnu } = ARCHES[arch];
  const cross = arch !== HOST_ARCH;
  cpSync(path.join(root, 'native'), path.join(stage, 'native'), { recursive: true });
  copyFileSync(path.join(root, 'binding.gyp'), path.join(stage, 'binding.gyp'));
  mkdirSync(path.join(stage, 'scripts'));
  copyFileSync(path.join(root, 'scripts', 'gyp-fabric.mjs'), path.join(stage, 'scripts', 'gyp-fabric.mjs'));
  symlinkSync(path.join(root, 'node_modules'), path.join(stage, 'node_modules'));
  // A copy of the headers alone: a cross compiler must not see the host's /usr/include.
  const include = path.join(stage, 'fabric-include');
  cpSync(headers.dir, path.join(include, 'rdma'), { recursive: true });
  env.WEFT_FABRIC_INCLUDE = include;
  const args = [gyp, 'rebuild', `--arch=${arch}`, '-j', 'max', ...(nodeHeaders ? [`--nodedir=${nodeHeaders}`] : [])];
  console.log(`prebuild: linux-${arch}${cross ? ` (cross, ${gnu}-g++)` : ''}`);
  const r = run(process.execPath, args, { cwd: stage, env, stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) fail(`node-gyp failed for ${arch}:\n${(r.stdout ?? '').slice(-3000)}${(r.stderr ?? '').slice(-3000)}`);
}

for (const arch of arches) {
  const { gnu } = ARCHES[arch];
  const cross = arch !== HOST_ARCH;
  const env = { ...process.env };
  if (cross) {
    if (!has(`${gnu}-g++`)) fail(`cross-compiling for ${arch} needs ${gnu}-g++: apt-get install g++-${gnu}`);
    Object.assign(env, { CC: `${gnu}-gcc`, CXX: `${gnu}-g++`, LINK: `${gnu}-g++`, AR: `${gnu}-ar` });
  }
  const stage = mkdtempSync(path.join(tmpdir(), `weft-prebuild-${arch}-`));
  const files = ['weft.node', 'weft_ofi.node'];
  try {
    const reuse = values['from-build'] && !cross ? checkoutBuild(files) : undefined;
    if (reuse) {
      console.log(`prebuild: linux-${arch} from the checkout's build/Release (--from-build)`);
      mkdirSync(path.join(stage, 'build', 'Release'), { recursive: true });
      for (const f of files) copyFileSync(path.join(reuse, f), path.join(stage, 'build', 'Release', f));
    } else compile(arch, stage, env);
    const out = path.join(root, 'prebuilds', `linux-${arch}`);
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    const strip = cross ? `${gnu}-strip` : 'strip';
    let glibc = '0';
    let glibcxx = '0';
    for (const f of files) {
      const built = path.join(stage, 'build', 'Release', f);
      if (!existsSync(built)) fail(`${f} was not built for ${arch}`);
      const dst = path.join(out, f);
      copyFileSync(built, dst);
      if (run(strip, ['--strip-unneeded', dst]).status !== 0) fail(`${strip} failed on ${dst}`);
      const needC = versionNeeded(dst, 'GLIBC');
      const needCxx = versionNeeded(dst, 'GLIBCXX');
      if (newer(needC, glibc)) glibc = needC;
      if (newer(needCxx, glibcxx)) glibcxx = needCxx;
    }
    const manifest = { platform: 'linux', arch, libc: 'glibc', glibc, glibcxx, napi: 8, libfabricHeaders: headers.version, files };
    writeFileSync(path.join(out, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    console.log(`prebuild: prebuilds/linux-${arch}: ${files.join(', ')} (glibc ${glibc}, libstdc++ GLIBCXX ${glibcxx} or newer)`);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}
