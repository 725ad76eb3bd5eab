/** `weft info`: version, providers, host identity and shared-memory limits. */
import { readFileSync, statfsSync } from 'node:fs';
import path from 'node:path';
import { nativeOrigin, packageRoot } from '../native/binding.js';
import { fabricStatus } from '../nic/index.js';
import { localIdentity } from '../host/identity.js';
import { listSegments } from '../host/segments.js';

export interface InfoReport {
  weft: string;
  node: string;
  /** The native core that runs: compiled on this machine, or the package's prebuilt binary. */
  binary: { kind: 'built' | 'prebuilt'; dir: string };
  host: { hostId: string; pid: number };
  providers: { name: string; available: boolean; detail: string }[];
  shm: { path: string; totalBytes: number; freeBytes: number; maxMapCount: number | null; weftSegments: number };
}

function readNumber(file: string): number | null {
  try {
    return Number(readFileSync(file, 'utf8').trim());
  } catch {
    return null;
  }
}

export function collectInfo(): InfoReport {
  const pkg = JSON.parse(readFileSync(path.join(packageRoot, 'package.json'), 'utf8')) as { version: string };
  const ofi = fabricStatus();
  const providers = [{ name: 'shm', available: true, detail: 'pure TypeScript over /dev/shm (one host)' }];
  if (ofi.available) {
    const list = ofi.error ? [`(${ofi.error})`] : ofi.providers;
    providers.push({ name: 'ofi', available: true, detail: `libfabric ${ofi.version ?? '?'}; fabric providers with RDM + RMA: ${list.join(', ') || 'none'}` });
  } else {
    providers.push({ name: 'ofi', available: false, detail: ofi.reason ?? 'built without libfabric' });
  }
  let total = 0;
  let free = 0;
  try {
    const st = statfsSync('/dev/shm');
    total = st.blocks * st.bsize;
    free = st.bavail * st.bsize;
  } catch {
    // No /dev/shm: shm will fail at device creation with a clear error.
  }
  const id = localIdentity();
  return {
    weft: pkg.version,
    node: process.version,
    binary: nativeOrigin(),
    host: { hostId: id.hostId, pid: id.pid },
    providers,
    shm: { path: '/dev/shm', totalBytes: total, freeBytes: free, maxMapCount: readNumber('/proc/sys/vm/max_map_count'), weftSegments: listSegments().length },
  };
}

export function printInfo(json: boolean): void {
  const r = collectInfo();
  if (json) {
    console.log(JSON.stringify(r, null, 2));
    return;
  }
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;
  console.log(`weft ${r.weft} (node ${r.node})`);
  console.log(`binary    ${r.binary.kind === 'prebuilt' ? 'prebuilt' : 'built here'} (${r.binary.dir})`);
  console.log(`host id   ${r.host.hostId}`);
  console.log('providers');
  for (const p of r.providers) console.log(`  ${p.available ? 'yes' : 'no '}  ${p.name.padEnd(4)} ${p.detail}`);
  console.log(`shared memory  ${r.shm.path}: ${gib(r.shm.freeBytes)} free of ${gib(r.shm.totalBytes)}; vm.max_map_count ${r.shm.maxMapCount ?? '?'}; weft segments present: ${r.shm.weftSegments}`);
}
