/**
 * Who a peer is: host id, pid and process start time. Every address blob carries one, so any
 * provider can tell a same-host peer (eligible for shm, checkable for liveness) and notice a
 * dead one even when the fabric stays silent.
 */
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { native } from '../native/binding.js';

/** Encoded size of an identity in address blobs. */
export const IDENTITY_BYTES = 32;

export interface ProcessIdentity {
  /** 16 bytes, hex: same value means same kernel boot and same /dev/shm. */
  hostId: string;
  pid: number;
  /** Start time in clock ticks since boot (tells a recycled pid apart). */
  startTime: number;
}

let cached: ProcessIdentity | undefined;

function computeHostId(): string {
  let boot = '';
  try {
    boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    boot = hostname();
  }
  let shm = '';
  try {
    const st = statSync('/dev/shm');
    shm = `${st.dev}:${st.ino}`;
  } catch {
    shm = 'no-dev-shm';
  }
  return createHash('sha256').update(`${boot}|${shm}`).digest('hex').slice(0, 32);
}

/** This process's identity. */
export function localIdentity(): ProcessIdentity {
  if (!cached) cached = { hostId: computeHostId(), pid: process.pid, startTime: native.processStartTime(process.pid) };
  return cached;
}

/** Writes `id` at `offset` of `view` (IDENTITY_BYTES bytes). */
export function encodeIdentity(view: DataView, offset: number, id: ProcessIdentity): void {
  for (let i = 0; i < 16; i++) view.setUint8(offset + i, parseInt(id.hostId.slice(i * 2, i * 2 + 2), 16));
  view.setUint32(offset + 16, id.pid, true);
  view.setUint32(offset + 20, 0, true);
  view.setFloat64(offset + 24, id.startTime, true);
}

/** Reads an identity written by encodeIdentity. */
export function decodeIdentity(view: DataView, offset: number): ProcessIdentity {
  let hostId = '';
  for (let i = 0; i < 16; i++) hostId += view.getUint8(offset + i).toString(16).padStart(2, '0');
  return { hostId, pid: view.getUint32(offset + 16, true), startTime: view.getFloat64(offset + 24, true) };
}

/** True when `id` runs on this host (same boot and /dev/shm). */
export function isSameHost(id: ProcessIdentity): boolean {
  return id.hostId === localIdentity().hostId;
}

/**
 * False only when the peer is known to be dead: on this host, its pid is gone, a zombie, or
 * recycled. Peers on other hosts are reported alive (the fabric and timeouts judge them).
 */
export function isPeerAlive(id: ProcessIdentity): boolean {
  if (!isSameHost(id)) return true;
  return native.processAlive(id.pid, id.startTime);
}

/**
 * True when `id` runs on this host and is stopped (SIGSTOP, SIGTSTP, a debugger). A stopped
 * rank looks alive to every liveness check; when a wait times out, naming it tells the user
 * which rank all the others were waiting for.
 */
export function isPeerStopped(id: ProcessIdentity): boolean {
  if (!isSameHost(id)) return false;
  const s = native.processState(id.pid, id.startTime);
  return s === 'T' || s === 't';
}
