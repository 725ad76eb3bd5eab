/**
 * A shm queue pair. The initiator's CPU plays the NIC: a WRITE copies into the peer's mapped
 * segment and publishes a completion into the peer's ring; a READ copies out of it, with no
 * work by the peer. Operations run inside the post call when nothing is queued ahead and a
 * receive credit is available, so the fast path is one copy and a handful of Atomics;
 * otherwise they queue in order and run from poll()/wait() (receiver-not-ready back-pressure).
 */
import { OP_NAMES, QueuePairBase } from '../queue-pair-base.js';
import { WeftError } from '../../errors.js';
import { isSameHost, type ProcessIdentity } from '../../host/identity.js';
import { BLOB_HEAD_BYTES, newBlob, PROVIDER_TAG, readBlob } from '../blob.js';
import { Opcode, Status, type MemoryRegion, type QueuePair, type RemoteRegion } from '../types.js';
import { copyBytes } from '../../host/copy.js';
import { importShmRegion, ShmMemoryRegion, ShmRemoteRegion } from './memory.js';
import type { PeerControl } from './peer.js';
import { parseSegmentName } from '../../host/segments.js';
import type { LocalCompletions } from '../local-completions.js';
import * as L from './layout.js';

/** 'WQP1' little-endian. */
export const QP_MAGIC = 0x31505157;
const ADDR_FIXED = BLOB_HEAD_BYTES + 8 + 1;

/** What a QP needs from its device. */
export interface QpHost {
  readonly label: string;
  readonly ctl: Int32Array;
  readonly identity: ProcessIdentity;
  readonly nonce: number;
  readonly prefix: string;
  readonly local: LocalCompletions;
  readonly opTimeoutMs: number;
  mapPeer(prefix: string, identity: ProcessIdentity, label: string): PeerControl;
  releasePeer(peer: PeerControl): void;
  addCredits(qpn: number, n: number): void;
  queued(qp: ShmQueuePair): void;
  detach(qp: ShmQueuePair): void;
}

interface PendingOp {
  op: number;
  /** null: a WRITE_IMM whose bytes are already in place (postWriteImmInPlace). */
  local: ShmMemoryRegion | null;
  lOff: number;
  remote: ShmRemoteRegion;
  rOff: number;
  len: number;
  imm: number;
  wrId: number;
  signaled: boolean;
  at: number;
}


export class ShmQueuePair extends QueuePairBase implements QueuePair {
  state: 'init' | 'ready' | 'error' | 'closed' = 'init';
  error: WeftError | undefined;
  peer: PeerControl | undefined;
  private remoteQpn = -1;
  private grantedIdx = 0;
  private used = 0;
  /** Credits known to be available without re-reading the peer's grant word (a cache miss). */
  private credits = 0;
  private waiterArmed = false;
  private readonly sq: PendingOp[] = [];
  private errorStatus: number = Status.FLUSHED;

  constructor(
    private readonly host: QpHost,
    readonly qpn: number,
    readonly peerLabel: string,
    readonly autoRepost: boolean,
  ) {
    super();
  }

  get peerIdentity(): ProcessIdentity | undefined {
    return this.peer?.identity;
  }

  get pendingOps(): number {
    return this.sq.length;
  }

  address(): Uint8Array {
    const prefix = Buffer.from(this.host.prefix, 'latin1');
    const { out, view: v } = newBlob(ADDR_FIXED + prefix.length, QP_MAGIC, PROVIDER_TAG.shm, this.host.identity);
    const o = BLOB_HEAD_BYTES;
    v.setUint32(o, this.qpn, true);
    v.setInt32(o + 4, this.host.nonce, true);
    v.setUint8(o + 8, prefix.length);
    out.set(prefix, ADDR_FIXED);
    return out;
  }

  connect(remoteAddress: Uint8Array): void {
    const where = `${this.host.label}: connect to ${this.peerLabel}`;
    if (this.state !== 'init') throw new WeftError('EINVAL', `${where}: the QP is ${this.state}; create a new QP to reconnect`);
    const { view: v, identity } = readBlob(remoteAddress, QP_MAGIC, PROVIDER_TAG.shm, 'weft QP address', where);
    if (remoteAddress.byteLength < ADDR_FIXED) throw new WeftError('EPROTO', `${where}: the address is not a shm QP address (too short)`);
    const o = BLOB_HEAD_BYTES;
    const rqpn = v.getUint32(o, true);
    const nonce = v.getInt32(o + 4, true);
    const plen = v.getUint8(o + 8);
    if (remoteAddress.byteLength !== ADDR_FIXED + plen || rqpn >= L.MAX_QPS) throw new WeftError('EPROTO', `${where}: malformed shm QP address`);
    const prefix = Buffer.from(remoteAddress.subarray(ADDR_FIXED)).toString('latin1');
    const parsed = parseSegmentName(`${prefix}.ctl`);
    if (!parsed || parsed.pid !== identity.pid || parsed.startTime !== identity.startTime) throw new WeftError('EPROTO', `${where}: the address names segment ${prefix} that its identity does not own`);
    if (!isSameHost(identity)) throw new WeftError('EINVAL', `${where}: the peer runs on another host; use provider 'ofi' between hosts`);
    const peer = this.host.mapPeer(prefix, identity, this.peerLabel);
    if (peer.nonce !== nonce || Atomics.load(peer.i32, L.QP_STATE + rqpn) !== L.QP_OPEN) {
      this.host.releasePeer(peer);
      throw new WeftError('EPEERDEAD', `${where}: the peer QP ${rqpn} is not open (the peer closed or restarted); exchange fresh addresses`);
    }
    this.peer = peer;
    this.remoteQpn = rqpn;
    this.grantedIdx = L.QP_GRANTED + rqpn;
    this.state = 'ready';
  }

  importRegion(descriptor: Uint8Array): RemoteRegion {
    if (!this.peer) throw new WeftError('EINVAL', `${this.host.label}: importRegion on a QP toward ${this.peerLabel} that is not connected; call connect first`);
    const region = importShmRegion(this.peer, descriptor, `${this.host.label}: importRegion from ${this.peerLabel}`);
    // A key no longer in the peer's table because the peer is closing or gone (its device
    // closes its QPs before it deregisters its memory): say so, not "a 0-byte region".
    if (!region.valid() && (Atomics.load(this.peer.i32, L.QP_STATE + this.remoteQpn) !== L.QP_OPEN || !this.peer.alive())) {
      throw new WeftError('EPEERDEAD', `${this.host.label}: importRegion from ${this.peerLabel}: the peer closed its device or exited (pid ${this.peer.identity.pid})`);
    }
    return region;
  }

  postRecv(count: number): void {
    if (!Number.isInteger(count) || count < 0) throw new WeftError('EINVAL', `${this.host.label}: postRecv(count) needs a non-negative integer, got ${count}`);
    if (this.state === 'closed') throw new WeftError('ECLOSED', `${this.host.label}: postRecv on a closed QP toward ${this.peerLabel}`);
    this.host.addCredits(this.qpn, count);
  }


  protected post(op: number, local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    // Bad arguments are the caller's bug: throw before anything moves.
    if (!(local instanceof ShmMemoryRegion) || local.deregistered || local.owner.ctl !== this.host.ctl) this.badArg(op, 'local must be a registered MemoryRegion of this device');
    this.checkRemote(op, remote);
    this.checkRanges(op, local.byteLength, lOff, len, rOff);
    this.submit(op, local, lOff, remote, rOff, len, imm, wrId, signaled);
  }

  /**
   * A WRITE_IMM of `len` bytes that the caller already stored at `remote.direct[rOff..]`:
   * completes at the target exactly like postWriteImm (same length and immediate), without
   * the copy. The caller must not have stored past what the target lets it write (its ring
   * protocol's job, as for the bytes a copy would have placed).
   */
  postWriteImmInPlace(remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    const op = Opcode.WRITE_IMM;
    this.checkRemote(op, remote);
    this.checkRanges(op, len, 0, len, rOff);
    this.submit(op, null, 0, remote, rOff, len, imm, wrId, signaled);
  }

  /** QueuePair.copyNow: the checks of post and run, as a test instead of an error. */
  copyNow(read: boolean, local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number): boolean {
    if (this.state !== 'ready' || this.sq.length !== 0) return false;
    if (!(local instanceof ShmMemoryRegion) || local.deregistered || local.owner.ctl !== this.host.ctl) return false;
    if (!(remote instanceof ShmRemoteRegion) || remote.peer !== this.peer) return false;
    if ((len >>> 0) !== len || (lOff >>> 0) !== lOff || (rOff >>> 0) !== rOff || lOff + len > local.byteLength || rOff + len > remote.byteLength || !remote.valid()) return false;
    if (read) copyBytes(local.seg8, local.seg32, local.offset + lOff, remote.seg8, remote.seg32, remote.base + rOff, len);
    else copyBytes(remote.seg8, remote.seg32, remote.base + rOff, local.seg8, local.seg32, local.offset + lOff, len);
    return true;
  }

  private checkRemote(op: number, remote: RemoteRegion): asserts remote is ShmRemoteRegion {
    if (!(remote instanceof ShmRemoteRegion) || remote.peer !== this.peer) this.badArg(op, 'remote must come from importRegion on this QP');
  }

  /** Runs the checked operation now, queues it behind others, or fails it when the QP is not ready. */
  private submit(op: number, local: ShmMemoryRegion | null, lOff: number, remote: ShmRemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    if (this.state !== 'ready') {
      if (this.state === 'init') throw new WeftError('EINVAL', `${this.host.label}: ${OP_NAMES[op]} toward ${this.peerLabel} before connect`);
      this.host.local.push(this.qpn, op, this.errorStatus, 0, wrId >>> 0, this.opError(op, wrId));
      return;
    }
    if (this.sq.length === 0 && this.run(op, local, lOff, remote, rOff, len, imm, wrId, signaled)) return;
    this.sq.push({ op, local, lOff, remote, rOff, len, imm, wrId, signaled, at: performance.now() });
    this.host.queued(this);
  }

  /** Executes one operation; false when a WRITE_IMM must wait for a receive credit. */
  private run(op: number, local: ShmMemoryRegion | null, lOff: number, remote: ShmRemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): boolean {
    const peer = this.peer as PeerControl;
    if (rOff + len > remote.byteLength || !remote.valid()) {
      this.host.local.push(this.qpn, op, Status.REMOTE_ACCESS, 0, wrId >>> 0, this.accessError(op, wrId, remote, rOff, len));
      return true;
    }
    // local is null only for a WRITE_IMM in place.
    if (op === Opcode.READ) {
      local = local as ShmMemoryRegion;
      copyBytes(local.seg8, local.seg32, local.offset + lOff, remote.seg8, remote.seg32, remote.base + rOff, len);
    } else if (op === Opcode.WRITE) {
      local = local as ShmMemoryRegion;
      copyBytes(remote.seg8, remote.seg32, remote.base + rOff, local.seg8, local.seg32, local.offset + lOff, len);
    } else {
      const t = peer.i32;
      if (this.credits <= 0) {
        this.credits = (Atomics.load(t, this.grantedIdx) - this.used) | 0;
        if (this.credits <= 0 && !this.armCreditWaiter()) return false;
      }
      if (local !== null) copyBytes(remote.seg8, remote.seg32, remote.base + rOff, local.seg8, local.seg32, local.offset + lOff, len);
      const pos = Atomics.add(t, L.CQ_TAIL, 1);
      const b = L.CQ_RING + ((pos & peer.mask) << 2);
      t[b + 1] = this.remoteQpn;
      t[b + 2] = imm;
      t[b + 3] = len;
      Atomics.store(t, b, (pos + 1) | 0);
      this.used = (this.used + 1) | 0;
      this.credits--;
      peer.ring();
    }
    if (signaled) this.host.local.push(this.qpn, op, Status.SUCCESS, len, wrId >>> 0);
    return true;
  }

  /**
   * Asks the peer to publish its deferred grants and ring our doorbell when it does; true if
   * a credit showed up meanwhile.
   */
  private armCreditWaiter(): boolean {
    const peer = this.peer as PeerControl;
    Atomics.store(peer.i32, L.QP_WAITER + this.remoteQpn, 1);
    this.waiterArmed = true;
    peer.ring();
    this.credits = (Atomics.load(peer.i32, this.grantedIdx) - this.used) | 0;
    return this.credits > 0;
  }

  /** Runs queued operations in order; called by the device's progress loop. */
  drain(now: number): void {
    const sq = this.sq;
    let i = 0;
    while (i < sq.length && this.state === 'ready') {
      const p = sq[i];
      if (!this.run(p.op, p.local, p.lOff, p.remote, p.rOff, p.len, p.imm, p.wrId, p.signaled)) break;
      i++;
    }
    if (i > 0) sq.splice(0, i);
    if (sq.length > 0 && this.state === 'ready') {
      if (Atomics.load((this.peer as PeerControl).i32, L.QP_STATE + this.remoteQpn) !== L.QP_OPEN) {
        this.fail(Status.FLUSHED, `${this.peerLabel} closed its QP`);
      } else if (now - sq[0].at > this.host.opTimeoutMs) {
        this.fail(Status.TIMEOUT, `no receive credit from ${this.peerLabel} for ${this.host.opTimeoutMs} ms (the peer is not polling its completion queue, or it is stuck); raise opTimeoutMs or make the peer poll`);
      }
    }
  }

  /** Checks the peer; moves to the error state when it is gone. */
  checkPeer(): void {
    if (this.state !== 'ready' || !this.peer) return;
    if (!this.peer.alive()) this.fail(Status.PEER_DEAD, `${this.peerLabel} (pid ${this.peer.identity.pid}) is dead`);
    else if (Atomics.load(this.peer.i32, L.QP_STATE + this.remoteQpn) !== L.QP_OPEN && this.sq.length > 0) this.fail(Status.FLUSHED, `${this.peerLabel} closed its QP`);
  }

  /** Moves to the error state: queued operations and later posts fail with `status`. */
  fail(status: number, reason: string): void {
    if (this.state !== 'ready' && this.state !== 'init') return;
    this.state = 'error';
    this.errorStatus = status;
    const code = status === Status.PEER_DEAD ? 'EPEERDEAD' : status === Status.TIMEOUT ? 'ETIMEDOUT' : 'ECLOSED';
    this.error = new WeftError(code, `${this.host.label}: QP ${this.qpn} toward ${this.peerLabel} failed: ${reason}`);
    this.flush(status);
    this.host.local.push(this.qpn, Opcode.QP_EVENT, status, 0, 0, this.error);
  }

  close(): void {
    if (this.state === 'closed') return;
    if (this.state === 'ready' || this.state === 'init') this.errorStatus = Status.FLUSHED;
    this.flush(Status.FLUSHED);
    if (this.waiterArmed && this.peer) Atomics.store(this.peer.i32, L.QP_WAITER + this.remoteQpn, 0);
    this.state = 'closed';
    this.host.detach(this);
    if (this.peer) this.host.releasePeer(this.peer);
  }

  private flush(status: number): void {
    for (const p of this.sq) this.host.local.push(this.qpn, p.op, status, 0, p.wrId >>> 0, this.opError(p.op, p.wrId, status));
    this.sq.length = 0;
  }

  private opError(op: number, wrId: number, status = this.errorStatus): WeftError {
    const base = this.error ?? new WeftError('ECLOSED', `${this.host.label}: QP ${this.qpn} toward ${this.peerLabel} is ${this.state}`);
    const code = status === Status.PEER_DEAD ? 'EPEERDEAD' : status === Status.TIMEOUT ? 'ETIMEDOUT' : 'ECLOSED';
    return new WeftError(code, `${this.host.label}: ${OP_NAMES[op]} (wr ${wrId}) toward ${this.peerLabel} not executed: ${base.message}`, { cause: base });
  }

  private accessError(op: number, wrId: number, remote: ShmRemoteRegion, rOff: number, len: number): WeftError {
    const why = remote.valid() ? `range [${rOff}, ${rOff + len}) exceeds the ${remote.byteLength}-byte region` : 'the key is not registered there (forged, stale or deregistered descriptor)';
    return new WeftError('EREMOTEACCESS', `${this.host.label}: ${OP_NAMES[op]} (wr ${wrId}) toward ${this.peerLabel} refused: ${why}; target memory is unchanged`);
  }

  protected localLabel(): string {
    return this.host.label;
  }
}
