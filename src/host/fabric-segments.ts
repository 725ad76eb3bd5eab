/**
 * libfabric's shm provider keeps each endpoint in a /dev/shm region named `<pid>:<domain>:<ep>`
 * (libfabric 1.17) and unlinks it on close or on a caught signal. A process killed with SIGKILL
 * leaves it behind; whoever saw that process die (the launcher, a test's parent) removes it here.
 */
import { readdirSync } from 'node:fs';
import { native } from '../native/binding.js';

const NAME_RE = /^(\d+):\d+:\d+$/;

/** libfabric shm regions in /dev/shm (names with a leading slash), with their owner's pid. */
export function listFabricSegments(): { name: string; pid: number }[] {
  try {
    const out: { name: string; pid: number }[] = [];
    for (const n of readdirSync('/dev/shm')) {
      const m = NAME_RE.exec(n);
      if (m) out.push({ name: `/${n}`, pid: Number(m[1]) });
    }
    return out;
  } catch {
    return [];
  }
}

/**
 * Unlinks the libfabric shm regions of process `pid` once it is gone. Only for a pid the caller
 * saw exit (its own child): the name carries no start time, so a stranger's pid could be reused.
 */
export function sweepFabricSegments(pid: number): string[] {
  if (native.processAlive(pid)) return [];
  const removed: string[] = [];
  for (const s of listFabricSegments()) {
    if (s.pid !== pid) continue;
    try {
      if (native.shmUnlink(s.name)) removed.push(s.name);
    } catch {
      // Not ours (another uid) or already gone.
    }
  }
  return removed;
}
