/**
 * Point to point: tagged send/recv of typed arrays, with receive-from-any. Messages between
 * two ranks with the same tag arrive in the order they were sent.
 */
import { WeftError } from '../errors.js';
import { Deadline } from '../util/deadline.js';
import { RecvOp, SendOp, type TransportOp } from '../transport/ops.js';
import { collectiveSlot } from '../transport/signature.js';
import { bytesOf, checkArray, type TypedArray } from './checks.js';
import { refused, type CollectiveOptions, type Group } from './call.js';

/** A send or receive in flight (from isend / irecv). */
export class Request {
  constructor(
    private readonly g: Group,
    private readonly op: TransportOp,
    private readonly what: string,
    private readonly options: CollectiveOptions,
  ) {}
  /** True once finished (successfully or not); call wait to learn which. */
  get completed(): boolean {
    return this.op.settled;
  }
  /** Resolves to the peer rank (the source, for a receive) once the operation finished. */
  async wait(): Promise<number> {
    await this.g.transport.waitAsync([this.op], new Deadline(this.options.timeoutMs, this.options.signal), this.what);
    return this.g.transport.groupRank(this.op.peer);
  }
  waitSync(): number {
    this.g.transport.waitSync([this.op], new Deadline(this.options.timeoutMs, this.options.signal), this.what);
    return this.g.transport.groupRank(this.op.peer);
  }
  /** Bytes received (receives) or sent. */
  get byteLength(): number {
    return this.op instanceof RecvOp ? this.op.got : (this.op as SendOp).src.byteLength;
  }
}

function peerCheck(g: Group, where: string, r: number): void {
  if (!Number.isInteger(r) || r < 0 || r >= g.size || r === g.rank) throw new WeftError('EINVAL', `${where}: rank ${r} is not a peer (world size ${g.size}, this is rank ${g.rank})`);
}

function tagOf(where: string, options: CollectiveOptions): number {
  const tag = options.tag ?? 0;
  if (!Number.isInteger(tag) || tag < 0 || tag > 0xffffffff) throw new WeftError('EINVAL', `${where}: tag must be an integer in [0, 2^32), got ${tag}`);
  return tag;
}

/**
 * Starts sending `data` to rank `dst`; the array must not change until the request completes.
 *
 * @example
 * const req = isend(ctx, Float32Array.of(1, 2, 3), 1, { tag: 5 });
 * await req.wait();
 */
export function isend(g: Group, data: TypedArray, dst: number, options: CollectiveOptions = {}): Request {
  const where = `rank ${g.rank}: send to rank ${dst}`;
  let tag: number;
  try {
    checkArray(where, 'data', data);
    peerCheck(g, where, dst);
    tag = tagOf(where, options);
    g.transport.checkUsable(`send to rank ${dst} (tag ${tag})`);
  } catch (err) {
    throw refused(g, err);
  }
  const op = new SendOp(g.transport.worldRank(dst), collectiveSlot('p2p', tag) + g.transport.slotBase, bytesOf(data), 0, 0, 0);
  g.transport.pair(dst).send(op);
  return new Request(g, op, `${where} (tag ${tag})`, options);
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
  const srcs = src === undefined ? [...Array(g.size).keys()].filter((r) => r !== g.rank) : typeof src === 'number' ? [src] : [...src];
  const where = `rank ${g.rank}: recv from ${srcs.length === 1 ? `rank ${srcs[0]}` : src === undefined ? 'any rank' : `ranks ${srcs.join(', ')}`}`;
  let tag: number;
  try {
    checkArray(where, 'data', data);
    if (srcs.length === 0) throw new WeftError('EINVAL', `${where}: no source rank${g.size === 1 ? ' (world size 1)' : ''}`);
    for (const s of srcs) peerCheck(g, where, s);
    tag = tagOf(where, options);
    g.transport.checkUsable(`recv (tag ${tag})`);
  } catch (err) {
    throw refused(g, err);
  }
  const op = new RecvOp(srcs.map((s) => g.transport.worldRank(s)), collectiveSlot('p2p', tag) + g.transport.slotBase, bytesOf(data), -1, 0, undefined);
  for (const s of srcs) {
    g.transport.pair(s).post(op);
    if (op.matched || op.settled) break;
  }
  return new Request(g, op, `${where} (tag ${tag})`, options);
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
