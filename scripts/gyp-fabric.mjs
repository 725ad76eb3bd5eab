#!/usr/bin/env node
// Where binding.gyp finds libfabric's headers (the fabric addon needs only the headers: it
// opens libfabric.so.1 at run time, see native/fabric_library.h).
//   node scripts/gyp-fabric.mjs have     prints 1 when the headers are found, else 0
//   node scripts/gyp-fabric.mjs cflags   prints the compiler flags that find them
// Looked for in WEFT_FABRIC_INCLUDE (a folder holding rdma/fabric.h: cross builds, see
// scripts/prebuild.mjs), then through pkg-config, then in /usr/include.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

function find() {
  const dir = process.env.WEFT_FABRIC_INCLUDE;
  if (dir) return existsSync(path.join(dir, 'rdma', 'fabric.h')) ? `-I${dir}` : null;
  const pc = spawnSync('pkg-config', ['--cflags', 'libfabric'], { encoding: 'utf8' });
  if (pc.status === 0) return pc.stdout.trim();
  return existsSync('/usr/include/rdma/fabric.h') ? '' : null;
}

const flags = find();
process.stdout.write(process.argv[2] === 'cflags' ? (flags ?? '') : flags === null ? '0' : '1');
