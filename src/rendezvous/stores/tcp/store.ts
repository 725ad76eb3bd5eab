/**
 * TcpStore: the client of TcpStoreServer (binary protocol in protocol.ts).
 */
import { randomBytes, type KeyObject } from 'node:crypto';
import { connect as netConnect, type Socket } from 'node:net';
import { WeftError } from '../../../errors.js';
import { Deadline, defaultTimeoutMs, timerMs, type WaitOptions } from '../../../util/deadline.js';
import { newStats, writeDeadline, type CloseOptions, type SetOptions, type Store, type StoreStats, type WriteOptions } from '../../store.js';
import { checkDelta, checkKey, checkKeys, checkValue } from '../shared/arguments.js';
import { existsError } from '../shared/values.js';
import { listKeys, sleep, waitError } from '../shared/wait-for-keys.js';
import { credentialFromEnv } from '../shared/secrets.js';
import { DEFAULT_MAX_FRAME, FLAG_AUTH, FLAG_ONCE, FrameReader, FrameSplitter, FrameWriter, handshakeProof, MAGIC, NONCE_BYTES, Op, proofMatches, ProtocolError, secretKey, Status, VERSION } from './protocol.js';

export interface TcpStoreOptions extends WaitOptions {
  /** Bound of operations that take no WaitOptions (set, add, ...); default WEFT_TIMEOUT_MS or 30 s. */
  opTimeoutMs?: number;
  /** Largest accepted frame in bytes (default 64 MiB). */
  maxFrameBytes?: number;
  /** A server this process hosts (rank 0): closed together with this client. */
  server?: { close(): Promise<void> };
  /**
   * The store server's shared secret, proven at connection start (challenge-response; the
   * secret never crosses the wire, see protocol.ts). Default: the WEFT_STORE_SECRET
   * environment variable, else the file WEFT_STORE_SECRET_FILE names (`weft run` sets
   * WEFT_STORE_SECRET for its ranks). `null`: connect without one, to a server that runs
   * without a secret. Never put it in the URL.
   */
  secret?: string | null;
}

interface Pending {
  resolve(r: FrameReader): void;
  reject(e: Error): void;
}

// How long past the caller's deadline we wait for the server's own TIMEOUT answer before
// concluding that the server is stuck.
const SERVER_GRACE_MS = 1000;

/** Parses `tcp://host:port` (IPv6 as `tcp://[::1]:port`); port 0 only if `anyPort` (a server binding any free port). */
export function parseTcpUrl(url: string, anyPort = false): { host: string; port: number } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new WeftError('EINVAL', `TcpStore: '${url}' is not a URL; expected tcp://host:port`);
  }
  const port = u.port === '' ? NaN : Number(u.port);
  if (u.username || u.password) {
    throw new WeftError('EINVAL', `TcpStore: '${url.replace(/\/\/[^@/]*@/, '//')}' carries a user or password; a TcpStore takes its secret from WEFT_STORE_SECRET or WEFT_STORE_SECRET_FILE (or the secret option), never from the URL, which ends up on command lines where every local user can read it`);
  }
  if (u.protocol !== 'tcp:' || !u.hostname || !Number.isInteger(port) || (port === 0 && !anyPort)) throw new WeftError('EINVAL', `TcpStore: expected tcp://host:port, got '${url}'`);
  return { host: u.hostname.replace(/^\[(.*)\]$/, '$1'), port };
}

/**
 * Talks to a TcpStoreServer over one TCP connection with pipelined requests: every call is
 * one frame and one round trip (multiGet of n keys too), and waits are held by the server,
 * so nothing polls. If the connection drops, pending calls fail naming the address and the
 * next call reconnects (within its timeout); the server keeps its data only while it lives.
 * Each connection starts with a mutual challenge-response on the server's secret: a client
 * without it, or with another, fails at once with EINVAL naming the address and the fix.
 *
 * @example
 * const store = await TcpStore.connect('tcp://10.0.0.1:29500', { timeoutMs: 60_000 });
 * await store.set('rank/2', addr, { once: true });
 * const [a0, a1] = await store.multiGet(['rank/0', 'rank/1']);
 */
export class TcpStore implements Store {
  /** Request frames sent (`commands`) and calls that waited for an answer (`roundTrips`). */
  readonly stats: StoreStats = newStats();
  readonly url: string;
  private readonly host: string;
  private readonly port: number;
  private readonly opTimeoutMs: number;
  private readonly maxFrame: number;
  private socket: Socket | undefined;
  private connecting: Promise<void> | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed = false;
  private readonly server: { close(): Promise<void> } | undefined;
  // A KeyObject in a private field: printing the store never shows the secret.
  readonly #key: KeyObject | undefined;
  /** Where the secret came from, for messages ("WEFT_STORE_SECRET", ...), never the secret. */
  private readonly secretSource: string | undefined;

  private constructor(url: string, options: TcpStoreOptions) {
    this.server = options.server;
    ({ host: this.host, port: this.port } = parseTcpUrl(url));
    this.url = `tcp://${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`;
    this.opTimeoutMs = options.opTimeoutMs ?? defaultTimeoutMs();
    this.maxFrame = options.maxFrameBytes ?? DEFAULT_MAX_FRAME;
    const secret = options.secret;
    if (secret === undefined) {
      const c = credentialFromEnv('WEFT_STORE_SECRET', `TcpStore ${this.url}`);
      if (c) (this.#key = secretKey(c.value)), (this.secretSource = c.source);
    } else if (secret !== null) {
      if (typeof secret !== 'string' || !secret) throw new WeftError('EINVAL', `TcpStore ${this.url}: secret must be a non-empty string (or null to connect without one)`);
      this.#key = secretKey(secret);
      this.secretSource = 'the secret option';
    }
  }

  /**
   * Connects to the server at `tcp://host:port`, retrying within `timeoutMs` while nothing
   * listens yet (ranks may start before the rank hosting the server).
   */
  static async connect(url: string, options: TcpStoreOptions = {}): Promise<TcpStore> {
    const store = new TcpStore(url, options);
    await store.ensureConnected('connect', new Deadline(options.timeoutMs, options.signal));
    return store;
  }

  // ---------------------------------------------------------------- Store API

  async set(key: string, value: Uint8Array, options: SetOptions = {}): Promise<void> {
    checkKey('TcpStore.set', key);
    checkValue('TcpStore.set', key, value);
    await this.multiSetChecked('set', [[key, value]], options);
  }

  async multiSet(entries: [string, Uint8Array][], options: SetOptions = {}): Promise<void> {
    if (!Array.isArray(entries)) throw new WeftError('EINVAL', 'TcpStore.multiSet: entries must be an array of [key, value] pairs');
    for (const e of entries) {
      checkKey('TcpStore.multiSet', e?.[0]);
      checkValue('TcpStore.multiSet', e[0], e[1]);
    }
    if (entries.length) await this.multiSetChecked('multiSet', entries, options);
  }

  async get(key: string, options?: WaitOptions): Promise<Uint8Array> {
    checkKey('TcpStore.get', key);
    const r = await this.held('get', Op.GET, [key], options);
    return r.bytes();
  }

  async multiGet(keys: string[], options?: WaitOptions): Promise<Uint8Array[]> {
    checkKeys('TcpStore.multiGet', keys);
    if (!keys.length) return [];
    const r = await this.held('multiGet', Op.MGET, keys, options);
    const n = r.u32();
    const out: Uint8Array[] = [];
    for (let i = 0; i < n; i++) out.push(r.bytes());
    return out;
  }

  async wait(keys: string[], options?: WaitOptions): Promise<void> {
    checkKeys('TcpStore.wait', keys);
    if (keys.length) await this.held('wait', Op.WAIT, keys, options);
  }

  async add(key: string, delta: number, options: WriteOptions = {}): Promise<number> {
    checkKey('TcpStore.add', key);
    checkDelta('TcpStore.add', key, delta);
    const r = await this.call(`add('${key}')`, this.writeDeadline(options, `add('${key}')`), (f) => f(Op.ADD).str(key).i64(BigInt(delta)));
    return Number(this.ok(`add('${key}')`, r).i64());
  }

  async delete(key: string, options: WriteOptions = {}): Promise<boolean> {
    checkKey('TcpStore.delete', key);
    const r = await this.call(`delete('${key}')`, this.writeDeadline(options, `delete('${key}')`), (f) => f(Op.DELETE).str(key));
    return this.ok(`delete('${key}')`, r).u8() === 1;
  }

  async compareSet(key: string, expected: Uint8Array, desired: Uint8Array, options: WriteOptions = {}): Promise<Uint8Array> {
    checkKey('TcpStore.compareSet', key);
    checkValue('TcpStore.compareSet', key, expected);
    checkValue('TcpStore.compareSet', key, desired);
    const r = await this.call(`compareSet('${key}')`, this.writeDeadline(options, `compareSet('${key}')`), (f) => f(Op.CAS).str(key).bytes(expected).bytes(desired));
    return this.ok(`compareSet('${key}')`, r).bytes();
  }

  /** Deletes every key equal to `prefix` or under `prefix/` ('' = every key); returns how many. */
  async purge(prefix: string): Promise<number> {
    const r = await this.call(`purge('${prefix}')`, new Deadline(this.opTimeoutMs), (f) => f(Op.PURGE).str(prefix));
    return this.ok(`purge('${prefix}')`, r).u32();
  }

  /** Disconnects (and stops the server it hosts, if any); `{ purge: true }` first deletes every key on the server. */
  async close(options: CloseOptions = {}): Promise<void> {
    if (this.closed) return;
    if (options.purge) await this.purge('');
    this.closed = true;
    this.socket?.destroy();
    this.fail(new WeftError('ECLOSED', `TcpStore ${this.url}: the store was closed while the call was pending`));
    await this.server?.close();
  }

  // ---------------------------------------------------------------- internals

  /** A write's bound: its own timeoutMs (else the store's operation timeout) and signal. */
  private writeDeadline(options: WriteOptions, what: string): Deadline {
    return writeDeadline(`TcpStore ${this.url}: ${what}`, options, this.opTimeoutMs);
  }

  private async multiSetChecked(op: string, entries: [string, Uint8Array][], options: SetOptions): Promise<void> {
    const flags = options.once ? FLAG_ONCE : 0;
    const what = `${op}(${listKeys(entries.map(([k]) => k), 3)})`;
    const r = await this.call(what, this.writeDeadline(options, what), (f) => {
      if (op === 'set') return f(Op.SET).u8(flags).str(entries[0][0]).bytes(entries[0][1]);
      const w = f(Op.MSET).u8(flags).u32(entries.length);
      for (const [k, v] of entries) w.str(k).bytes(v);
      return w;
    });
    if (r.code === Status.EXISTS) {
      const [key, value] = entries[r.u32()] ?? [];
      throw existsError(`TcpStore ${this.url}: ${op}`, key ?? '?', r.bytes(), value);
    }
    this.ok(what, r);
  }

  /** A GET/WAIT/MGET the server holds until the keys exist or the timeout it was given. */
  private async held(op: string, code: number, keys: string[], options?: WaitOptions): Promise<FrameReader> {
    const deadline = new Deadline(options?.timeoutMs, options?.signal);
    const what = `TcpStore ${this.url}: ${op}`;
    if (deadline.signal?.aborted) throw waitError(what, deadline, keys, keys.length);
    const timeoutMs = Math.min(Math.max(0, Math.ceil(deadline.remaining())), 0xffffffff);
    const r = await this.call(op, deadline, (f) => {
      const w = f(code).u32(timeoutMs);
      if (code === Op.GET) return w.str(keys[0]);
      w.u32(keys.length);
      for (const k of keys) w.str(k);
      return w;
    }, keys);
    if (r.code === Status.TIMEOUT) {
      const missing: string[] = [];
      for (let i = 0, n = r.u32(); i < n; i++) missing.push(keys[r.u32()]);
      throw waitError(what, deadline, missing, keys.length);
    }
    return this.ok(op, r);
  }

  private ok(what: string, r: FrameReader): FrameReader {
    if (r.code === Status.OK) return r;
    if (r.code === Status.ERROR) throw new WeftError('EINVAL', `TcpStore ${this.url}: ${r.str()}`);
    throw new WeftError('EPROTO', `TcpStore ${this.url}: ${what}: unexpected answer status ${r.code}; is the server a different weft version?`);
  }

  /**
   * Sends one request and resolves with its answer. `waitKeys` marks a held wait: the server
   * times it out itself, so our timer only fires if the server is stuck; an abort cancels it.
   */
  private async call(what: string, deadline: Deadline, build: (f: (code: number) => FrameWriter) => FrameWriter, waitKeys?: string[]): Promise<FrameReader> {
    if (this.closed) throw new WeftError('ECLOSED', `TcpStore ${this.url}: ${what} after close()`);
    await this.ensureConnected(what, deadline);
    const id = this.newId();
    let frame: Buffer;
    try {
      frame = build((code) => new FrameWriter(code, id)).finish();
    } catch (e) {
      if (e instanceof ProtocolError) throw new WeftError('EINVAL', `TcpStore.${what}: ${e.message}`);
      throw e;
    }
    this.stats.commands++;
    this.stats.roundTrips++;
    const socket = this.socket as Socket;
    return new Promise<FrameReader>((resolve, reject) => {
      const finish = () => {
        clearTimeout(timer);
        deadline.signal?.removeEventListener('abort', onAbort);
        this.pending.delete(id);
      };
      const onTimeout = () => {
        finish();
        reject(new WeftError('ETIMEDOUT', `TcpStore ${this.url}: ${what}: the store server did not answer within ${Math.round(deadline.timeoutMs)} ms; is the process hosting TcpStoreServer (rank 0 or the launcher) alive and not blocked?`));
      };
      let sent = false;
      const onAbort = () => {
        finish();
        if (waitKeys) {
          if (sent) {
            this.stats.commands++;
            socket.write(new FrameWriter(Op.CANCEL, 0).u32(id).finish());
          }
          reject(waitError(`TcpStore ${this.url}: ${what}`, deadline, waitKeys, waitKeys.length));
        } else reject(new WeftError('EABORTED', `TcpStore ${this.url}: ${what} aborted by the caller's AbortSignal`, { cause: deadline.signal?.reason }));
      };
      const timer = setTimeout(onTimeout, timerMs(deadline.remaining() + (waitKeys ? SERVER_GRACE_MS : 0)));
      this.pending.set(id, { resolve: (r) => (finish(), resolve(r)), reject: (e) => (finish(), reject(e)) });
      if (deadline.signal?.aborted) return onAbort(); // it fired while we were connecting
      deadline.signal?.addEventListener('abort', onAbort, { once: true });
      socket.write(frame);
      sent = true;
    });
  }

  private async ensureConnected(what: string, deadline: Deadline): Promise<void> {
    while (!this.socket) {
      this.connecting ??= this.open(what, deadline).finally(() => (this.connecting = undefined));
      await this.connecting;
    }
  }

  /** Dials (retrying while refused, within the deadline) and greets with HELLO. */
  private async open(what: string, deadline: Deadline): Promise<void> {
    let delay = 20;
    let last: Error | undefined;
    for (;;) {
      if (this.closed) throw new WeftError('ECLOSED', `TcpStore ${this.url}: ${what} after close()`);
      if (deadline.signal?.aborted) throw new WeftError('EABORTED', `TcpStore ${this.url}: ${what}: aborted while connecting`, { cause: deadline.signal.reason });
      if (deadline.remaining() <= 0) {
        throw new WeftError('ETIMEDOUT', `TcpStore ${this.url}: ${what}: could not connect to the store server within ${Math.round(deadline.timeoutMs)} ms (last error: ${last?.message ?? 'none'}); is TcpStoreServer running there (hosted by rank 0 or the launcher), and is the port reachable?`, { cause: last });
      }
      try {
        const socket = await this.dial(deadline);
        this.attach(socket);
        try {
          await this.handshake(socket, what, deadline);
        } catch (e) {
          socket.destroy();
          throw e;
        }
        if (socket.destroyed) throw new WeftError('EPEERDEAD', `TcpStore ${this.url}: ${what}: the store server closed the connection right after the handshake`);
        this.socket = socket;
        return;
      } catch (e) {
        if (e instanceof WeftError) throw e;
        last = e as Error;
      }
      await sleep(Math.min(delay, Math.max(0, deadline.remaining())), deadline.signal);
      delay = Math.min(delay * 2, 500);
    }
  }

  /**
   * HELLO with our nonce; check the server's proof (it knows our secret) and answer its
   * challenge with AUTH (see protocol.ts). Every failure is a WeftError, thrown at once: a
   * wrong or missing secret does not get better by retrying.
   */
  private async handshake(socket: Socket, what: string, deadline: Deadline): Promise<void> {
    const where = `TcpStore ${this.url}: ${what}`;
    const notWeft = () => new WeftError('EPROTO', `${where}: the server there did not answer the weft handshake; is it a TcpStoreServer (not e.g. Redis), of the same weft version?`);
    const clientNonce = randomBytes(NONCE_BYTES);
    let hello: FrameReader | undefined;
    try {
      hello = await this.exchange(socket, deadline, (id) => new FrameWriter(Op.HELLO, id).u32(MAGIC).u16(VERSION).bytes(clientNonce));
    } catch (e) {
      // Closed before it answered HELLO: a server busy with other handshakes refuses new
      // connections that way (MAX_HANDSHAKES). A plain Error: open() dials again within the deadline.
      if ((e as WeftError).code === 'EPEERDEAD') throw new Error('the server closed the connection before answering HELLO (too many connections in their handshake?)', { cause: e });
      throw e;
    }
    if (!hello || hello.code !== Status.OK) throw notWeft();
    let flags: number;
    let serverNonce: Uint8Array;
    let serverProof: Uint8Array;
    try {
      flags = hello.u8();
      serverNonce = hello.bytes();
      serverProof = hello.bytes();
      hello.end();
    } catch (e) {
      if (e instanceof ProtocolError) throw notWeft();
      throw e;
    }
    if (serverNonce.byteLength !== NONCE_BYTES) throw notWeft();
    const key = this.#key;
    if (!(flags & FLAG_AUTH)) {
      if (!key) return;
      throw new WeftError('EINVAL', `${where}: the server there runs without a secret, but this process has one (${this.secretSource}): it is not the store that secret is for (another process on that port?), or it was started without the secret. Start the server with the same secret, or connect with { secret: null }`);
    }
    if (!key) {
      throw new WeftError('EINVAL', `${where}: the store server requires a secret and this process has none: set WEFT_STORE_SECRET (or WEFT_STORE_SECRET_FILE, the path of a file holding it) to the secret the server was started with (\`weft run\` sets it for its ranks), or pass { secret }`);
    }
    if (!proofMatches(serverProof, handshakeProof(key, 'server', clientNonce, serverNonce))) {
      throw new WeftError('EINVAL', `${where}: the store server does not know this process's secret (${this.secretSource}): the secret differs from the one the server was started with (a stale WEFT_STORE_SECRET, or another job's server on that port?); set WEFT_STORE_SECRET to the job's secret`);
    }
    const auth = await this.exchange(socket, deadline, (id) => new FrameWriter(Op.AUTH, id).bytes(handshakeProof(key, 'client', serverNonce, clientNonce)));
    if (!auth) throw new WeftError('ETIMEDOUT', `${where}: the store server did not answer the authentication within ${Math.round(deadline.timeoutMs)} ms; is the process hosting it alive and not blocked?`);
    if (auth.code === Status.DENIED) throw new WeftError('EINVAL', `${where}: the store server refused this process's secret (${this.secretSource}): ${auth.str()}; set WEFT_STORE_SECRET to the job's secret`);
    if (auth.code !== Status.OK) throw notWeft();
  }

  /** One handshake request and its answer; undefined if none came before the deadline. */
  private exchange(socket: Socket, deadline: Deadline, build: (id: number) => FrameWriter): Promise<FrameReader | undefined> {
    const id = this.newId();
    let timer: NodeJS.Timeout | undefined;
    return new Promise<FrameReader | undefined>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      timer = setTimeout(() => resolve(undefined), timerMs(deadline.remaining()));
      socket.write(build(id).finish()); // not counted in stats: connection setup, as in RedisStore
    }).finally(() => (clearTimeout(timer), this.pending.delete(id)));
  }

  private dial(deadline: Deadline): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = netConnect({ host: this.host, port: this.port, noDelay: true });
      const t = setTimeout(() => (s.destroy(), reject(new Error('connect timed out'))), Math.max(1, timerMs(deadline.remaining())));
      s.once('connect', () => (clearTimeout(t), s.removeAllListeners('error'), resolve(s)));
      s.once('error', (e) => (clearTimeout(t), s.destroy(), reject(e)));
    });
  }

  /** Routes answers to their calls; the socket becomes `this.socket` once the handshake passed. */
  private attach(socket: Socket): void {
    const splitter = new FrameSplitter(this.maxFrame);
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const body of splitter.push(chunk)) {
          const r = new FrameReader(body);
          this.pending.get(r.id)?.resolve(r);
        }
      } catch (e) {
        this.fail(new WeftError('EPROTO', `TcpStore ${this.url}: the server sent bytes that are not the weft store protocol (${(e as Error).message}); is it a TcpStoreServer of the same weft version?`));
        socket.destroy();
      }
    });
    socket.on('error', () => {}); // 'close' follows and fails the pending calls
    socket.on('close', () => {
      if (this.socket === socket) this.socket = undefined;
      if (!this.closed) this.fail(new WeftError('EPEERDEAD', `TcpStore ${this.url}: lost the connection to the store server; is the process hosting TcpStoreServer (rank 0 or the launcher) still alive? Its keys are gone if it restarted.`));
    });
  }

  private newId(): number {
    const id = this.nextId;
    this.nextId = (this.nextId + 1) >>> 0 || 1;
    return id;
  }

  private fail(err: WeftError): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.reject(err);
  }
}
