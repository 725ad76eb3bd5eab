/**
 * Point to point: tagged send/recv of typed arrays, with receive-from-any. Messages between
 * two ranks with the same tag arrive in the order they were sent.
 */
import { WeftError } from '../errors.js';
import { Deadline } from '../util/deadline.js';
import { RecvOp, SendOp, type TransportOp } from '../transport/ops.js';
import { collectiveSlot } from '../transport/signature.js';
import { bytesOf, checkArray, isTypedArray, type TypedArray } from './checks.js';
import { refused, type CollectiveOptions, type Group } from './call.js';

/** A send or receive in flight (from isend / irecv). */
export class Request {
  private readonly ops: readonly TransportOp[];
  private label: string | undefined;

  constructor(
    private readonly g: Group,
    private readonly op: TransportOp,
    /** The peer (a send) or the sources as given (a receive: a rank, ranks, or undefined for any). */
    private readonly peer: number | readonly number[] | undefined,
    private readonly tag: number,
    private readonly options: CollectiveOptions,
  ) {
    this.ops = [op];
  }
  /** True once finished (successfully or not); call wait to learn which. */
  get completed(): boolean {
    return this.op.settled;
  }
  /** Resolves to the peer rank (the source, for a receive) once the operation finished. */
  async wait(): Promise<number> {
    await this.g.transport.waitAsync(this.ops, new Deadline(this.options.timeoutMs, this.options.signal), this.describe);
    return this.g.transport.groupRank(this.op.peer);
  }
  waitSync(): number {
    this.g.transport.waitSync(this.ops, new Deadline(this.options.timeoutMs, this.options.signal), this.describe);
    return this.g.transport.groupRank(this.op.peer);
  }
  /** Bytes received (receives) or sent. */
  get byteLength(): number {
    return this.op instanceof RecvOp ? this.op.got : (this.op as SendOp).src.byteLength;
  }
  /** "rank R: send to rank D (tag T)": made when an error needs it, not per call. */
  private readonly describe = (): string => {
    this.label ??= `${this.op instanceof RecvOp ? recvWhere(this.g, this.peer) : sendWhere(this.g, this.peer as number)} (tag ${this.tag})`;
    return this.label;
  };
}

function sendWhere(g: Group, dst: number): string {
  return `rank ${g.rank}: send to rank ${dst}`;
}

function recvWhere(g: Group, src: number | readonly number[] | undefined): string {
  const from = typeof src === 'number' ? `rank ${src}` : src === undefined ? 'any rank' : src.length === 1 ? `rank ${src[0]}` : src.length === 0 ? 'an empty list of ranks' : `ranks ${src.join(', ')}`;
  return `rank ${g.rank}: recv from ${from}`;
}

function peerCheck(g: Group, where: string, r: number): void {
  if (!Number.isInteger(r) || r < 0 || r >= g.size || r === g.rank) throw new WeftError('EINVAL', `${where}: rank ${r} is not a peer (world size ${g.size}, this is rank ${g.rank})`);
}

function tagOf(where: string, options: CollectiveOptions): number {
  const tag = options.tag ?? 0;
  if (!Number.isInteger(tag) || tag < 0 || tag > 0xffffffff) throw new WeftError('EINVAL', `${where}: tag must be an integer in [0, 2^32), got ${typeof tag === 'string' ? JSON.stringify(tag) : String(tag)}`);
  return tag;
}

/** The checks every call passes, without building a string: the error path redoes them with names. */
function plainArgs(g: Group, data: unknown, tag: unknown): boolean {
  return isTypedArray(data) && data.byteLength > 0 && typeof tag === 'number' && tag >>> 0 === tag && g.transport.usable;
}

function isPeer(g: Group, r: unknown): boolean {
  return typeof r === 'number' && r >>> 0 === r && r < g.size && r !== g.rank;
}

/** The slot of point-to-point messages with tag 0 (a tag adds to it). */
const P2P_SLOT = collectiveSlot('p2p', 0);

/**
 * Starts sending `data` to rank `dst`; the array must not change until the request completes.
 *
 * @example
 * const req = isend(ctx, Float32Array.of(1, 2, 3), 1, { tag: 5 });
 * await req.wait();
 */
export function isend(g: Group, data: TypedArray, dst: number, options: CollectiveOptions = {}): Request {
  let tag = options.tag ?? 0;
  if (!(plainArgs(g, data, tag) && isPeer(g, dst))) {
    const where = sendWhere(g, dst);
    try {
      checkArray(where, 'data', data);
      peerCheck(g, where, dst);
      tag = tagOf(where, options);
      g.transport.checkUsable(`send to rank ${dst} (tag ${tag})`);
    } catch (err) {
      throw refused(g, err);
    }
  }
  const op = new SendOp(g.transport.worldRank(dst), P2P_SLOT + tag + g.transport.slotBase, bytesOf(data), 0, 0, 0);
  g.transport.pair(dst).send(op);
  return new Request(g, op, dst, tag, options);
}

/**
 * Starts receiving into `data` from `src` (a rank, several ranks, or undefined for any rank).
 * The message may be shorter than `data`; `Request.byteLength` says how long it was.
 *
 * @example
 * const buf = new Float32Array(3);
 * const from = await irecv(ctx, buf, undefined, { tag: 5 }).wait();
 */
export function irecv(g: Group, data: TypedArray, src: number | readonly number[] | undefined, options: CollectiveOptions = {}): Request {
  let tag = options.tag ?? 0;
  const sourcesOk = typeof src === 'number' ? isPeer(g, src) : src === undefined ? g.size > 1 : Array.isArray(src) && src.length > 0 && src.every((r) => isPeer(g, r));
  if (!(plainArgs(g, data, tag) && sourcesOk)) {
    const srcs = sourcesOf(g, src);
    const where = recvWhere(g, src);
    try {
      checkArray(where, 'data', data);
      if (srcs.length === 0) throw new WeftError('EINVAL', `${where}: no source rank${g.size === 1 ? ' (world size 1)' : ''}`);
      for (const s of srcs) peerCheck(g, where, s);
      tag = tagOf(where, options);
      g.transport.checkUsable(`recv (tag ${tag})`);
    } catch (err) {
      throw refused(g, err);
    }
  }
  const t = g.transport;
  if (typeof src === 'number') {
    const op = new RecvOp([t.worldRank(src)], P2P_SLOT + tag + t.slotBase, bytesOf(data), -1, 0, undefined);
    t.pair(src).post(op);
    return new Request(g, op, src, tag, options);
  }
  const srcs = sourcesOf(g, src);
  const op = new RecvOp(srcs.map((s) => t.worldRank(s)), P2P_SLOT + tag + t.slotBase, bytesOf(data), -1, 0, undefined);
  for (const s of srcs) {
    t.pair(s).post(op);
    if (op.matched || op.settled) break;
  }
  return new Request(g, op, src, tag, options);
}

/** The group ranks a receive listens to. */
function sourcesOf(g: Group, src: number | readonly number[] | undefined): number[] {
  return src === undefined ? [...Array(g.size).keys()].filter((r) => r !== g.rank) : typeof src === 'number' ? [src] : [...src];
}

/** Sends and waits until `data` may be reused. */
export async function send(g: Group, data: TypedArray, dst: number, options: CollectiveOptions = {}): Promise<void> {
  await isend(g, data, dst, options).wait();
}

/** Receives; resolves to the source rank. */
export async function recv(g: Group, data: TypedArray, src?: number | readonly number[], options: CollectiveOptions = {}): Promise<number> {
  return irecv(g, data, src, options).wait();
}

export function sendSync(g: Group, data: TypedArray, dst: number, options: CollectiveOptions = {}): void {
  isend(g, data, dst, options).waitSync();
}

export function recvSync(g: Group, data: TypedArray, src?: number | readonly number[], options: CollectiveOptions = {}): number {
  return irecv(g, data, src, options).waitSync();
}
