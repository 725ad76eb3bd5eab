/**
 * The device of a job that spans hosts: shared memory toward peers on this host, the fabric
 * toward the others, behind ONE Device, so the transport, the collectives and copyrpc run
 * unchanged over a mix. Each queue pair is created on the provider its peer's host calls for
 * (`QueuePairOptions.peerHostId`), and answers to a QP number of this device, so completions
 * of both providers reach their owner through one completion queue and one O(1) table.
 *
 * Memory is allocated in shared memory (shm peers map it) and registered with the fabric too
 * (fabric peers write into the same bytes); a region's descriptor carries both registrations
 * and each QP imports the one of its provider.
 *
 * Waiting: nothing can sleep on a futex and a file descriptor at once. An async sleeper races
 * the two doorbells and rings its own futex to end the shm sleep when the fabric's fd fired
 * first; a blocking sleeper sleeps on the futex in 1 ms slices and looks at the fabric between
 * them (it only sleeps after spinning and yielding for 2 ms found nothing, so the slice costs
 * an idle process about a thousand cheap wake-ups a second, not latency on a busy one).
 */
import { WeftError } from '../../errors.js';
import { native } from '../../native/binding.js';
import { localIdentity } from '../../host/identity.js';
import { planFor, waitAsync, waitSync, type Doorbell } from '../../host/wait.js';
import type { WaitOptions } from '../../util/deadline.js';
import { CompletionBatch, type CompletionQueue, type Device, type MemoryRegion, type QueuePair, type QueuePairOptions, type RemoteRegion } from '../types.js';
import type { ShmDevice } from '../shm/device.js';
import * as SL from '../shm/layout.js';

/** QP numbers of this device stay below this (the completion router's table size). */
const MAX_QPS = 1024;
const DESC_MAGIC = 0x31584d57; // 'WMX1'
/** A blocking sleeper looks at the fabric this often. */
const SYNC_SLICE_MS = 1;

/** A region registered with both providers (or only the fabric, for memory not shared). */
export class MixedMemoryRegion implements MemoryRegion {
  readonly bytes: Uint8Array;
  readonly byteLength: number;
  constructor(
    readonly shm: MemoryRegion | undefined,
    readonly ofi: MemoryRegion,
  ) {
    this.bytes = ofi.bytes;
    this.byteLength = ofi.byteLength;
  }

  descriptor(): Uint8Array {
    const a = this.shm?.descriptor() ?? new Uint8Array(0);
    const b = this.ofi.descriptor();
    const out = new Uint8Array(12 + a.byteLength + b.byteLength);
    const v = new DataView(out.buffer);
    v.setUint32(0, DESC_MAGIC, true);
    v.setUint32(4, a.byteLength, true);
    out.set(a, 8);
    v.setUint32(8 + a.byteLength, b.byteLength, true);
    out.set(b, 12 + a.byteLength);
    return out;
  }

  deregister(): void {
    // The fabric's registration pins the shared bytes: it goes first.
    this.ofi.deregister();
    this.shm?.deregister();
  }
}

/** The part of a mixed descriptor for one provider; throws EPROTO on malformed bytes. */
export function descriptorPart(desc: Uint8Array, kind: 'shm' | 'ofi', where: string): Uint8Array {
  const bad = (why: string) => new WeftError('EPROTO', `${where}: malformed region descriptor (${why})`);
  if (!(desc instanceof Uint8Array) || desc.byteLength < 12) throw bad('too short');
  const v = new DataView(desc.buffer, desc.byteOffset, desc.byteLength);
  if (v.getUint32(0, true) !== DESC_MAGIC) throw bad('not from a device that mixes providers');
  const a = v.getUint32(4, true);
  if (8 + a + 4 > desc.byteLength) throw bad('shm part past the end');
  const b = v.getUint32(8 + a, true);
  if (12 + a + b !== desc.byteLength) throw bad('fabric part does not end the descriptor');
  if (kind === 'shm') {
    if (a === 0) throw new WeftError('EINVAL', `${where}: the region is not in shared memory (it was registered from the JS heap), so a peer on its host cannot map it; allocate it with device.allocate()`);
    return desc.subarray(8, 8 + a);
  }
  return desc.subarray(12 + a, 12 + a + b);
}

/** A QP of one provider answering to this device's QP number. */
class MixedQueuePair implements QueuePair {
  constructor(
    readonly qpn: number,
    readonly inner: QueuePair,
    readonly kind: 'shm' | 'ofi',
    private readonly owner: MixedDevice,
  ) {
    if (inner.postWriteImmInPlace) this.postWriteImmInPlace = (r, o, l, i, w, s) => inner.postWriteImmInPlace!(r, o, l, i, w, s);
  }
  get peerLabel(): string {
    return this.inner.peerLabel;
  }
  get autoRepost(): boolean {
    return this.inner.autoRepost;
  }
  get state(): QueuePair['state'] {
    return this.inner.state;
  }
  get error(): QueuePair['error'] {
    return this.inner.error;
  }
  get peerIdentity(): QueuePair['peerIdentity'] {
    return this.inner.peerIdentity;
  }
  get pendingOps(): number {
    return this.inner.pendingOps;
  }
  /** The provider part of a mixed-device address: a tag byte says which ('s' or 'o'). */
  address(): Uint8Array {
    const a = this.inner.address();
    const out = new Uint8Array(a.byteLength + 1);
    out[0] = this.kind === 'shm' ? 0x73 : 0x6f;
    out.set(a, 1);
    return out;
  }
  connect(remote: Uint8Array): void {
    const where = `${this.owner.label}: connect to ${this.peerLabel}`;
    if (!(remote instanceof Uint8Array) || remote.byteLength < 1) throw new WeftError('EPROTO', `${where}: empty address`);
    const theirs = remote[0] === 0x73 ? 'shm' : remote[0] === 0x6f ? 'ofi' : undefined;
    if (theirs === undefined) throw new WeftError('EPROTO', `${where}: the address is not from a device that mixes providers (every rank of a job that spans hosts must run this weft version)`);
    if (theirs !== this.kind) {
      throw new WeftError('EPROTO', `${where}: this rank chose ${this.kind === 'shm' ? 'shared memory (same host)' : 'the fabric (another host)'} for the pair, the peer ${theirs === 'shm' ? 'shared memory' : 'the fabric'}: the ranks disagree on where the peer runs`);
    }
    this.inner.connect(remote.subarray(1));
  }
  importRegion(descriptor: Uint8Array): RemoteRegion {
    return this.inner.importRegion(descriptorPart(descriptor, this.kind, `${this.owner.label}: importRegion from ${this.peerLabel}`));
  }
  postWriteImm(local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    this.inner.postWriteImm(this.part(local), lOff, remote, rOff, len, imm, wrId, signaled);
  }
  postWriteImmInPlace?: QueuePair['postWriteImmInPlace'];
  postWrite(local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, wrId: number, signaled: boolean): void {
    this.inner.postWrite(this.part(local), lOff, remote, rOff, len, wrId, signaled);
  }
  postRead(local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, wrId: number, signaled: boolean): void {
    this.inner.postRead(this.part(local), lOff, remote, rOff, len, wrId, signaled);
  }
  postRecv(count: number): void {
    this.inner.postRecv(count);
  }
  handshake(): void {
    this.inner.handshake?.();
  }
  get handshakeState(): QueuePair['handshakeState'] {
    return this.inner.handshakeState;
  }
  close(): void {
    this.inner.close();
    this.owner.forget(this);
  }
  private part(local: MemoryRegion): MemoryRegion {
    if (!(local instanceof MixedMemoryRegion)) throw new WeftError('EINVAL', `${this.owner.label}: local must be a MemoryRegion of this device (toward ${this.peerLabel})`);
    if (this.kind === 'ofi') return local.ofi;
    if (!local.shm) throw new WeftError('EINVAL', `${this.owner.label}: the local region is not in shared memory; toward ${this.peerLabel} (same host) allocate it with device.allocate()`);
    return local.shm;
  }
}

class MixedCompletionQueue implements CompletionQueue {
  private readonly scratch = new CompletionBatch(256);
  private ofiFirst = false;

  constructor(private readonly dev: MixedDevice) {}

  poll(out: CompletionBatch, max = out.capacity): number {
    if (max > out.capacity) max = out.capacity;
    const d = this.dev;
    // Alternate which provider fills the batch first: a busy one must not starve the other.
    this.ofiFirst = !this.ofiFirst;
    const [first, firstMap, second, secondMap] = this.ofiFirst ? [d.ofi.cq, d.ofiToMixed, d.shm.cq, d.shmToMixed] : [d.shm.cq, d.shmToMixed, d.ofi.cq, d.ofiToMixed];
    let n = first.poll(out, max);
    n = translate(out, 0, n, firstMap);
    if (n < max) {
      const s = this.scratch;
      const k = second.poll(s, Math.min(max - n, s.capacity));
      for (let i = 0; i < k; i++) {
        const q = secondMap[s.qpn[i]];
        if (q < 0) continue; // a QP closed since
        out.copyEntry(n, s, i);
        out.qpn[n++] = q;
        s.errors[i] = undefined;
      }
    }
    out.count = n;
    return n;
  }

  ready(): boolean {
    // Both, always: the fabric only moves forward when polled.
    const a = this.dev.shm.cq.ready();
    const b = this.dev.ofi.cq.ready();
    return a || b;
  }

  readonly doorbell: Doorbell = {
    beforeSleep: () => {
      this.dev.shm.cq.doorbell.beforeSleep?.();
      this.dev.ofi.cq.doorbell.beforeSleep?.();
    },
    sleepSync: (ms, ready) => {
      const until = performance.now() + ms;
      const shm = this.dev.shm.cq.doorbell;
      do {
        shm.sleepSync(Math.min(SYNC_SLICE_MS, ms), ready);
        if (ready()) return;
      } while (performance.now() < until);
    },
    sleepAsync: async (ms, ready) => {
      const d = this.dev;
      let done = false;
      const fabric = d.ofi.cq.doorbell.sleepAsync(ms, ready).then(() => {
        // End the shared-memory sleep: ring our own futex.
        if (!done) {
          Atomics.add(d.shm.ctl, SL.DOORBELL, 1);
          native.futexWake(d.shm.ctl, SL.DOORBELL);
        }
      });
      try {
        await Promise.race([d.shm.cq.doorbell.sleepAsync(ms, ready), fabric]);
      } finally {
        done = true;
      }
    },
  };

  private readonly isReady = () => this.ready();

  wait(options: WaitOptions = {}): Promise<void> {
    if (this.ready()) return Promise.resolve();
    return waitAsync(this.isReady, this.doorbell, planFor(this.dev.oversubscribed, `${this.dev.label}: wait for completions`, options));
  }

  waitSync(options: WaitOptions = {}): void {
    if (this.ready()) return;
    waitSync(this.isReady, this.doorbell, planFor(this.dev.oversubscribed, `${this.dev.label}: waitSync for completions`, options));
  }
}

/** Rewrites entries [at, at+n) of `b` to this device's QP numbers, dropping unknown ones. */
function translate(b: CompletionBatch, at: number, n: number, map: Int16Array): number {
  let k = at;
  for (let i = at; i < at + n; i++) {
    const q = map[b.qpn[i]];
    if (q < 0) continue;
    if (k !== i) b.copyEntry(k, b, i);
    b.qpn[k++] = q;
  }
  for (let i = k; i < at + n; i++) b.errors[i] = undefined;
  return k;
}

/**
 * One device over shared memory (peers on this host) and a fabric (peers elsewhere).
 *
 * @example
 * const dev = new MixedDevice(await createDevice({ provider: 'shm' }) as ShmDevice, await createDevice({ provider: 'ofi' }));
 * const qp = dev.createQueuePair({ peerLabel: 'rank 3', peerHostId: hosts.ranks[3].hostId });
 */
export class MixedDevice implements Device {
  readonly provider = 'mixed' as const;
  readonly providerName: string;
  readonly label: string;
  readonly cq: CompletionQueue;
  readonly shmToMixed = new Int16Array(MAX_QPS).fill(-1);
  readonly ofiToMixed = new Int16Array(MAX_QPS).fill(-1);
  private readonly qps: (MixedQueuePair | undefined)[] = new Array(MAX_QPS).fill(undefined);
  private nextQpn = 0;
  private closed = false;

  constructor(
    readonly shm: ShmDevice,
    readonly ofi: Device,
  ) {
    this.label = shm.label;
    this.providerName = `shm+${ofi.providerName}`;
    this.cq = new MixedCompletionQueue(this);
  }

  get oversubscribed(): boolean {
    return this.shm.oversubscribed || this.ofi.oversubscribed;
  }

  allocate(byteLength: number): MemoryRegion {
    this.checkOpen('allocate');
    const s = this.shm.allocate(byteLength);
    try {
      return new MixedMemoryRegion(s, this.ofi.register(s.bytes));
    } catch (err) {
      s.deregister();
      throw err;
    }
  }

  register(view: ArrayBufferView): MemoryRegion {
    this.checkOpen('register');
    let s: MemoryRegion | undefined;
    try {
      s = this.shm.register(view);
    } catch {
      s = undefined; // JS-heap memory: the fabric only
    }
    try {
      return new MixedMemoryRegion(s, this.ofi.register(view));
    } catch (err) {
      s?.deregister();
      throw err;
    }
  }

  createQueuePair(options: QueuePairOptions = {}): QueuePair {
    this.checkOpen('createQueuePair');
    const where = `${this.label}: createQueuePair toward ${options.peerLabel ?? 'a peer'}`;
    if (options.peerHostId === undefined) throw new WeftError('EINVAL', `${where}: a device that mixes providers needs the peer's host (QueuePairOptions.peerHostId) to pick shared memory or the fabric`);
    let qpn = -1;
    for (let k = 0; k < MAX_QPS; k++) {
      const c = (this.nextQpn + k) % MAX_QPS;
      if (this.qps[c] === undefined) {
        qpn = c;
        break;
      }
    }
    if (qpn < 0) throw new WeftError('EINVAL', `${where}: more than ${MAX_QPS} queue pairs on one device`);
    this.nextQpn = (qpn + 1) % MAX_QPS;
    const kind = options.peerHostId === localIdentity().hostId ? 'shm' : 'ofi';
    const inner = (kind === 'shm' ? this.shm : this.ofi).createQueuePair(options);
    const qp = new MixedQueuePair(qpn, inner, kind, this);
    (kind === 'shm' ? this.shmToMixed : this.ofiToMixed)[inner.qpn] = qpn;
    this.qps[qpn] = qp;
    return qp;
  }

  /** A closed QP's number is free again; its late completions are dropped. */
  forget(qp: MixedQueuePair): void {
    if (this.qps[qp.qpn] !== qp) return;
    this.qps[qp.qpn] = undefined;
    (qp.kind === 'shm' ? this.shmToMixed : this.ofiToMixed)[qp.inner.qpn] = -1;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const qp of this.qps) qp?.close();
    this.ofi.close();
    this.shm.close();
  }

  private checkOpen(what: string): void {
    if (this.closed) throw new WeftError('ECLOSED', `${this.label}: ${what} on a closed device`);
  }
}
