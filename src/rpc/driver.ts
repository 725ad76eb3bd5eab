/**
 * The convenience layer: `await ep.request(bytes)` and `rpc.serve(handler)`. One driver per
 * engine runs the poll loop while anything is outstanding: it polls, hands requests to the
 * server's handler, retries calls that met RING_FULL / INSUFFICIENT_CREDIT, and when idle
 * waits through the completion router (the one waiting loop: spin, yield, sleep), woken
 * early by new work. It allocates per request (a promise, a record, a copy of the response);
 * the zero-allocation path is Endpoint.call + RpcEngine.poll/recv.
 *
 * While a driver runs it owns rpc.poll(): do not poll the same engine yourself meanwhile.
 */
import { WeftError } from '../errors.js';
import { turn } from '../host/wait.js';
import { Deadline, defaultTimeoutMs, timerMs, type WaitOptions } from '../util/deadline.js';
import type { RpcEngine } from './engine.js';
import type { Endpoint } from './endpoint.js';
import type { RecvHandle } from './recv-handle.js';

/** Options of `Endpoint.request`. */
export interface RequestOptions extends WaitOptions {
  /** Largest response payload accepted (default min(4096, ep.maxResponseAllowance)). */
  responseAllowance?: number;
}

/** Returns the response bytes (a plain Uint8Array, or a promise of one); undefined means empty. */
export type ServeHandler = (payload: Uint8Array, request: RecvHandle<unknown>) => Uint8Array | undefined | Promise<Uint8Array | undefined>;

/** Options of `RpcEngine.serve`. */
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

class PendingRequest<U> {
  done = false;
  timer: NodeJS.Timeout | undefined;
  onAbort: (() => void) | undefined;
  constructor(
    readonly ep: Endpoint<U>,
    readonly bytes: Uint8Array,
    readonly allowance: number,
    readonly signal: AbortSignal | undefined,
    readonly resolve: (v: Uint8Array) => void,
    readonly reject: (e: unknown) => void,
  ) {}
}

const EMPTY = new Uint8Array(0);

interface Serving {
  handler: ServeHandler;
  onError: (err: unknown, h: RecvHandle<unknown>) => void;
  served: number;
  closed: boolean;
}

export class Driver<U> {
  /** Requests not settled yet (issued or waiting to be issued). */
  private live = 0;
  private readonly backlog: PendingRequest<U>[] = [];
  /** retry(): endpoints that refused a request in this pass. */
  private readonly refused: Endpoint<U>[] = [];
  private server: Serving | undefined;
  private handlers = 0;
  private running = false;
  private kicked = false;
  private turns = 0;
  /** The idle wait has no deadline of its own: requests time out on their timers. */
  private readonly idleCall: { deadline: Deadline; what: string };

  constructor(private readonly engine: RpcEngine<U>) {
    this.idleCall = { deadline: new Deadline(Infinity), what: `${engine.label}: rpc driver` };
  }

  request(ep: Endpoint<U>, bytes: Uint8Array, options: RequestOptions = {}): Promise<Uint8Array> {
    if (!(bytes instanceof Uint8Array)) return Promise.reject(new WeftError('EINVAL', `${ep.name}: request(bytes) needs a Uint8Array`));
    const timeoutMs = options.timeoutMs ?? defaultTimeoutMs();
    const allowance = options.responseAllowance ?? Math.min(4096, ep.state === 'ready' ? ep.maxResponseAllowance : 4096);
    return new Promise<Uint8Array>((resolve, reject) => {
      const p = new PendingRequest<U>(ep, bytes, allowance, options.signal, resolve, reject);
      this.live++;
      if (options.signal?.aborted) return this.settle(p, new WeftError('EABORTED', `${ep.name}: request aborted by the caller's AbortSignal before it was sent`, { cause: options.signal.reason }));
      p.timer = setTimeout(() => this.settle(p, new WeftError('ETIMEDOUT', `${ep.name}: request got no response within ${timeoutMs} ms; the peer may be dead, stuck or not serving (it must run serve() or poll and recv()); raise timeoutMs if it is only slow`)), timerMs(timeoutMs));
      if (options.signal) {
        p.onAbort = () => this.settle(p, new WeftError('EABORTED', `${ep.name}: request aborted by the caller's AbortSignal`, { cause: options.signal?.reason }));
        options.signal.addEventListener('abort', p.onAbort, { once: true });
      }
      if (!this.issue(p)) this.backlog.push(p);
      this.kick();
    });
  }

  serve(handler: ServeHandler, options: ServeOptions = {}): Server {
    if (this.server && !this.server.closed) throw new WeftError('EINVAL', `${this.engine.label}: serve() is already running on this engine; close the first server`);
    const s: Serving = {
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
  private issue(p: PendingRequest<U>): boolean {
    if (p.done) return true;
    let r: number;
    try {
      // The user-data slot carries the request record; onResponse tells it apart by class.
      r = p.ep.call(p.bytes, p as unknown as U, p.allowance);
    } catch (err) {
      this.settle(p, err);
      return true;
    }
    return r >= 0;
  }

  private settle(p: PendingRequest<U>, err: unknown, value?: Uint8Array): void {
    if (p.done) return;
    p.done = true;
    // The last request settled by its timer or signal: an idle loop must notice and stop.
    if (--this.live === 0) this.kick();
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

  /** The engine is closing: every request still outstanding fails with `err`, serving stops. */
  close(err: WeftError): void {
    for (const ep of this.engine.endpoints) ep.drainPending((ud) => this.onFailed(ud, err));
    for (const p of this.backlog.splice(0)) this.settle(p, err);
    if (this.server) this.server.closed = true;
    this.server = undefined;
    this.kick();
  }

  private kick(): void {
    if (!this.running) {
      this.running = true;
      void this.run();
    } else {
      this.kicked = true;
      this.engine.router.kick();
    }
  }

  /**
   * Work left: requests, running handlers, a server, or replies written and not sent yet (a
   * handler that settles after its server closed writes one as the last thing: the loop must
   * go round once more to flush it).
   */
  private busy(): boolean {
    return this.live > 0 || this.handlers > 0 || (this.server !== undefined && !this.server.closed) || this.engine.pendingFlush;
  }

  private async run(): Promise<void> {
    try {
      while (this.busy()) {
        // Kicks before this iteration's poll are served by it (it flushes what they wrote).
        this.kicked = false;
        let work = this.engine.poll(this.onResponse, this.onFailed);
        if (this.server) work += this.dispatch(this.server);
        if (this.backlog.length > 0) work += this.retry();
        if (work === 0) await this.idle();
        else if ((++this.turns & 31) === 0) await turn();
        else await Promise.resolve();
      }
    } catch (err) {
      // A bug or a callback error: fail what is outstanding rather than hang it.
      for (const p of this.backlog.splice(0)) this.settle(p, err);
      if (this.live > 0) console.error(`${this.engine.label}: rpc driver stopped: ${(err as Error)?.stack ?? String(err)}`);
    } finally {
      this.running = false;
    }
  }

  /**
   * Waits (the one waiting loop, through the router) for a completion or a kick. What is
   * pending goes out first (a retry refused for credit may have asked for a report), and a
   * reply written meanwhile outside the loop (through a handle, after an await) wakes it.
   */
  private async idle(): Promise<void> {
    this.engine.flush();
    this.engine.onDirtyWhileIdle = this.wake;
    try {
      await this.engine.router.waitAsync(this.idleReady, this.idleCall);
    } catch (err) {
      const code = (err as WeftError).code;
      if (code !== 'ETIMEDOUT' && code !== 'EABORTED') throw err;
    } finally {
      this.engine.onDirtyWhileIdle = undefined;
    }
  }

  private readonly wake = (): void => {
    if (this.kicked) return;
    this.kicked = true;
    this.engine.router.kick();
  };

  // (A silent peer's endpoint failed: the loop goes round, and its requests reject with EPEERDEAD.)
  private readonly idleReady = (): boolean => this.kicked || this.engine.inboxSize > 0 || !this.busy() || this.engine.checkSilentPeers();

  /**
   * Issues parked requests. Every endpoint gets its turn: one refused for lack of room or
   * credit (a slow or silent peer) holds back only its own later requests, in order, never
   * another endpoint's.
   */
  private retry(): number {
    const b = this.backlog;
    const refused = this.refused;
    let kept = 0;
    let k = 0;
    for (let i = 0; i < b.length; i++) {
      const p = b[i];
      if (!p.done) {
        const held = refused.indexOf(p.ep) >= 0;
        if (held || !this.issue(p)) {
          if (!held) refused.push(p.ep);
          b[kept++] = p;
          continue;
        }
      }
      k++;
    }
    b.length = kept;
    refused.length = 0;
    return k;
  }

  private dispatch(s: Serving): number {
    let n = 0;
    for (let h = this.engine.recv(); h; h = this.engine.recv()) {
      n++;
      let out: Uint8Array | undefined | Promise<Uint8Array | undefined>;
      try {
        // A copy: the ring bytes are only valid until the next poll, and handlers may await.
        out = s.handler(h.payload.slice(), h);
      } catch (err) {
        this.answer(s, h, h.generation, EMPTY, err);
        continue;
      }
      if (out instanceof Promise) {
        this.handlers++;
        const req = h;
        // The handler may reply through the handle itself; the pooled handle then serves a
        // later request by the time this settles, which must not get this answer.
        const gen = h.generation;
        out.then(
          (v) => this.finish(s, req, gen, v),
          (err) => this.finish(s, req, gen, EMPTY, err),
        );
      } else {
        this.answer(s, h, h.generation, out);
      }
    }
    return n;
  }

  private finish(s: Serving, h: RecvHandle<unknown>, gen: number, v: Uint8Array | undefined, err?: unknown): void {
    this.handlers--;
    this.answer(s, h, gen, v, err);
    this.kick();
  }

  /** Answers request `gen` of pooled handle h, unless it was answered already (h replied, maybe reused since). */
  private answer(s: Serving, h: RecvHandle<unknown>, gen: number, v: Uint8Array | undefined, err?: unknown): void {
    if (err !== undefined) s.onError(err, h);
    if (!h.live || h.generation !== gen) return;
    let out = v ?? EMPTY;
    if (!(out instanceof Uint8Array) || out.byteLength > h.responseAllowance) {
      s.onError(new WeftError('EINVAL', `${h.endpoint.name}: the handler's response (${out instanceof Uint8Array ? `${out.byteLength} bytes` : typeof out}) exceeds the caller's allowance of ${h.responseAllowance} bytes or is not a Uint8Array; an empty response was sent`), h);
      out = EMPTY;
    }
    h.reply(out);
    s.served++;
  }
}
