/**
 * The convenience layer: `await ep.request(bytes)` and `ctx.serve(handler)`. One driver per
 * context runs the poll loop while anything is outstanding: it polls, hands requests to the
 * server's handler, retries calls that met RING_FULL / INSUFFICIENT_CREDIT, and when idle
 * waits on the completion queue (spin, yield, sleep), woken early by new work. It allocates
 * per request (a promise, a record, a copy of the response); the zero-allocation path is
 * Endpoint.call + Context.poll/recv.
 *
 * While a driver runs it owns ctx.poll(): do not poll the same context yourself meanwhile.
 */
import { WeftError } from '../errors.js';
import { defaultTimeoutMs, type WaitOptions } from '../util/deadline.js';
import type { Context } from './context.js';
import type { Endpoint } from './endpoint.js';
import type { RecvHandle } from './recv-handle.js';

/** Options of `Endpoint.request`. */
export interface RequestOptions extends WaitOptions {
  /** Largest response payload accepted (default min(4096, ep.maxResponseAllowance)). */
  responseAllowance?: number;
}

/** Returns the response bytes (a plain Uint8Array, or a promise of one); undefined means empty. */
export type ServeHandler = (payload: Uint8Array, request: RecvHandle<unknown>) => Uint8Array | undefined | Promise<Uint8Array | undefined>;

/** Options of `Context.serve`. */
export interface ServeOptions {
  /** Stops serving when aborted. */
  signal?: AbortSignal;
  /**
   * Called when the handler throws or returns too many bytes; the caller then gets an empty
   * response (copyrpc has no error channel). Default: print to stderr.
   */
  onError?: (err: unknown, request: RecvHandle<unknown>) => void;
}

/** A running `serve`. */
export interface Server {
  /** Requests answered so far. */
  readonly served: number;
  /** Stops handing requests to the handler (replies of running handlers still go out). */
  close(): void;
}

class PendingRequest {
  done = false;
  timer: NodeJS.Timeout | undefined;
  onAbort: (() => void) | undefined;
  constructor(
    readonly ep: Endpoint<unknown>,
    readonly bytes: Uint8Array,
    readonly allowance: number,
    readonly signal: AbortSignal | undefined,
    readonly resolve: (v: Uint8Array) => void,
    readonly reject: (e: unknown) => void,
  ) {}
}

const EMPTY = new Uint8Array(0);
const drivers = new WeakMap<object, Driver>();

/** The driver of `ctx` (created on first use). */
export function driverFor(ctx: Context<unknown>): Driver {
  let d = drivers.get(ctx);
  if (!d) {
    d = new Driver(ctx);
    drivers.set(ctx, d);
  }
  return d;
}

export class Driver {
  /** Requests not settled yet (issued or waiting to be issued). */
  private live = 0;
  private readonly backlog: PendingRequest[] = [];
  private server: { handler: ServeHandler; onError: (err: unknown, h: RecvHandle<unknown>) => void; served: number; closed: boolean } | undefined;
  private handlers = 0;
  private running = false;
  private kickCtl: AbortController | undefined;
  private turns = 0;

  constructor(private readonly ctx: Context<unknown>) {}

  request(ep: Endpoint<unknown>, bytes: Uint8Array, options: RequestOptions = {}): Promise<Uint8Array> {
    if (!(bytes instanceof Uint8Array)) return Promise.reject(new WeftError('EINVAL', `${ep.name}: request(bytes) needs a Uint8Array`));
    const timeoutMs = options.timeoutMs ?? defaultTimeoutMs();
    const allowance = options.responseAllowance ?? Math.min(4096, ep.state === 'ready' ? ep.maxResponseAllowance : 4096);
    return new Promise<Uint8Array>((resolve, reject) => {
      const p = new PendingRequest(ep, bytes, allowance, options.signal, resolve, reject);
      this.live++;
      if (options.signal?.aborted) return this.settle(p, new WeftError('EABORTED', `${ep.name}: request aborted by the caller's AbortSignal before it was sent`, { cause: options.signal.reason }));
      p.timer = setTimeout(() => this.settle(p, new WeftError('ETIMEDOUT', `${ep.name}: request got no response within ${timeoutMs} ms; the peer may be dead, stuck or not serving (it must run serve() or poll and recv()); raise timeoutMs if it is only slow`)), timeoutMs);
      if (options.signal) {
        p.onAbort = () => this.settle(p, new WeftError('EABORTED', `${ep.name}: request aborted by the caller's AbortSignal`, { cause: options.signal?.reason }));
        options.signal.addEventListener('abort', p.onAbort, { once: true });
      }
      if (!this.issue(p)) this.backlog.push(p);
      this.kick();
    });
  }

  serve(handler: ServeHandler, options: ServeOptions = {}): Server {
    if (this.server && !this.server.closed) throw new WeftError('EINVAL', `${this.ctx.label}: serve() is already running on this context; close the first server`);
    const s = {
      handler,
      onError: options.onError ?? ((err: unknown, h: RecvHandle<unknown>) => console.error(`${h.endpoint.name}: serve handler failed for call ${h.callId}: ${(err as Error)?.stack ?? String(err)}`)),
      served: 0,
      closed: false,
    };
    this.server = s;
    const close = () => {
      s.closed = true;
      if (this.server === s) this.server = undefined;
      this.kick();
    };
    options.signal?.addEventListener('abort', close, { once: true });
    this.kick();
    return {
      get served() {
        return s.served;
      },
      close,
    };
  }

  /** Calls `ep.call`; false when it must be retried (ring full, no credit). */
  private issue(p: PendingRequest): boolean {
    if (p.done) return true;
    let r: number;
    try {
      r = p.ep.call(p.bytes, p, p.allowance);
    } catch (err) {
      this.settle(p, err);
      return true;
    }
    return r >= 0;
  }

  private settle(p: PendingRequest, err: unknown, value?: Uint8Array): void {
    if (p.done) return;
    p.done = true;
    this.live--;
    if (p.timer) clearTimeout(p.timer);
    if (p.onAbort) p.signal?.removeEventListener('abort', p.onAbort);
    if (err !== undefined) p.reject(err);
    else p.resolve(value as Uint8Array);
  }

  private readonly onResponse = (ud: unknown, buf: Uint8Array, off: number, len: number): void => {
    if (ud instanceof PendingRequest) this.settle(ud, undefined, buf.slice(off, off + len));
  };

  private readonly onFailed = (ud: unknown, err: WeftError): void => {
    if (ud instanceof PendingRequest) this.settle(ud, err);
  };

  private kick(): void {
    if (!this.running) {
      this.running = true;
      void this.run();
    } else {
      this.kickCtl?.abort();
    }
  }

  private busy(): boolean {
    return this.live > 0 || this.handlers > 0 || (this.server !== undefined && !this.server.closed);
  }

  private async run(): Promise<void> {
    try {
      while (this.busy()) {
        let work = this.ctx.poll(this.onResponse, this.onFailed);
        if (this.server) work += this.dispatch(this.server);
        if (this.backlog.length > 0) work += this.retry();
        if (work === 0) await this.idle();
        else if ((++this.turns & 31) === 0) await new Promise<void>((r) => setImmediate(r));
        else await Promise.resolve();
      }
    } catch (err) {
      // A bug or a callback error: fail what is outstanding rather than hang it.
      for (const p of this.backlog.splice(0)) this.settle(p, err);
      if (this.live > 0) console.error(`${this.ctx.label}: rpc driver stopped: ${(err as Error)?.stack ?? String(err)}`);
    } finally {
      this.running = false;
    }
  }

  private async idle(): Promise<void> {
    const ctl = new AbortController();
    this.kickCtl = ctl;
    try {
      await this.ctx.wait({ timeoutMs: 20, signal: ctl.signal });
    } catch (err) {
      const code = (err as WeftError).code;
      if (code !== 'ETIMEDOUT' && code !== 'EABORTED') throw err;
    } finally {
      this.kickCtl = undefined;
    }
  }

  private retry(): number {
    const b = this.backlog;
    let k = 0;
    while (k < b.length && this.issue(b[k])) k++;
    if (k > 0) b.splice(0, k);
    return k;
  }

  private dispatch(s: NonNullable<Driver['server']>): number {
    let n = 0;
    for (let h = this.ctx.recv(); h; h = this.ctx.recv()) {
      n++;
      let out: Uint8Array | undefined | Promise<Uint8Array | undefined>;
      try {
        // A copy: the ring bytes are only valid until the next poll, and handlers may await.
        out = s.handler(h.payload.slice(), h);
      } catch (err) {
        this.answer(s, h, EMPTY, err);
        continue;
      }
      if (out instanceof Promise) {
        this.handlers++;
        const req = h;
        out.then(
          (v) => this.finish(s, req, v),
          (err) => this.finish(s, req, EMPTY, err),
        );
      } else {
        this.answer(s, h, out);
      }
    }
    return n;
  }

  private finish(s: NonNullable<Driver['server']>, h: RecvHandle<unknown>, v: Uint8Array | undefined, err?: unknown): void {
    this.handlers--;
    this.answer(s, h, v, err);
    this.kick();
  }

  private answer(s: NonNullable<Driver['server']>, h: RecvHandle<unknown>, v: Uint8Array | undefined, err?: unknown): void {
    if (err !== undefined) s.onError(err, h);
    if (!h.live) return;
    let out = v ?? EMPTY;
    if (!(out instanceof Uint8Array) || out.byteLength > h.responseAllowance) {
      s.onError(new WeftError('EINVAL', `${h.endpoint.name}: the handler's response (${out instanceof Uint8Array ? `${out.byteLength} bytes` : typeof out}) exceeds the caller's allowance of ${h.responseAllowance} bytes or is not a Uint8Array; an empty response was sent`), h);
      out = EMPTY;
    }
    h.reply(out);
    s.served++;
  }
}
