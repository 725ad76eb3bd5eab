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
 * 1. the owner publishes its descriptor without the buffer (version V), then writes V into
 *    each fabric peer's `revoke[owner]` word (a 4-byte RDMA WRITE_IMM into the peer's control
 *    region, exchanged when the engines opened);
 * 2. the peer's progress sees the word change: it stops posting toward the owner, re-reads the
 *    descriptor, moves its queued requests to the fresh copy (or fails those whose target is
 *    gone), waits until none of its slices toward the owner is in the fabric, and writes V
 *    into the owner's `ack[peer]` word;
 * 3. the owner closes the region once every live fabric peer acknowledged V (or lost its
 *    paths). A peer that does not answer within the timeout leaves the region registered.
 *
 * The ack travels on the same connection as the peer's last slices, after their completions,
 * so the owner's provider has served them when the ack lands. A peer engine that is closing
 * is announced the same way with CLOSING: its peers fail what they have toward it and stop.
 *
 * The control region holds, per rank r: revoke[r] and ack[r] (written by r), and two staging
 * words this rank sends from. It stays registered until the device closes, not the engine:
 * a peer may write into it at any time, and a closed key would break its connection.
 */
import { WeftError } from '../errors.js';
import type { Device, MemoryRegion, QueuePair, RemoteRegion } from '../nic/types.js';

/** The revoke value of an engine that is closing: everything of its segment is gone. */
export const CLOSING = 0x7fffffff;
/** Work-request id of control writes (slice ids are far below it); they are unsignaled. */
export const CONTROL_WR_ID = 0xffffffff;
/**
 * Receive credits of each fabric path for control writes. They are WRITE_IMMs: a plain WRITE
 * makes no completion at the target, so a peer asleep on its completion queue would not wake
 * to read it (the tcp provider's wait fd signals completions only). Reposted as they are used.
 */
export const CONTROL_CREDITS = 8;

const REVOKE = 0;
const ACK = 1;

export class KeyRevocation {
  readonly mr: MemoryRegion;
  private readonly words: Int32Array;
  /** Descriptor bytes of each peer's control region (empty: the peer has none). */
  private readonly theirs: Uint8Array[];
  /** regions[p][k]: peer p's control region imported on path k. */
  private readonly regions: (RemoteRegion | undefined)[][];

  constructor(
    device: Device,
    private readonly rank: number,
    private readonly size: number,
  ) {
    this.mr = device.allocate(16 * size);
    this.words = new Int32Array(this.mr.bytes.buffer, this.mr.bytes.byteOffset, 4 * size);
    this.theirs = new Array<Uint8Array>(size).fill(new Uint8Array(0));
    this.regions = Array.from({ length: size }, () => []);
  }

  /** Peer p's control-region descriptor, from its open blob. */
  setPeer(p: number, descriptor: Uint8Array): void {
    this.theirs[p] = descriptor;
  }

  hasPeer(p: number): boolean {
    return this.theirs[p].byteLength > 0;
  }

  /** The last revoke value rank p wrote here (0: none yet). A plain load: polled. */
  revokeFrom(p: number): number {
    return this.words[2 * p + REVOKE];
  }

  /** The last revoke value rank p acknowledged here. */
  ackFrom(p: number): number {
    return this.words[2 * p + ACK];
  }

  /** Tells rank p (on path qp, index k) that keys up to descriptor version `value` are retired. */
  sendRevoke(p: number, k: number, qp: QueuePair, value: number): void {
    this.send(p, k, qp, REVOKE, value);
  }

  /** Tells rank p that its revoke `value` is honoured: nothing of ours toward it uses an older key. */
  sendAck(p: number, k: number, qp: QueuePair, value: number): void {
    this.send(p, k, qp, ACK, value);
  }

  private send(p: number, k: number, qp: QueuePair, which: number, value: number): void {
    const region = (this.regions[p][k] ??= qp.importRegion(this.theirs[p]));
    // Each (peer, kind) has its own staging word: a later value may overwrite one not yet sent,
    // which only sends the newer value (values only grow).
    const stage = 2 * this.size + 2 * p + which;
    this.words[stage] = value;
    try {
      qp.postWriteImm(this.mr, stage * 4, region, (2 * this.rank + which) * 4, 4, which, CONTROL_WR_ID, false);
    } catch (err) {
      throw new WeftError((err as WeftError).code ?? 'ETRANSPORT', `rank ${this.rank}: transfer engine: telling rank ${p} about retired keys failed: ${(err as Error).message}`, { cause: err });
    }
  }
}
