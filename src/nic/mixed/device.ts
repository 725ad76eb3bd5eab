/**
 * The device of a job that spans hosts: shared memory toward peers on this host, the fabric
 * toward the others, behind ONE Device, so the transport, the collectives and copyrpc run
 * unchanged over a mix. Each queue pair runs on the provider its peer's host calls for (known
 * at creation from `QueuePairOptions.peerHostId`, else at connect from the peer's address),
 * and answers to a QP number of this device, so completions of both providers reach their
 * owner through one completion queue and one O(1) table.
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
import { turn, waitForCompletions, waitForCompletionsSync, type Doorbell } from '../../host/wait.js';
import type { WaitOptions } from '../../util/deadline.js';
import { CompletionBatch, type CompletionQueue, type Device, type MemoryRegion, type QueuePair, type QueuePairOptions, type RemoteRegion } from '../types.js';
import type { ShmDevice } from '../shm/device.js';
import * as SL from '../shm/layout.js';

/** QP numbers of this device stay below this (the completion router's table size). */
const MAX_QPS = 1024;
const DESC_MAGIC = 0x31584d57; // 'WMX1'
/** Without the fabric's relay (no wait fd), a blocking sleeper looks at the fabric this often. */
const SYNC_SLICE_MS = 1;
/**
 * pollNear reads an idle fabric at least every this many calls and this many ms. A waiting
 * rank polls every 0.1-1 us while spinning and every 5-30 us while yielding to others on
 * its core, so an unasked arrival from another host waits at most ~0.2 ms more to be seen.
 */
const FABRIC_IDLE_POLLS = 32;
const FABRIC_IDLE_MS = 0.2;
/**
 * After a read of the fabric found something, pollNear reads it every time for this long:
 * a peer on another host that streams into this rank's rings (ahead of this rank, which is
 * still in a step over shared memory) needs this side's progress to move its bytes, and
 * reading it only every 0.2 ms made a 1 MiB allreduce on 2 hosts x 2 ranks ~13% slower.
 * So only a rank that does not use the fabric at all (a non-leader of a small hierarchical
 * allreduce) leaves it unread.
 */
const FABRIC_ACTIVE_MS = 2;

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

/** Whether `desc` starts as a mixed descriptor does (the rest is descriptorPart's to check). */
function isMixedDescriptor(desc: Uint8Array): boolean {
  return desc instanceof Uint8Array && desc.byteLength >= 4 && new DataView(desc.buffer, desc.byteOffset, 4).getUint32(0, true) === DESC_MAGIC;
}

/** The part of a mixed descriptor for one provider; throws EPROTO on malformed bytes. */
export function descriptorPart(desc: Uint8Array, kind: 'shm' | 'ofi', where: string): Uint8Array {
  const bad = (why: string) => new WeftError('EPROTO', `${where}: malformed region descriptor (${why})`);
  if (!(desc instanceof Uint8Array) || desc.byteLength < 12) throw bad('too short');
  const v = new DataView(desc.buffer, desc.byteOffset, desc.byteLength);
  if (!isMixedDescriptor(desc)) throw bad('not from a device that mixes providers');
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

const TAG_SHM = 0x73; // 's'
const TAG_OFI = 0x6f; // 'o'
const TAG_BOTH = 0x64; // 'd'
const HOST_BYTES = 16;

function hostIdBytes(hex: string): Uint8Array {
  const out = new Uint8Array(HOST_BYTES);
  for (let i = 0; i < HOST_BYTES; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function hostIdHex(b: Uint8Array): string {
  let s = '';
  for (let i = 0; i < HOST_BYTES; i++) s += b[i].toString(16).padStart(2, '0');
  return s;
}

/**
 * A QP answering to this device's QP number over one provider. Created for a known peer host
 * it holds that provider's QP only. Created without one (copyrpc's mesh, a user's own QPs) it
 * holds a QP of each provider until connect, whose address says the peer's host; the other
 * one is then closed.
 *
 * Address: tag byte ('s' shm, 'o' fabric, 'd' both), this host's 16-byte id, then the QP's
 * address (for 'd': u32 length of the shm address, the shm address, the fabric address).
 */
class MixedQueuePair implements QueuePair {
  private chosen: QueuePair;
  private shmQp: QueuePair | undefined;
  private ofiQp: QueuePair | undefined;
  kind: 'shm' | 'ofi' | 'both';

  constructor(
    readonly qpn: number,
    shmQp: QueuePair | undefined,
    ofiQp: QueuePair | undefined,
    private readonly owner: MixedDevice,
  ) {
    this.shmQp = shmQp;
    this.ofiQp = ofiQp;
    this.kind = shmQp && ofiQp ? 'both' : shmQp ? 'shm' : 'ofi';
    // Until connect decides, state and labels come from either (they agree).
    this.chosen = (shmQp ?? ofiQp)!;
  }
  /** The provider QP in use ('both' before connect: the shm one). */
  get inner(): QueuePair {
    return this.chosen;
  }
  get peerLabel(): string {
    return this.chosen.peerLabel;
  }
  /** Over shared memory (decided: a QP not yet connected may still go either way). */
  get nearby(): boolean {
    return this.kind === 'shm';
  }
  get autoRepost(): boolean {
    return this.chosen.autoRepost;
  }
  get state(): QueuePair['state'] {
    return this.chosen.state;
  }
  get error(): QueuePair['error'] {
    return this.chosen.error;
  }
  get peerIdentity(): QueuePair['peerIdentity'] {
    return this.chosen.peerIdentity;
  }
  get peerAddress(): string | undefined {
    return this.chosen.peerAddress;
  }
  get pendingOps(): number {
    return this.chosen.pendingOps;
  }
  get unansweredMs(): number | undefined {
    return this.chosen.unansweredMs;
  }
  get handshakeState(): QueuePair['handshakeState'] {
    return this.chosen.handshakeState;
  }
  address(): Uint8Array {
    const host = hostIdBytes(localIdentity().hostId);
    if (this.kind !== 'both') {
      const a = this.chosen.address();
      const out = new Uint8Array(1 + HOST_BYTES + a.byteLength);
      out[0] = this.kind === 'shm' ? TAG_SHM : TAG_OFI;
      out.set(host, 1);
      out.set(a, 1 + HOST_BYTES);
      return out;
    }
    const a = this.shmQp!.address();
    const b = this.ofiQp!.address();
    const out = new Uint8Array(1 + HOST_BYTES + 4 + a.byteLength + b.byteLength);
    out[0] = TAG_BOTH;
    out.set(host, 1);
    new DataView(out.buffer).setUint32(1 + HOST_BYTES, a.byteLength, true);
    out.set(a, 5 + HOST_BYTES);
    out.set(b, 5 + HOST_BYTES + a.byteLength);
    return out;
  }
  connect(remote: Uint8Array): void {
    const where = `${this.owner.label}: connect to ${this.peerLabel}`;
    if (!(remote instanceof Uint8Array) || remote.byteLength < 1 + HOST_BYTES) throw new WeftError('EPROTO', `${where}: the address is too short`);
    const tag = remote[0];
    if (tag !== TAG_SHM && tag !== TAG_OFI && tag !== TAG_BOTH) throw new WeftError('EPROTO', `${where}: the address is not from a device that mixes providers (every rank of a job that spans hosts must run this weft version)`);
    const same = hostIdHex(remote.subarray(1, 1 + HOST_BYTES)) === localIdentity().hostId;
    const want = same ? 'shm' : 'ofi';
    const body = remote.subarray(1 + HOST_BYTES);
    let part: Uint8Array;
    if (tag === TAG_BOTH) {
      if (body.byteLength < 4) throw new WeftError('EPROTO', `${where}: the address is too short`);
      const n = new DataView(body.buffer, body.byteOffset, 4).getUint32(0, true);
      if (4 + n > body.byteLength) throw new WeftError('EPROTO', `${where}: the address's shm part runs past its end`);
      part = want === 'shm' ? body.subarray(4, 4 + n) : body.subarray(4 + n);
    } else {
      const theirs = tag === TAG_SHM ? 'shm' : 'ofi';
      if (theirs !== want) throw new WeftError('EPROTO', `${where}: the peer chose ${theirs === 'shm' ? 'shared memory (same host)' : 'the fabric (another host)'} for the pair, but it runs on ${same ? 'this' : 'another'} host: the ranks disagree on where the peer runs`);
      part = body;
    }
    const qp = want === 'shm' ? this.shmQp : this.ofiQp;
    if (!qp) throw new WeftError('EPROTO', `${where}: this QP was made for a peer on ${want === 'shm' ? 'another' : 'this'} host, but the peer runs on ${want === 'shm' ? 'this' : 'another'} one`);
    if (this.kind === 'both') {
      const other = want === 'shm' ? this.ofiQp! : this.shmQp!;
      other.close();
      this.owner.unmap(other, want === 'shm' ? 'ofi' : 'shm');
      if (want === 'shm') this.ofiQp = undefined;
      else this.shmQp = undefined;
      this.kind = want;
    }
    this.chosen = qp;
    qp.connect(part);
  }
  /**
   * Imports a mixed descriptor (its part for this QP's provider), or one of this QP's provider
   * alone (a shared array's record carries the shared-memory part only), which that provider
   * checks as it checks any.
   */
  importRegion(descriptor: Uint8Array): RemoteRegion {
    if (!isMixedDescriptor(descriptor)) return this.chosen.importRegion(descriptor);
    return this.chosen.importRegion(descriptorPart(descriptor, this.kind === 'ofi' ? 'ofi' : 'shm', `${this.owner.label}: importRegion from ${this.peerLabel}`));
  }
  postWriteImm(local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    this.chosen.postWriteImm(this.part(local), lOff, remote, rOff, len, imm, wrId, signaled);
  }
  postWriteImmInPlace(remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    if (!this.chosen.postWriteImmInPlace) throw new WeftError('EINVAL', `${this.owner.label}: postWriteImmInPlace toward ${this.peerLabel}, a peer on another host (shared memory only)`);
    this.chosen.postWriteImmInPlace(remote, rOff, len, imm, wrId, signaled);
  }
  copyNow(read: boolean, local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number): boolean {
    // A region post would refuse is not copied: post says why.
    if (this.chosen.copyNow === undefined || !(local instanceof MixedMemoryRegion) || !local.shm) return false;
    return this.chosen.copyNow(read, local.shm, lOff, remote, rOff, len);
  }
  postWrite(local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, wrId: number, signaled: boolean): void {
    this.chosen.postWrite(this.part(local), lOff, remote, rOff, len, wrId, signaled);
  }
  postRead(local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, wrId: number, signaled: boolean): void {
    this.chosen.postRead(this.part(local), lOff, remote, rOff, len, wrId, signaled);
  }
  postRecv(count: number): void {
    this.shmQp?.postRecv(count);
    this.ofiQp?.postRecv(count);
  }
  handshake(): void {
    this.chosen.handshake?.();
  }
  close(): void {
    this.shmQp?.close();
    this.ofiQp?.close();
    this.owner.forget(this);
  }
  /** The provider QPs this one holds (for the device's number maps). */
  parts(): [QueuePair | undefined, QueuePair | undefined] {
    return [this.shmQp, this.ofiQp];
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
  /** pollNear calls since the fabric was last read, and when that was (performance.now()). */
  private nearPolls = 0;
  private fabricReadAt = 0;
  /** When a read of the fabric last found something (performance.now()). */
  private fabricActiveAt = -Infinity;
  /** Polls that left an idle fabric unread (pollNear): for reports and tests. */
  fabricSkips = 0;

  constructor(private readonly dev: MixedDevice) {}

  /**
   * Shared memory only, while the fabric is idle here (no work of ours in flight, nothing
   * found in it for FABRIC_ACTIVE_MS): it is still read every FABRIC_IDLE_POLLS calls and at
   * least every FABRIC_IDLE_MS, so that what a peer on another host sends unasked (an abort,
   * a message for a later step, a copyrpc call) is taken in soon. A waiter that sleeps reads
   * it on every wake-up (slices are longer than that).
   */
  pollNear(out: CompletionBatch, max = out.capacity): number {
    const d = this.dev;
    if (++this.nearPolls >= FABRIC_IDLE_POLLS || d.ofi.hasWorkInFlight?.() !== false) return this.poll(out, max);
    const now = performance.now();
    if (now - this.fabricReadAt >= FABRIC_IDLE_MS || now - this.fabricActiveAt < FABRIC_ACTIVE_MS) return this.poll(out, max);
    this.fabricSkips++;
    if (max > out.capacity) max = out.capacity;
    const n = translate(out, 0, d.shm.cq.poll(out, max), d.shmToMixed);
    out.count = n;
    return n;
  }

  poll(out: CompletionBatch, max = out.capacity): number {
    this.nearPolls = 0;
    const now = (this.fabricReadAt = performance.now());
    if (max > out.capacity) max = out.capacity;
    const d = this.dev;
    // Alternate which provider fills the batch first: a busy one must not starve the other.
    const ofiFirst = (this.ofiFirst = !this.ofiFirst);
    const first = ofiFirst ? d.ofi.cq : d.shm.cq;
    const firstMap = ofiFirst ? d.ofiToMixed : d.shmToMixed;
    const second = ofiFirst ? d.shm.cq : d.ofi.cq;
    const secondMap = ofiFirst ? d.shmToMixed : d.ofiToMixed;
    let n = first.poll(out, max);
    if (ofiFirst && n > 0) this.fabricActiveAt = now;
    n = translate(out, 0, n, firstMap);
    if (n < max) {
      const s = this.scratch;
      const k = second.poll(s, Math.min(max - n, s.capacity));
      if (!ofiFirst && k > 0) this.fabricActiveAt = now;
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
      const d = this.dev;
      // One futex sleep that ends on either: peers on this host ring the shm doorbell, and the
      // fabric's helper thread rings the same word when the CQ's fd turns readable (armed
      // after the doorbell's value is read, so a ring in between is not lost). When the fabric
      // has work pending (fi_trywait: its fd would not tell) or no relay, a short slice, then
      // the caller polls both again. (Before the relay every sleep was 1 ms slices, and a
      // fabric completion waited up to a slice for the sleeper to look.)
      const fabricQuiet = d.ofi.cq.doorbell.mayBlock?.() !== false;
      d.shm.cq.sleepSync(ms, ready, () => (fabricQuiet && d.ofi.ringOnActivity?.(d.shm.ctl, SL.DOORBELL) ? ms : SYNC_SLICE_MS));
    },
    sleepAsync: async (ms, ready) => {
      const d = this.dev;
      // The fabric has work: poll both again after one event-loop turn (a futex sleep on the
      // threadpool per turn would pile up behind the pool's four threads).
      if (d.ofi.cq.doorbell.mayBlock?.() === false) return turn();
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
    return waitForCompletions(this.isReady, this.doorbell, this.dev.oversubscribed, this.dev.label, options);
  }

  waitSync(options: WaitOptions = {}): void {
    waitForCompletionsSync(this.isReady, this.doorbell, this.dev.oversubscribed, this.dev.label, options);
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

  flush(): void {
    this.ofi.flush?.();
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
    const known = options.peerHostId;
    const shmQp = known === undefined || known === localIdentity().hostId ? this.shm.createQueuePair(options) : undefined;
    let ofiQp: QueuePair | undefined;
    try {
      ofiQp = known === undefined || known !== localIdentity().hostId ? this.ofi.createQueuePair(options) : undefined;
    } catch (err) {
      shmQp?.close();
      throw err;
    }
    const qp = new MixedQueuePair(qpn, shmQp, ofiQp, this);
    if (shmQp) this.shmToMixed[shmQp.qpn] = qpn;
    if (ofiQp) this.ofiToMixed[ofiQp.qpn] = qpn;
    this.qps[qpn] = qp;
    return qp;
  }

  /** A provider QP closed before its mixed QP (the one connect did not choose). */
  unmap(inner: QueuePair, kind: 'shm' | 'ofi'): void {
    (kind === 'shm' ? this.shmToMixed : this.ofiToMixed)[inner.qpn] = -1;
  }

  /** A closed QP's number is free again; its late completions are dropped. */
  forget(qp: MixedQueuePair): void {
    if (this.qps[qp.qpn] !== qp) return;
    this.qps[qp.qpn] = undefined;
    const [a, b] = qp.parts();
    if (a) this.shmToMixed[a.qpn] = -1;
    if (b) this.ofiToMixed[b.qpn] = -1;
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
