#!/usr/bin/env node
// Where binding.gyp finds libfabric's headers (the fabric addon needs only the headers: it
// opens libfabric.so.1 at run time, see native/fabric_library.h).
//   node scripts/gyp-fabric.mjs have     prints 1 when the headers are found, else 0
//   node scripts/gyp-fabric.mjs cflags   prints the compiler flags that find them
// Looked for in WEFT_FABRIC_INCLUDE (a folder holding rdma/fabric.h: cross builds, see
// scripts/prebuild.mjs), then through pkg-config, then in /usr/include.
//
// The flags also carry the symbol versions the headers go with. Linking with -lfabric would
// have bound fi_getinfo (and fi_freeinfo, fi_dupinfo) and fi_fabric to the library's default
// versions, FABRIC_1.<n>; a later libfabric moves the default on as struct fi_info grows and
// keeps the old ones, so the addon asks for the version of the library it was built beside:
// -DWEFT_FI_INFO_MINOR=<n> -DWEFT_FI_FABRIC_MINOR=<m>. Cross builds pass none (no library of
// the target here): native/fabric_library.cc then uses the versions of the 1.17 headers the
// prebuilt binaries are built against.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

const run = (cmd, args) => spawnSync(cmd, args, { encoding: 'utf8' });

function headers() {
  const dir = process.env.WEFT_FABRIC_INCLUDE;
  if (dir) return existsSync(path.join(dir, 'rdma', 'fabric.h')) ? `-I${dir}` : null;
  const pc = run('pkg-config', ['--cflags', 'libfabric']);
  if (pc.status === 0) return pc.stdout.trim();
  return existsSync('/usr/include/rdma/fabric.h') ? '' : null;
}

/** The libfabric.so.1 this machine loads: pkg-config's libdir, else ldconfig's cache. */
function library() {
  const libdir = run('pkg-config', ['--variable=libdir', 'libfabric']).stdout?.trim();
  if (libdir && existsSync(path.join(libdir, 'libfabric.so.1'))) return path.join(libdir, 'libfabric.so.1');
  const cache = run('ldconfig', ['-p']).stdout ?? '';
  return /libfabric\.so\.1 \([^)]*\) => (\S+)/.exec(cache)?.[1];
}

function versionFlags() {
  if (process.env.WEFT_FABRIC_INCLUDE) return '';
  const lib = library();
  if (!lib) return '';
  const syms = run('readelf', ['-W', '--dyn-syms', lib]).stdout ?? '';
  const info = /\bfi_getinfo@@FABRIC_1\.(\d+)/.exec(syms)?.[1];
  const fabric = /\bfi_fabric@@FABRIC_1\.(\d+)/.exec(syms)?.[1];
  return info && fabric ? ` -DWEFT_FI_INFO_MINOR=${info} -DWEFT_FI_FABRIC_MINOR=${fabric}` : '';
}

const flags = headers();
if (process.argv[2] === 'cflags') process.stdout.write(flags === null ? '' : `${flags}${versionFlags()}`.trim());
else process.stdout.write(flags === null ? '0' : '1');
