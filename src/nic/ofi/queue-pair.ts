/**
 * An ofi queue pair: RC semantics on a libfabric RDM endpoint shared by all QPs of the device.
 *
 * - Posts go into the device's command array (one native `submit` per batch: from poll/wait,
 *   or a microtask after the posting code returns).
 * - Every operation gets a slot in this QP's in-flight ring, in post order; completions mark
 *   slots and are reported only when every earlier slot is done, so completions come out in
 *   post order even where the provider completes out of order, and `pendingOps` is exact.
 *   All fabric operations ask for a completion (unsignaled successes are dropped here) so
 *   the ring knows when each slot is free.
 * - Ordering the provider does not keep (tcp: write after read) is kept by holding the later
 *   operation until the conflicting ones complete.
 * - Receive credits are software: the target publishes its cumulative grant count with an
 *   fi_write into our control region (at most one per QP per poll); a WRITE_IMM without a
 *   credit waits here, with everything posted after it (nothing is lost or reordered).
 * - A region imported from a descriptor is verified before its first use by reading the
 *   peer's MR-table entry (memory.ts says why); operations queue behind the check.
 */
import { OP_NAMES, QueuePairBase } from '../queue-pair-base.js';
import { WeftError, type WeftErrorCode } from '../../errors.js';
import { isPeerAlive, isSameHost, type ProcessIdentity } from '../../host/identity.js';
import { sweepDeadSegments } from '../../host/segments.js';
import { sweepFabricSegments } from '../../host/fabric-segments.js';
import type { LocalCompletions } from '../local-completions.js';
import { Opcode, Status, type MemoryRegion, type QueuePair, type RemoteRegion } from '../types.js';
import type { CommandBuffer } from './commands.js';
import * as L from './layout.js';
import { INVALID, OfiMemoryRegion, OfiRemoteRegion, UNVERIFIED, VALID, VERIFYING } from './memory.js';
import { decodeAddress, decodeDescriptor, encodeAddress, type QpAddress } from './wire.js';

/**
 * Fabric errors (FI_E*, as errno) that mean the connection to the peer broke: reset, not
 * connected, shut down, aborted, refused, no route. EPIPE too, which some providers report as is.
 */
const CONNECTION_LOST: ReadonlySet<number> = new Set([32, 101, 103, 104, 107, 108, 111, 113]);

/** What a QP needs from its device. */
export interface QpHost {
  readonly label: string;
  readonly identity: ProcessIdentity;
  readonly nonce: number;
  readonly local: LocalCompletions;
  readonly opTimeoutMs: number;
  readonly cmds: CommandBuffer;
  readonly ctl32: Uint32Array;
  readonly ctlHandle: number;
  readonly ctlAddr: bigint;
  readonly ctlKey: bigint;
  readonly msgOrder: number;
  readonly cqDataSize: number;
  readonly fabricAddress: Uint8Array;
  readonly providerName: string;
  /** User operations of all QPs in their in-flight rings (issued, not yet reported). */
  inFlightOps: number;
  avInsert(address: Uint8Array): number;
  mapSource(fiAddr: number, qpn: number): void;
  queued(qp: OfiQueuePair): void;
  dirty(qp: OfiQueuePair): void;
  detach(qp: OfiQueuePair): void;
  /** Hands staged commands to libfabric now. */
  submit(): void;
  /** A deregistered region's last in-flight operation ended: release its registration now. */
  releaseSettled(region: OfiMemoryRegion): void;
}

interface PendingOp {
  op: number;
  local: OfiMemoryRegion;
  lOff: number;
  remote: OfiRemoteRegion;
  rOff: number;
  len: number;
  imm: number;
  wrId: number;
  signaled: boolean;
  at: number;
}

const NATIVE_OP = [0, L.NOP_WRITE, L.NOP_WRITEDATA, L.NOP_READ];
/** How often a peer on another host is probed while this QP is polled. */
const PROBE_MS = 500;
const MASK = L.RING - 1;

function codeOf(status: number): WeftErrorCode {
  return status === Status.PEER_DEAD ? 'EPEERDEAD' : status === Status.TIMEOUT ? 'ETIMEDOUT' : status === Status.TRANSPORT ? 'ETRANSPORT' : 'ECLOSED';
}

export class OfiQueuePair extends QueuePairBase implements QueuePair {
  state: 'init' | 'ready' | 'error' | 'closed' = 'init';
  error: WeftError | undefined;
  peer: QpAddress | undefined;
  fiAddr = 0;
  private remoteQpn = 0;
  private peerCtl = 0n;
  private peerKeyLo = 0;
  private peerKeyHi = 0;
  private errorStatus: number = Status.FLUSHED;
  private readonly ctxHi: number;
  // Receive side: cumulative credits granted to the peer, big WRITE_IMMs consumed.
  private granted: number;
  private bigConsumed = 0;
  /** Credits granted since the last publication, and how many to gather before publishing. */
  private unpublished = 0;
  private readonly grantBatch: number;
  // Send side: WRITE_IMMs issued, credits known from the address blob, big WRITE_IMMs issued.
  private used = 0;
  private grantFloor = 0;
  private bigSent = 0;
  private readonly grantWord: number;
  // The in-flight ring (sequence numbers; index = seq & MASK).
  private head = 0;
  private tail = 0;
  private readonly rOp = new Uint8Array(L.RING);
  private readonly rDone = new Uint8Array(L.RING);
  private readonly rStatus = new Uint8Array(L.RING);
  private readonly rSig = new Uint8Array(L.RING);
  private readonly rWr = new Uint32Array(L.RING);
  private readonly rLen = new Uint32Array(L.RING);
  private readonly rAt = new Float64Array(L.RING);
  private readonly rErr: (WeftError | undefined)[] = new Array(L.RING).fill(undefined);
  /** Each slot's local region while the fabric may use it (OfiMemoryRegion.inFlight). */
  private readonly rLocal: (OfiMemoryRegion | undefined)[] = new Array(L.RING).fill(undefined);
  private inflightReads = 0;
  private inflightWrites = 0;
  private readonly sq: PendingOp[] = [];
  private verifying: OfiRemoteRegion | undefined;
  /** A liveness read toward a peer on another host is in flight (checkPeer). */
  private probing = false;
  private lastProbe = 0;
  /** When the read in the VERIFY slot (a probe or a verification; one at a time) was posted. */
  private slotReadSince = 0;

  /**
   * How long a liveness read toward this peer (on another host) has gone unanswered, 0 when
   * none is pending. libfabric's rxm neither completes nor fails operations toward a peer
   * whose process died: a timeout then names the peers that stopped answering.
   */
  get unansweredMs(): number {
    if (this.state !== 'ready' || !this.remotePeer) return 0;
    // A verification read holds the VERIFY slot and no probe starts meanwhile: it counts too.
    return this.probing || this.verifying !== undefined ? performance.now() - this.slotReadSince : 0;
  }
  /** See QueuePair.handshake. */
  handshakeState: 'pending' | 'done' | 'failed' | undefined;

  get peerIdentity(): ProcessIdentity | undefined {
    return this.peer?.identity;
  }

  constructor(
    private readonly host: QpHost,
    readonly qpn: number,
    readonly gen: number,
    readonly peerLabel: string,
    recvCredits: number,
    readonly autoRepost: boolean,
  ) {
    super();
    this.ctxHi = L.ctxHi(qpn, L.CTX_USER, gen);
    this.granted = recvCredits;
    // Publishing every credit costs an extra fabric write per message; gather a few (never
    // more than a quarter of the initial credits, so the sender cannot starve meanwhile, and
    // everything is published before this process sleeps).
    this.grantBatch = Math.max(1, Math.min(16, recvCredits >> 2));
    this.grantWord = (L.GRANT_IN + qpn * 8) >> 2;
    host.ctl32[this.grantWord] = 0;
    host.ctl32[this.grantWord + 1] = 0;
  }

  get pendingOps(): number {
    return this.sq.length + ((this.tail - this.head) | 0);
  }

  address(): Uint8Array {
    const h = this.host;
    return encodeAddress({
      identity: h.identity,
      qpn: this.qpn,
      nonce: h.nonce,
      granted: this.granted,
      cqDataSize: h.cqDataSize,
      ctlAddr: h.ctlAddr,
      ctlKey: h.ctlKey,
      ctlLen: L.CTL_BYTES,
      fabricAddress: h.fabricAddress,
      provider: h.providerName,
    });
  }

  connect(remoteAddress: Uint8Array): void {
    const where = `${this.host.label}: connect to ${this.peerLabel}`;
    if (this.state !== 'init') throw new WeftError('EINVAL', `${where}: the QP is ${this.state}; create a new QP to reconnect`);
    const a = decodeAddress(remoteAddress, where);
    if (a.provider !== this.host.providerName) throw new WeftError('EINVAL', `${where}: the peer uses libfabric provider ${a.provider}, this device ${this.host.providerName}; both sides must use the same one`);
    if (a.qpn >= L.MAX_QPS || a.ctlLen !== L.CTL_BYTES || a.cqDataSize !== this.host.cqDataSize) throw new WeftError('EPROTO', `${where}: the peer's QP address does not match this weft version (qpn ${a.qpn}, control region ${a.ctlLen} bytes, cq data ${a.cqDataSize})`);
    if (!isPeerAlive(a.identity)) throw new WeftError('EPEERDEAD', `${where}: the peer process (pid ${a.identity.pid}) is not running; exchange fresh addresses`);
    let fiAddr: number;
    try {
      fiAddr = this.host.avInsert(a.fabricAddress);
    } catch (err) {
      throw new WeftError('EPROTO', `${where}: libfabric rejected the peer's fabric address: ${(err as Error).message}`, { cause: err });
    }
    this.peer = a;
    this.fiAddr = fiAddr;
    this.remoteQpn = a.qpn;
    this.peerCtl = a.ctlAddr;
    this.peerKeyLo = Number(a.ctlKey & 0xffffffffn);
    this.peerKeyHi = Number(a.ctlKey >> 32n);
    this.grantFloor = a.granted;
    this.host.mapSource(fiAddr, this.qpn);
    this.state = 'ready';
    // The peer knows our credits as of address(); publish whatever was posted since.
    this.host.dirty(this);
  }

  importRegion(descriptor: Uint8Array): RemoteRegion {
    const where = `${this.host.label}: importRegion from ${this.peerLabel}`;
    const peer = this.peer;
    if (!peer) throw new WeftError('EINVAL', `${where}: the QP is not connected; call connect first`);
    const d = decodeDescriptor(descriptor, where);
    const id = d.identity;
    if (id.hostId !== peer.identity.hostId || id.pid !== peer.identity.pid || id.startTime !== peer.identity.startTime || d.nonce !== peer.nonce) {
      throw new WeftError('EINVAL', `${where}: the descriptor belongs to another process than ${this.peerLabel}; import it on the QP connected to its owner`);
    }
    return new OfiRemoteRegion(this, d.slot, d.gen, d.length, d.addr, d.key);
  }

  postRecv(count: number): void {
    if (!Number.isInteger(count) || count < 0) throw new WeftError('EINVAL', `${this.host.label}: postRecv(count) needs a non-negative integer, got ${count}`);
    if (this.state === 'closed') throw new WeftError('ECLOSED', `${this.host.label}: postRecv on a closed QP toward ${this.peerLabel}`);
    if (count === 0) return;
    this.granted = (this.granted + count) | 0;
    this.unpublished += count;
    if (this.state === 'ready' && this.unpublished >= this.grantBatch) this.host.dirty(this);
  }


  protected post(op: number, local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void {
    if (!(local instanceof OfiMemoryRegion) || local.deregistered || local.owner.ctl32 !== this.host.ctl32) this.badArg(op, 'local must be a registered MemoryRegion of this device');
    if (!(remote instanceof OfiRemoteRegion) || remote.owner !== this) this.badArg(op, 'remote must come from importRegion on this QP');
    this.checkRanges(op, local.byteLength, lOff, len, rOff);
    if (this.state !== 'ready') {
      if (this.state === 'init') throw new WeftError('EINVAL', `${this.host.label}: ${OP_NAMES[op]} toward ${this.peerLabel} before connect`);
      this.host.local.push(this.qpn, op, this.errorStatus, 0, wrId >>> 0, this.opError(op, wrId, this.errorStatus));
      return;
    }
    if (this.sq.length === 0 && this.tryIssue(op, local, lOff, remote, rOff, len, imm, wrId, signaled)) return;
    this.sq.push({ op, local, lOff, remote, rOff, len, imm, wrId, signaled, at: performance.now() });
    this.host.queued(this);
  }

  /** Stages one operation for the fabric (or completes it with an error); false = must wait. */
  private tryIssue(op: number, local: OfiMemoryRegion, lOff: number, remote: OfiRemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): boolean {
    if (((this.tail - this.head) | 0) >= L.RING) return false;
    // Queued before its region was deregistered: the registration's handle may serve another
    // region by now, so the operation must not reach the fabric.
    if (local.deregistered) return this.completeNow(op, wrId, Status.FLUSHED, new WeftError('ECLOSED', `${this.host.label}: ${OP_NAMES[op]} (wr ${wrId}) toward ${this.peerLabel} not executed: its local memory region was deregistered while the operation waited to be issued`));
    if (remote.state !== VALID) {
      if (remote.state === INVALID) return this.completeNow(op, wrId, Status.REMOTE_ACCESS, this.accessError(op, wrId, remote, rOff, len));
      // One read in the VERIFY slot at a time: a liveness probe in flight goes first.
      if (remote.state === UNVERIFIED && this.verifying === undefined && !this.probing) this.startVerify(remote);
      return remote.state === INVALID ? this.completeNow(op, wrId, Status.REMOTE_ACCESS, this.accessError(op, wrId, remote, rOff, len)) : false;
    }
    if (rOff + len > remote.byteLength) return this.completeNow(op, wrId, Status.REMOTE_ACCESS, this.accessError(op, wrId, remote, rOff, len));
    const order = this.host.msgOrder;
    if (op === Opcode.READ) {
      if ((this.inflightWrites > 0 && !(order & L.FI_ORDER_RAW)) || (this.inflightReads > 0 && !(order & L.FI_ORDER_RAR))) return false;
    } else if ((this.inflightReads > 0 && !(order & L.FI_ORDER_WAR)) || (this.inflightWrites > 0 && !(order & L.FI_ORDER_WAW))) {
      return false;
    }
    let lenField = len;
    if (op === Opcode.WRITE_IMM) {
      const t = this.host.ctl32;
      const word = t[this.grantWord];
      const granted = ((word - this.grantFloor) | 0) > 0 ? word : this.grantFloor;
      if (((granted - this.used) | 0) <= 0) return false;
      if (len >= L.LEN_ESCAPE) {
        if (this.bigSent !== t[this.grantWord + 1]) return false;
        // The true length goes first, into the target's BIGLEN_IN word (ordered before the data).
        t[(L.BIGLEN_OUT >> 2) + this.qpn] = len;
        this.stageInternal(L.NOP_WRITE, L.BIGLEN_OUT + this.qpn * 4, 4, BigInt(L.BIGLEN_IN + this.remoteQpn * 4), L.CTX_BIGLEN);
        this.bigSent = (this.bigSent + 1) >>> 0;
        lenField = L.LEN_ESCAPE;
      }
      this.used = (this.used + 1) | 0;
    }
    const seq = this.tail;
    this.tail = (seq + 1) | 0;
    this.host.inFlightOps++;
    const i = seq & MASK;
    this.rOp[i] = op;
    this.rDone[i] = 0;
    this.rStatus[i] = Status.SUCCESS;
    this.rSig[i] = signaled ? 1 : 0;
    this.rWr[i] = wrId;
    this.rLen[i] = len;
    this.rAt[i] = performance.now();
    this.rLocal[i] = local;
    local.inFlight++;
    if (op === Opcode.READ) this.inflightReads++;
    else this.inflightWrites++;
    const c = this.host.cmds;
    const at = c.stage();
    const w = c.words;
    const sum = remote.addrLo + rOff;
    w[at + L.CMD_OP] = NATIVE_OP[op];
    w[at + L.CMD_ADDR] = this.fiAddr;
    w[at + L.CMD_MR] = local.handle;
    w[at + L.CMD_OFF] = lOff;
    w[at + L.CMD_LEN] = len;
    w[at + L.CMD_RADDR] = sum;
    w[at + L.CMD_RADDR + 1] = remote.addrHi + (sum > 0xffffffff ? 1 : 0);
    w[at + L.CMD_KEY] = remote.keyLo;
    w[at + L.CMD_KEY + 1] = remote.keyHi;
    w[at + L.CMD_DATA] = imm;
    w[at + L.CMD_DATA + 1] = (lenField << 10) | this.remoteQpn;
    w[at + L.CMD_CTX] = seq;
    w[at + L.CMD_CTX + 1] = this.ctxHi;
    return true;
  }

  /** Stages a weft-internal operation on the peer's control region. */
  private stageInternal(nop: number, localOff: number, len: number, remoteOff: bigint, kind: number): void {
    const c = this.host.cmds;
    const at = c.stage();
    const w = c.words;
    const raddr = this.peerCtl + remoteOff;
    w[at + L.CMD_OP] = nop;
    w[at + L.CMD_ADDR] = this.fiAddr;
    w[at + L.CMD_MR] = this.host.ctlHandle;
    w[at + L.CMD_OFF] = localOff;
    w[at + L.CMD_LEN] = len;
    w[at + L.CMD_RADDR] = Number(raddr & 0xffffffffn);
    w[at + L.CMD_RADDR + 1] = Number(raddr >> 32n);
    w[at + L.CMD_KEY] = this.peerKeyLo;
    w[at + L.CMD_KEY + 1] = this.peerKeyHi;
    w[at + L.CMD_DATA] = 0;
    w[at + L.CMD_DATA + 1] = 0;
    w[at + L.CMD_CTX] = 0;
    w[at + L.CMD_CTX + 1] = L.ctxHi(this.qpn, kind, this.gen);
  }

  /** The peer's fabric address as ip:port (sockaddr_in/in6), else as hex. */
  get peerAddress(): string | undefined {
    return this.peer ? sockaddrText(this.peer.fabricAddress) : undefined;
  }

  /**
   * One read of the peer's MR table (its first entry) through the fabric: the connection to
   * the peer's address is made now, and a wrong or unreachable address shows as 'failed' (or
   * as 'pending' past the caller's deadline) before any user operation.
   */
  handshake(): void {
    if (this.state !== 'ready') throw new WeftError('EINVAL', `${this.host.label}: handshake toward ${this.peerLabel} before connect`);
    if (this.handshakeState !== undefined || this.verifying !== undefined) return;
    this.handshakeState = 'pending';
    this.stageInternal(L.NOP_READ, L.VERIFY + this.qpn * 32, 32, BigInt(L.MR_TABLE), L.CTX_VERIFY);
    this.host.submit();
  }

  /** Reads the peer's MR-table entry of `remote` into our VERIFY slot. */
  private startVerify(remote: OfiRemoteRegion): void {
    if (remote.slot >= L.MAX_MRS || remote.gen === 0) {
      remote.state = INVALID;
      return;
    }
    remote.state = VERIFYING;
    this.verifying = remote;
    this.slotReadSince = performance.now();
    this.stageInternal(L.NOP_READ, L.VERIFY + this.qpn * 32, 32, BigInt(L.MR_TABLE + remote.slot * L.MR_ENTRY), L.CTX_VERIFY);
  }

  /** Completion of the verification read. */
  onVerify(ok: boolean, text: string): void {
    const r = this.verifying;
    if (this.state === 'ready' && this.probing && !r) {
      this.probing = false;
      if (!ok) this.fail(Status.PEER_DEAD, `${this.peerLabel} at ${this.peerAddress} is unreachable: the fabric failed a read (${text}); its process or its host is gone`);
      else if (this.sq.length > 0) this.host.queued(this);
      return;
    }
    if (this.state === 'ready' && this.handshakeState === 'pending' && !r) {
      this.handshakeState = ok ? 'done' : 'failed';
      if (!ok) this.fail(Status.TRANSPORT, `the handshake with ${this.peerLabel} at ${this.peerAddress} failed in the fabric: ${text}`);
      return;
    }
    if (this.state !== 'ready' || !r) return;
    this.verifying = undefined;
    if (!ok) {
      r.state = UNVERIFIED;
      this.fail(Status.TRANSPORT, `reading ${this.peerLabel}'s region table failed in the fabric: ${text}`);
      return;
    }
    r.state = r.matches(this.host.ctl32, (L.VERIFY + this.qpn * 32) >> 2) ? VALID : INVALID;
    if (this.sq.length > 0) this.host.queued(this);
  }

  /**
   * Completion (or fabric error) of user operation `seq`; `errno` is the fabric's error number
   * (FI_E*, as errno) when it failed.
   */
  onComplete(seq: number, ok: boolean, text: string, errno = 0): void {
    if (this.state !== 'ready') return;
    const i = seq & MASK;
    if (((seq - this.head) | 0) < 0 || ((this.tail - seq) | 0) <= 0 || this.rDone[i]) return;
    this.rDone[i] = 1;
    if (this.rOp[i] === Opcode.READ) this.inflightReads--;
    else this.inflightWrites--;
    this.settleLocal(i, false);
    if (!ok) {
      const op = this.rOp[i];
      // A peer on another host whose connection broke (its process or host died) is gone, as
      // when a credit write toward it fails: the callers then say which rank died, whichever
      // of the two writes found out first.
      const lost = this.remotePeer && CONNECTION_LOST.has(errno);
      const status = lost ? Status.PEER_DEAD : Status.TRANSPORT;
      const why = lost ? this.unreachable(text) : text;
      this.rStatus[i] = status;
      this.rErr[i] = new WeftError(lost ? 'EPEERDEAD' : 'ETRANSPORT', `${this.host.label}: ${OP_NAMES[op]} (wr ${this.rWr[i]}) toward ${this.peerLabel} failed in the fabric: ${why}`);
      this.retire();
      this.fail(status, lost ? why : `the fabric failed a ${OP_NAMES[op]}: ${text}`);
      return;
    }
    if (seq === this.head) this.retire();
    if (this.sq.length > 0) this.host.queued(this);
  }

  /**
   * Slot `i` no longer uses its local region: the fabric completed the operation, or
   * (`abandoned`) this QP gave up on it while the provider may still use the bytes.
   */
  private settleLocal(i: number, abandoned: boolean): void {
    const r = this.rLocal[i];
    if (r === undefined) return;
    this.rLocal[i] = undefined;
    if (abandoned) r.pinned = true;
    if (--r.inFlight === 0 && r.releasePending) this.host.releaseSettled(r);
  }

  /** A WRITE_IMM from the peer landed (the CQ reports it); returns its length. */
  onArrival(lenField: number): number {
    let len = lenField;
    if (lenField === L.LEN_ESCAPE) {
      len = this.host.ctl32[(L.BIGLEN_IN >> 2) + this.qpn];
      this.bigConsumed = (this.bigConsumed + 1) >>> 0;
      this.host.dirty(this);
    }
    if (this.autoRepost) {
      this.granted = (this.granted + 1) | 0;
      if (++this.unpublished >= this.grantBatch) this.host.dirty(this);
    }
    return len;
  }

  /** Publishes our cumulative grants (and big-write acknowledgements) to the peer. */
  publishGrant(): void {
    if (this.state !== 'ready') return;
    this.unpublished = 0;
    const w = (L.GRANT_OUT + this.qpn * 8) >> 2;
    this.host.ctl32[w] = this.granted;
    this.host.ctl32[w + 1] = this.bigConsumed;
    this.stageInternal(L.NOP_WRITE, L.GRANT_OUT + this.qpn * 8, 8, BigInt(L.GRANT_IN + this.remoteQpn * 8), L.CTX_GRANT);
  }

  /** Reports finished ring slots in post order: errors always, successes when signaled. */
  private retire(): void {
    const local = this.host.local;
    while (this.head !== this.tail) {
      const i = this.head & MASK;
      if (!this.rDone[i]) break;
      const st = this.rStatus[i];
      if (st !== Status.SUCCESS || this.rSig[i]) local.push(this.qpn, this.rOp[i], st, st === Status.SUCCESS ? this.rLen[i] : 0, this.rWr[i], this.rErr[i]);
      this.rErr[i] = undefined;
      this.head = (this.head + 1) | 0;
      this.host.inFlightOps--;
    }
  }

  private completeNow(op: number, wrId: number, status: number, err: WeftError): boolean {
    const seq = this.tail;
    this.tail = (seq + 1) | 0;
    this.host.inFlightOps++;
    const i = seq & MASK;
    this.rOp[i] = op;
    this.rDone[i] = 1;
    this.rLocal[i] = undefined;
    this.rStatus[i] = status;
    this.rSig[i] = 0;
    this.rWr[i] = wrId;
    this.rLen[i] = 0;
    this.rErr[i] = err;
    this.retire();
    return true;
  }

  /** Issues queued operations in order; checks operation timeouts. */
  drain(now: number): void {
    const sq = this.sq;
    let k = 0;
    while (k < sq.length && this.state === 'ready') {
      const p = sq[k];
      if (!this.tryIssue(p.op, p.local, p.lOff, p.remote, p.rOff, p.len, p.imm, p.wrId, p.signaled)) break;
      k++;
    }
    if (k > 0) sq.splice(0, k);
    this.checkTimeout(now);
  }

  /** Fails the QP when its oldest operation waited longer than opTimeoutMs. */
  checkTimeout(now: number): void {
    if (this.state !== 'ready') return;
    const limit = this.host.opTimeoutMs;
    if (this.head !== this.tail && now - this.rAt[this.head & MASK] > limit) {
      this.fail(Status.TIMEOUT, `an operation got no completion from the fabric for ${limit} ms (is ${this.peerLabel} polling its completion queue?); raise opTimeoutMs or make the peer poll`);
    } else if (this.sq.length > 0 && now - this.sq[0].at > limit) {
      this.fail(Status.TIMEOUT, `no receive credit from ${this.peerLabel} for ${limit} ms (the peer is not polling its completion queue, or it is stuck); raise opTimeoutMs or make the peer poll`);
    }
  }

  checkPeer(now: number): void {
    if (this.state !== 'ready' || !this.peer) return;
    if (!isPeerAlive(this.peer.identity)) {
      this.fail(Status.PEER_DEAD, `${this.peerLabel} (pid ${this.peer.identity.pid}) is dead`);
      // A killed peer on this host left its shared memory (libfabric's shm provider keeps an
      // endpoint region per process); without a launcher nobody else would remove it.
      sweepDeadSegments(this.peer.identity.pid);
      sweepFabricSegments(this.peer.identity.pid);
      return;
    }
    // A peer on another host cannot be looked up: ask the fabric. A peer that died closed its
    // connections, and a read toward it fails at once; a busy peer answers when it polls.
    // (A read of its region table: signaled, answered by a live peer that polls; rxm neither
    // completes nor fails it toward a dead one, so a timeout names peers silent for long.)
    if (this.remotePeer && !this.probing && this.verifying === undefined && this.handshakeState !== 'pending' && now - this.lastProbe >= PROBE_MS) {
      this.probing = true;
      this.lastProbe = now;
      this.slotReadSince = now;
      this.stageInternal(L.NOP_READ, L.VERIFY + this.qpn * 32, 32, BigInt(L.MR_TABLE), L.CTX_VERIFY);
    }
  }

  /** Completion of a credit write. */
  onGrant(ok: boolean, text: string): void {
    if (ok) return;
    const remote = this.remotePeer;
    this.fail(remote ? Status.PEER_DEAD : Status.TRANSPORT, remote ? this.unreachable(text) : `a credit update toward ${this.peerLabel} failed in the fabric: ${text}`);
  }

  /** The peer runs on another host (its liveness can only be learnt from the fabric). */
  private get remotePeer(): boolean {
    return this.peer !== undefined && !isSameHost(this.peer.identity);
  }

  /** Why a peer on another host counts as gone once the fabric lost the connection to it. */
  private unreachable(text: string): string {
    return `${this.peerLabel} at ${this.peerAddress} is unreachable: the fabric lost the connection (${text}); its process or its host is gone`;
  }

  /** Credits granted but not yet published (published before sleeping). */
  get hasUnpublished(): boolean {
    return this.unpublished > 0 && this.state === 'ready';
  }

  get waiting(): boolean {
    return this.sq.length > 0 || this.head !== this.tail;
  }

  /** Moves to the error state: in-flight and queued operations and later posts fail with `status`. */
  fail(status: number, reason: string): void {
    if (this.state !== 'ready' && this.state !== 'init') return;
    this.state = 'error';
    this.errorStatus = status;
    this.error = new WeftError(codeOf(status), `${this.host.label}: QP ${this.qpn} toward ${this.peerLabel} failed: ${reason}`);
    this.abandon(status);
    this.host.local.push(this.qpn, Opcode.QP_EVENT, status, 0, 0, this.error);
  }

  close(): void {
    if (this.state === 'closed') return;
    if (this.state === 'ready' || this.state === 'init') this.errorStatus = Status.FLUSHED;
    this.abandon(Status.FLUSHED);
    this.state = 'closed';
    this.host.detach(this);
  }

  /** Fails every unfinished operation with `status`; later fabric completions are ignored. */
  private abandon(status: number): void {
    const hi = this.ctxHi & ~(3 << 10);
    this.host.cmds.remove((h) => (h & ~(3 << 10)) === hi);
    for (let s = this.head; s !== this.tail; s = (s + 1) | 0) {
      const i = s & MASK;
      if (this.rDone[i]) continue;
      this.rDone[i] = 1;
      this.settleLocal(i, true);
      this.rStatus[i] = status;
      this.rErr[i] = this.opError(this.rOp[i], this.rWr[i], status);
    }
    this.retire();
    for (const p of this.sq) this.host.local.push(this.qpn, p.op, status, 0, p.wrId >>> 0, this.opError(p.op, p.wrId, status));
    this.sq.length = 0;
    this.inflightReads = this.inflightWrites = 0;
    this.verifying = undefined;
    this.probing = false;
    if (this.handshakeState === 'pending') this.handshakeState = 'failed';
  }

  private opError(op: number, wrId: number, status: number): WeftError {
    const base = this.error ?? new WeftError('ECLOSED', `${this.host.label}: QP ${this.qpn} toward ${this.peerLabel} is ${this.state === 'ready' ? 'closing' : this.state}`);
    return new WeftError(codeOf(status), `${this.host.label}: ${OP_NAMES[op]} (wr ${wrId}) toward ${this.peerLabel} not executed: ${base.message}`, { cause: base });
  }

  private accessError(op: number, wrId: number, remote: OfiRemoteRegion, rOff: number, len: number): WeftError {
    const why = remote.state === VALID ? `range [${rOff}, ${rOff + len}) exceeds the ${remote.byteLength}-byte region` : 'the region is not registered there (forged, stale or deregistered descriptor)';
    return new WeftError('EREMOTEACCESS', `${this.host.label}: ${OP_NAMES[op]} (wr ${wrId}) toward ${this.peerLabel} refused: ${why}; target memory is unchanged`);
  }

  protected localLabel(): string {
    return this.host.label;
  }
}

/** ip:port of a sockaddr_in / sockaddr_in6 (libfabric's tcp addresses), else hex. */
export function sockaddrText(a: Uint8Array): string {
  const v = new DataView(a.buffer, a.byteOffset, a.byteLength);
  if (a.byteLength >= 8 && v.getUint16(0, true) === 2) return `${a[4]}.${a[5]}.${a[6]}.${a[7]}:${v.getUint16(2, false)}`;
  if (a.byteLength >= 24 && v.getUint16(0, true) === 10) {
    const parts: string[] = [];
    for (let i = 0; i < 8; i++) parts.push(v.getUint16(8 + 2 * i, false).toString(16));
    return `[${parts.join(':')}]:${v.getUint16(2, false)}`;
  }
  return Buffer.from(a).toString('hex');
}
