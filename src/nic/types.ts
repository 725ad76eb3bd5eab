/**
 * The provider-neutral NIC: RDMA verbs semantics (as on an RC queue pair) that every layer
 * above is written against. Two providers implement it: `shm` (one host, pure TypeScript over
 * shared memory) and `ofi` (libfabric RDM endpoints: tcp, verbs, efa, shm).
 *
 * Semantics both providers keep:
 * - WRITE_IMM lands its bytes, then completes at the target (opcode RECV_WRITE_IMM) with the
 *   target's own QP number, the 32-bit immediate and the length; it consumes one receive credit
 *   of the target QP. With no credit the operation waits at the initiator (receiver-not-ready
 *   back-pressure): nothing is lost, later operations of that QP wait behind it.
 * - Per-QP order: operations land, and their completions are reported, in post order.
 * - Remote access is checked against the target's key and bounds: a bad access is an error
 *   completion at the initiator and leaves target memory untouched.
 * - Errors are always reported, signaled or not; successes only when signaled.
 * - Progress is driven by the caller: `poll` and `wait` move queued operations forward.
 */
import type { WaitOptions } from '../util/deadline.js';
import type { Doorbell } from '../host/wait.js';
import type { WeftError } from '../errors.js';
import type { ProcessIdentity } from '../host/identity.js';

/** Which provider a device runs on. */
export type ProviderKind = 'shm' | 'ofi' | 'mixed';

/** Completion opcodes. */
export const Opcode = {
  /** Local completion of postWrite. */
  WRITE: 1,
  /** Local completion of postWriteImm. */
  WRITE_IMM: 2,
  /** Local completion of postRead (the bytes are in local memory). */
  READ: 3,
  /** At the target: a peer's WRITE_IMM landed. */
  RECV_WRITE_IMM: 4,
  /**
   * The QP moved to the error state without an operation of its own failing (for example
   * the peer died while this side only waited for incoming writes); status says why.
   */
  QP_EVENT: 5,
} as const;
export type Opcode = (typeof Opcode)[keyof typeof Opcode];

/** Completion status codes. */
export const Status = {
  SUCCESS: 0,
  /** Bad key, out-of-bounds, or deregistered remote region. */
  REMOTE_ACCESS: 1,
  /** The peer process died. */
  PEER_DEAD: 2,
  /** The QP was closed or moved to the error state before this operation ran. */
  FLUSHED: 3,
  /** The operation could not run within the device's operation timeout. */
  TIMEOUT: 4,
  /** The fabric reported an error (text in `errors`). */
  TRANSPORT: 5,
  /** The peer sent bytes that do not decode. */
  PROTOCOL: 6,
} as const;
export type Status = (typeof Status)[keyof typeof Status];

/** Name of a status code, for messages. */
export function statusName(s: number): string {
  for (const [k, v] of Object.entries(Status)) if (v === s) return k;
  return `status ${s}`;
}

/**
 * A batch of completions as parallel arrays: polling allocates nothing. Entry `i` is valid
 * for `i < count`; `errors[i]` is set only for entries whose status is not SUCCESS.
 *
 * @example
 * const batch = new CompletionBatch(64);
 * const n = device.cq.poll(batch);
 * for (let i = 0; i < n; i++) if (batch.opcode[i] === Opcode.RECV_WRITE_IMM) use(batch.imm[i]);
 */
export class CompletionBatch {
  readonly capacity: number;
  /** Local QP number the completion belongs to (`QueuePair.qpn`). */
  readonly qpn: Uint32Array;
  readonly opcode: Uint8Array;
  readonly status: Uint8Array;
  /** Immediate data (RECV_WRITE_IMM only). */
  readonly imm: Uint32Array;
  /** Bytes moved. */
  readonly byteLength: Uint32Array;
  /** The caller's work-request id (local completions only). */
  readonly wrId: Uint32Array;
  /** Error detail for failed entries. */
  readonly errors: (WeftError | undefined)[];
  count = 0;
  constructor(capacity = 256) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('CompletionBatch capacity must be a positive integer');
    this.capacity = capacity;
    this.qpn = new Uint32Array(capacity);
    this.opcode = new Uint8Array(capacity);
    this.status = new Uint8Array(capacity);
    this.imm = new Uint32Array(capacity);
    this.byteLength = new Uint32Array(capacity);
    this.wrId = new Uint32Array(capacity);
    this.errors = new Array(capacity).fill(undefined);
  }

  /** Entry `at` becomes a copy of `from`'s entry `i` (no allocation). */
  copyEntry(at: number, from: CompletionBatch, i: number): void {
    this.qpn[at] = from.qpn[i];
    this.opcode[at] = from.opcode[i];
    this.status[at] = from.status[i];
    this.imm[at] = from.imm[i];
    this.byteLength[at] = from.byteLength[i];
    this.wrId[at] = from.wrId[i];
    this.errors[at] = from.errors[i];
  }
}

/** Registered local memory that peers may access one-sidedly. */
export interface MemoryRegion {
  /** Local view of the whole region. */
  readonly bytes: Uint8Array;
  readonly byteLength: number;
  /** Bytes a peer passes to `QueuePair.importRegion` to access this region. */
  descriptor(): Uint8Array;
  /** Revokes remote access; later accesses by peers fail with REMOTE_ACCESS. */
  deregister(): void;
}

/** A peer's memory region as seen by the initiator (from its descriptor bytes). */
export interface RemoteRegion {
  readonly byteLength: number;
  /**
   * Load/store access to the peer's bytes, when the provider maps them (shm: the region is
   * in a segment this process has mapped; undefined on ofi and for invalid descriptors).
   * Accesses through it bypass key checks and completions: layers above use it for
   * intra-host fast paths and pair it with a WRITE_IMM (possibly 0 bytes) as the doorbell.
   */
  readonly direct?: Uint8Array;
}

/** Per-QP options. */
export interface QueuePairOptions {
  /** How this QP's peer is called in errors, e.g. "rank 3". */
  peerLabel?: string;
  /**
   * Receive credits posted at creation for incoming WRITE_IMMs (default 256). With
   * `autoRepost` every consumed credit is reposted when its completion is polled.
   */
  recvCredits?: number;
  /**
   * Repost a receive credit for every polled RECV_WRITE_IMM of this QP (default: the
   * device's `autoRepost`). A layer that accounts credits itself (copyrpc's shared receive
   * queue) turns it off for its own QPs only, on a device it shares with others.
   */
  autoRepost?: boolean;
  /**
   * The peer's host id (host/identity.ts). A device that mixes providers needs it: shared
   * memory toward a peer on this host, the fabric toward one elsewhere. Others ignore it.
   */
  peerHostId?: string;
}

/** A connection to one peer with RC semantics. */
export interface QueuePair {
  /** This QP's number in completions (`CompletionBatch.qpn`). */
  readonly qpn: number;
  readonly peerLabel: string;
  /** Consumed receive credits are reposted by polling (QueuePairOptions.autoRepost). */
  readonly autoRepost: boolean;
  /**
   * True when this QP's completions come without the fabric (shared memory toward a peer on
   * this host, in a device over two providers): a waiter whose operations are all on such
   * QPs may poll with `CompletionQueue.pollNear`. Undefined on single-provider devices.
   */
  readonly nearby?: boolean;
  /** 'init' until connect, 'ready', 'error' after a fatal error (peer death, timeout), 'closed'. */
  readonly state: 'init' | 'ready' | 'error' | 'closed';
  /** The error that moved the QP to 'error'. */
  readonly error: WeftError | undefined;
  /** Who the peer is (host, pid, start time), once connected: errors name a stopped peer. */
  readonly peerIdentity: ProcessIdentity | undefined;
  /** Bytes a peer passes to its own QP's `connect`. */
  address(): Uint8Array;
  /**
   * Fabric QPs: after connect, starts one small round trip to the peer (a read of its control
   * region), so an unreachable address shows at connect time; `handshakeState` then moves from
   * 'pending' to 'done' or 'failed' as the CQ is polled. Providers without it (shm maps the
   * peer's memory in connect, which is the check) leave both undefined.
   */
  handshake?(): void;
  readonly handshakeState?: 'pending' | 'done' | 'failed' | undefined;
  /**
   * Fabric QPs toward another host: how long the peer has left a liveness probe unanswered
   * (ms; 0 when none is pending). Timeouts name peers silent for long.
   */
  readonly unansweredMs?: number;
  /** The peer's fabric address as text (ip:port), once connected, for errors. */
  readonly peerAddress?: string;
  /** Connects to the peer QP whose `address()` bytes these are. */
  connect(remoteAddress: Uint8Array): void;
  /** Decodes a peer's `MemoryRegion.descriptor()` bytes (validated; throws EINVAL/EPROTO). */
  importRegion(descriptor: Uint8Array): RemoteRegion;
  /** RDMA WRITE with a 32-bit immediate; completes at the target as RECV_WRITE_IMM. */
  postWriteImm(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number, imm: number, wrId: number, signaled: boolean): void;
  /**
   * shm only: a WRITE_IMM of bytes already stored through `remote.direct`; completes at the
   * target like postWriteImm of `length` bytes, without the copy.
   */
  postWriteImmInPlace?(remote: RemoteRegion, remoteOffset: number, length: number, imm: number, wrId: number, signaled: boolean): void;
  /**
   * shm only: runs a READ (`read` true) or WRITE now and reports no completion, when it can
   * succeed now: the QP is ready, nothing is queued ahead of it, the ranges fit and the key is
   * still registered. False when it did nothing; post the operation then, and its completion
   * says when it ran or why it failed. For a layer that would poll the success at once anyway
   * (the transfer engine): it saves the completion's round trip, not the copy.
   */
  copyNow?(read: boolean, local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number): boolean;
  /** RDMA WRITE: lands silently at the target. */
  postWrite(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number, wrId: number, signaled: boolean): void;
  /** RDMA READ: copies the peer's bytes into local memory, without the peer's CPU on shm. */
  postRead(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number, wrId: number, signaled: boolean): void;
  /** Posts receive credits for incoming WRITE_IMMs. */
  postRecv(count: number): void;
  /** Operations posted but not yet executed (waiting for credits or the fabric). */
  readonly pendingOps: number;
  /** Fails queued operations with FLUSHED and releases the QP. */
  close(): void;
}

/** One completion queue per device, shared by all its QPs. */
export interface CompletionQueue {
  /** Moves queued work forward and fills `out` with up to `max` completions; returns the count. */
  poll(out: CompletionBatch, max?: number): number;
  /**
   * Devices over two providers: `poll` for a waiter whose operations are all on `nearby` QPs.
   * It reads shared memory, and the fabric only while this process has fabric work in flight
   * or when the fabric has gone unread for a while (so what a peer sent unasked, an abort or a
   * copyrpc request, still comes in). Reading an idle fabric is a system call per poll
   * (tcp;ofi_rxm's progress), the larger part of a waiting rank's CPU on a busy host.
   */
  pollNear?(out: CompletionBatch, max?: number): number;
  /** True when `poll` would return something (moves queued work forward). */
  ready(): boolean;
  /** Resolves when `poll` has something to return; spins, then yields, then sleeps. */
  wait(options?: WaitOptions): Promise<void>;
  /** Blocking variant of wait: spins, yields, then sleeps the thread. */
  waitSync(options?: WaitOptions): void;
  /**
   * What waiters sleep on (host/wait.ts): layers that poll through a CompletionRouter wait
   * for their own conditions with it.
   */
  readonly doorbell: Doorbell;
}

/** Options of `createDevice`. */
export interface DeviceOptions {
  /**
   * 'shm' (default on one host), 'ofi' (libfabric, default provider tcp), or 'ofi:NAME'
   * for a libfabric provider such as 'ofi:tcp', 'ofi:shm', 'ofi:verbs'. Defaults to
   * WEFT_PROVIDER, then 'shm'.
   */
  provider?: string;
  /** Job name that scopes shared-memory segments (default WEFT_JOB or 'weft'). */
  job?: string;
  /** How this process is called in errors, e.g. "rank 0". */
  label?: string;
  /** Default of QueuePairOptions.autoRepost for this device's QPs (default true). */
  autoRepost?: boolean;
  /** Milliseconds an operation may wait for credits or the fabric before failing (default 30000). */
  opTimeoutMs?: number;
  /** ofi: local address to bind, e.g. '127.0.0.1' (default 127.0.0.1 for tcp). */
  node?: string;
}

/** A NIC: memory registration, queue pairs and one completion queue. */
export interface Device {
  readonly provider: ProviderKind;
  /** e.g. 'shm', 'ofi:tcp;ofi_rxm'. */
  readonly providerName: string;
  readonly label: string;
  readonly cq: CompletionQueue;
  /**
   * More processes of this job on this host than cores (shm: the peers mapped so far; ofi:
   * the launcher's local world size): waiters then hand the core over instead of spinning.
   */
  readonly oversubscribed: boolean;
  /**
   * Fabric devices with a CQ wait fd: until that fd next turns readable, then add 1 to
   * `words[index]` (a futex in shared memory) and wake its waiters, from a helper thread; false
   * when the device cannot. Lets a device over two providers sleep on one futex for both.
   */
  ringOnActivity?(words: Int32Array, index: number): boolean;
  /**
   * Fabric devices: true while this process has fabric work under way (operations posted and
   * not completed, commands or credits not yet handed over, completions not yet read). When
   * false, a poll can only find what a peer sent unasked, and a device over two providers
   * may read this one less often for a waiter that waits on the other (`CompletionQueue.pollNear`).
   */
  hasWorkInFlight?(): boolean;
  /**
   * Fabric devices that batch posts (ofi: one native call per poll): hands what was posted so
   * far to the provider now, so it moves while the caller does other work before polling.
   */
  flush?(): void;
  /** Allocates and registers `byteLength` bytes that peers may access. */
  allocate(byteLength: number): MemoryRegion;
  /**
   * Registers existing memory in place. ofi accepts any ArrayBuffer-backed view; shm accepts
   * only views of memory from this device's `allocate` (other memory is not shared).
   */
  register(view: ArrayBufferView): MemoryRegion;
  createQueuePair(options?: QueuePairOptions): QueuePair;
  /** Closes every QP (pending operations fail with FLUSHED) and releases all memory. */
  close(): void;
}
