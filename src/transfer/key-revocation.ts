/**
 * Retiring a buffer's key before it dies, toward peers reached through the fabric.
 *
 * On shared memory a peer's access is checked against the owner's region table at the moment
 * it runs, so a stale key is an error completion and nothing else. libfabric's tcp provider
 * (1.17) instead resets the connection when an access names a closed key, and that connection
 * is the one every layer of both processes shares (collectives, copyrpc): one stale request
 * would break the job between the two ranks. So before an owner closes a region that peers
 * may hold in their cached descriptor, every such peer confirms that it will not use the key:
 *
 * 1. the owner publishes its descriptor without the buffer (version V), then sends each fabric
 *    peer a record { seq, V, addr } (a 24-byte RDMA WRITE_IMM into the peer's control region,
 *    exchanged when the engines opened; seq counts the owner's records to that peer);
 * 2. the peer, in its next progress call, drops the buffer at `addr` from its cached copy of
 *    the owner's descriptor (and refuses older copies than V from then on), fails its queued
 *    requests to it, waits until none of its slices to that buffer is in the fabric, and
 *    acknowledges seq (a 4-byte WRITE_IMM);
 * 3. the owner closes the region once every live fabric peer acknowledged.
 *
 * All of a peer's part is synchronous: it needs no store read, so a peer blocked in a sync wait
 * (waitBatchSync, a sync collective) still answers as its wait polls. Requests of the peer to
 * other buffers of the owner go on meanwhile.
 *
 * The ack travels on the same connection as the peer's last slices to the buffer, after their
 * completions, so the owner's provider has served them when the ack lands. An engine that is
 * closing sends CLOSING as the version: its peers fail what they have toward it and stop. A peer
 * that fell more than RING records behind retires every buffer of the owner it knew.
 *
 * The control region is closed with the engine only when every fabric peer confirmed the
 * engine's close (a peer that did never writes into it again); otherwise it stays registered
 * until the device closes, since a closed key would break a writer's connection.
 */
import { WeftError } from '../errors.js';
import type { Device, MemoryRegion, QueuePair, RemoteRegion } from '../nic/types.js';

/** The version of a record from an engine that is closing: everything of its segment is gone. */
export const CLOSING = 0x7fffffff;
/** Work-request id of control writes (slice ids are far below it); they are unsignaled. */
export const CONTROL_WR_ID = 0xffffffff;
/**
 * Receive credits of each fabric path for control writes. They are WRITE_IMMs: a plain WRITE
 * makes no completion at the target, so a peer asleep on its completion queue would not wake
 * to read it (the tcp provider's wait fd signals completions only). Reposted as they are used.
 */
export const CONTROL_CREDITS = 8;

/** Records kept per (owner, peer): a peer that falls further behind retires everything. */
export const RING = 8;
/**
 * Words per record: seq, version, addr (low 32 bits), addr (high bits), 0, seq again. The
 * provider copies a record's bytes in order and a poll may look between two parts of it: a
 * record counts once its last word holds its seq.
 */
export const REC = 6;
/** Words per rank in each half of the region: the ring, the ack word, padding to 16 bytes. */
export const AREA = RING * REC + 4;
const ACK = RING * REC;

/** What `next` found: record seq has not arrived; it was overwritten by a later one (the peer fell RING records behind); it is there. */
export const MISSING = 0;
export const LOST = 1;
export const FOUND = 2;

export class KeyRevocation {
  readonly mr: MemoryRegion;
  /** [0, size*AREA): what rank r wrote here, at r*AREA; then this rank's staging, per peer. */
  private readonly words: Int32Array;
  /** Descriptor bytes of each peer's control region (empty: the peer has none). */
  private readonly theirs: Uint8Array[];
  /** regions[p][k]: peer p's control region imported on path k. */
  private readonly regions: (RemoteRegion | undefined)[][];
  /** Records sent to each peer. */
  private readonly sent: Int32Array;
  /** The path each peer's records go on (all of a peer's records take one path, in order). */
  readonly pathOf: Int32Array;
  /** The record `next` found: its version and addr. */
  version = 0;
  addr = 0;

  constructor(
    device: Device,
    private readonly rank: number,
    private readonly size: number,
  ) {
    this.mr = device.allocate(2 * AREA * 4 * size);
    this.words = new Int32Array(this.mr.bytes.buffer, this.mr.bytes.byteOffset, 2 * AREA * size);
    this.theirs = new Array<Uint8Array>(size).fill(new Uint8Array(0));
    this.regions = Array.from({ length: size }, () => []);
    this.sent = new Int32Array(size);
    this.pathOf = new Int32Array(size).fill(-1);
  }

  /** Records sent to rank p that it has not acknowledged. */
  unacked(p: number): number {
    return this.sent[p] - this.ackFrom(p);
  }

  /**
   * True when rank p's ring has room for one more record: at most RING unacknowledged, so
   * that no record's staging words (nor its slot at the peer) are overwritten before it landed.
   */
  hasRoom(p: number): boolean {
    return this.unacked(p) < RING;
  }

  /** Peer p's control-region descriptor, from its open blob. */
  setPeer(p: number, descriptor: Uint8Array): void {
    this.theirs[p] = descriptor;
  }

  hasPeer(p: number): boolean {
    return this.theirs[p].byteLength > 0;
  }

  /**
   * Record `seq` of rank p: FOUND (then `version` and `addr` hold it), MISSING, or LOST. Plain
   * loads (polled); the record's bytes land before the completion that makes us look.
   */
  next(p: number, seq: number): number {
    const o = p * AREA + (seq % RING) * REC;
    const at = this.words[o + REC - 1];
    if (at === seq && this.words[o] === seq) {
      this.version = this.words[o + 1];
      this.addr = (this.words[o + 2] >>> 0) + this.words[o + 3] * 2 ** 32;
      return FOUND;
    }
    return at > seq ? LOST : MISSING;
  }

  /** The newest record of rank p in the ring: its seq (its version in `version`). */
  newest(p: number): number {
    let best = 0;
    for (let i = 0; i < RING; i++) {
      const o = p * AREA + i * REC;
      if (this.words[o + REC - 1] > best && this.words[o] === this.words[o + REC - 1]) {
        best = this.words[o];
        this.version = this.words[o + 1];
      }
    }
    return best;
  }

  /** The last of our records rank p acknowledged. */
  ackFrom(p: number): number {
    return this.words[p * AREA + ACK];
  }

  /**
   * Sends rank p (on path qp, index k) a record retiring the buffer at `addr` as of descriptor
   * `version`; returns its seq. The caller checked hasRoom(p).
   */
  sendRevoke(p: number, k: number, qp: QueuePair, version: number, addr: number): number {
    const seq = this.sent[p] + 1;
    const slot = (seq % RING) * REC;
    // Each record has its own staging words: the WRITE reads them when it runs.
    const stage = this.size * AREA + p * AREA + slot;
    const w = this.words;
    w[stage] = seq;
    w[stage + 1] = version;
    w[stage + 2] = addr % 2 ** 32 | 0;
    w[stage + 3] = Math.floor(addr / 2 ** 32);
    w[stage + 4] = 0;
    w[stage + 5] = seq;
    this.pathOf[p] = k;
    this.post(p, k, qp, stage, this.rank * AREA + slot, REC * 4);
    this.sent[p] = seq;
    return seq;
  }

  /**
   * Sends rank p's unacknowledged records again, in order, on path k: the path they went on
   * failed, and a record lost with it would leave the peer waiting for it (the peer ignores
   * records it has).
   */
  resend(p: number, k: number, qp: QueuePair): void {
    this.pathOf[p] = k;
    for (let seq = this.ackFrom(p) + 1; seq <= this.sent[p]; seq++) {
      const slot = (seq % RING) * REC;
      this.post(p, k, qp, this.size * AREA + p * AREA + slot, this.rank * AREA + slot, REC * 4);
    }
  }

  /** Tells rank p that its records up to `seq` are honoured. */
  sendAck(p: number, k: number, qp: QueuePair, seq: number): void {
    const stage = this.size * AREA + p * AREA + ACK;
    this.words[stage] = seq;
    this.post(p, k, qp, stage, this.rank * AREA + ACK, 4);
  }

  private post(p: number, k: number, qp: QueuePair, stage: number, word: number, bytes: number): void {
    try {
      const region = (this.regions[p][k] ??= qp.importRegion(this.theirs[p]));
      qp.postWriteImm(this.mr, stage * 4, region, word * 4, bytes, 0, CONTROL_WR_ID, false);
    } catch (err) {
      throw new WeftError((err as WeftError).code ?? 'ETRANSPORT', `rank ${this.rank}: transfer engine: telling rank ${p} about retired keys failed: ${(err as Error).message}`, { cause: err });
    }
  }
}
