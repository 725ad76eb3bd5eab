#!/usr/bin/env node
// npm's install step for weftjs. Where the package ships a prebuilt binary for this machine
// (prebuilds/linux-<arch>, glibc) and it loads, nothing is compiled; otherwise the addon is
// built from source with node-gyp (python3, make, g++ and Node's headers). Build from source
// on purpose: `npm rebuild weftjs --build-from-source` (or WEFT_BUILD_FROM_SOURCE=1), the
// convention of prebuild-install and node-gyp-build. In a checkout it always builds.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const platform = `${process.platform}-${process.arch}`;
const prebuilt = path.join(root, 'prebuilds', platform, 'weft.node');
const fromSource = ['true', '1'].includes(process.env.npm_config_build_from_source ?? '') || process.env.WEFT_BUILD_FROM_SOURCE === '1';

function glibc() {
  return Boolean(process.report?.getReport()?.header?.glibcVersionRuntime);
}

/** Loads a binary in a child process, so a crash or a missing symbol cannot take npm down. */
function loads(file) {
  const r = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(file)}).reduceIsa()`], { encoding: 'utf8', timeout: 30_000 });
  return r.status === 0 ? '' : (r.stderr || `exit ${r.status}`).trim().split('\n').find((l) => /Error|error/.test(l)) ?? 'it does not load';
}

// In a checkout the sources are what runs: build them, even where prebuilds/ was made
// (scripts/prebuild.mjs), or a stale prebuilt binary would hide every change to native/.
const checkout = !root.split(path.sep).includes('node_modules');

let why = '';
if (fromSource) why = 'building from source as asked';
else if (checkout) why = 'a checkout builds from source';
else if (process.platform !== 'linux') why = `weft runs on Linux only (this is ${process.platform})`;
else if (!existsSync(prebuilt)) why = `no prebuilt binary for ${platform}`;
else if (!glibc()) why = 'the prebuilt binaries are for glibc and this Node runs on musl';
else {
  const error = loads(prebuilt);
  if (!error) {
    console.log(`weftjs: using the prebuilt binary for ${platform} (npm rebuild weftjs --build-from-source compiles it here instead)`);
    process.exit(0);
  }
  why = `the prebuilt binary for ${platform} does not load here (${error})`;
}

// npm and pnpm name their bundled node-gyp in npm_config_node_gyp; otherwise node-gyp on PATH.
const bundled = process.env.npm_config_node_gyp;
const [cmd, args] = bundled && existsSync(bundled) ? [process.execPath, [bundled, 'rebuild']] : ['node-gyp', ['rebuild']];
console.log(`weftjs: ${why}: building the addon with node-gyp`);
const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
if (r.status !== 0) {
  const cause = r.error ? `${cmd} could not start (${r.error.message})` : `node-gyp exited with ${r.status ?? r.signal}`;
  console.error(`weftjs: ${why}, and building from source failed: ${cause}. It needs python3, make, g++ and Node's headers (Debian: apt-get install python3 make g++); see docs/troubleshooting.md`);
  process.exit(1);
}
