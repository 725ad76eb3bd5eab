/**
 * TcpStoreServer: the embedded store server behind TcpStore, the zero-setup default. Rank 0
 * (or the launcher) hosts it; every rank, rank 0 included, talks to it with TcpStore.
 */
import { randomBytes, type KeyObject } from 'node:crypto';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { WeftError } from '../../../errors.js';
import { encodeCounter, sameBytes } from '../shared/values.js';
import { credentialFromEnv } from '../shared/secrets.js';
import { newStats, type StoreStats } from '../../store.js';
import { DEFAULT_MAX_FRAME, FLAG_AUTH, FLAG_ONCE, FrameReader, FrameSplitter, FrameWriter, handshakeProof, MAGIC, NONCE_BYTES, Op, proofMatches, ProtocolError, secretKey, Status, VERSION } from './protocol.js';
import { timerMs } from '../../../util/deadline.js';

export interface TcpStoreServerOptions {
  /** Interface to listen on (default 127.0.0.1; use 0.0.0.0 or the host's address for multi-host jobs). */
  host?: string;
  /** Port (default 0: any free port; read it from `address`). */
  port?: number;
  /** Largest accepted frame in bytes (default 64 MiB). */
  maxFrameBytes?: number;
  /** Where connection errors are reported (default console.error). */
  log?: (message: string) => void;
  /**
   * The shared secret every client must prove it knows (challenge-response at connection
   * start, see protocol.ts; the secret never crosses the wire). Default: the
   * WEFT_STORE_SECRET environment variable, else the file WEFT_STORE_SECRET_FILE names, else
   * a fresh random secret (read it from `server.secret` and hand it to the clients, e.g. in
   * their WEFT_STORE_SECRET). `null` serves without authentication: then any process that
   * reaches the port can read, change and delete every key.
   */
  secret?: string | null;
  /** A connection that has not completed the handshake within this many ms is closed (default 10 000). */
  handshakeTimeoutMs?: number;
}

/** A held GET/WAIT/MGET: answered when its last missing key appears or its timer fires. */
interface Waiter {
  conn: Conn;
  id: number;
  op: number;
  keys: string[];
  missing: Set<string>;
  timer: NodeJS.Timeout;
}

interface Conn {
  socket: Socket;
  label: string;
  waiters: Map<number, Waiter>;
  /** hello: expects HELLO; auth: challenge sent, expects AUTH; ready: serves requests; closing: denied, ignores everything. */
  stage: 'hello' | 'auth' | 'ready' | 'closing';
  /** The client's and our nonce, while stage is 'auth'. */
  nonces?: { client: Uint8Array; server: Buffer };
  /** Closes the connection if the handshake does not complete in time. */
  handshakeTimer?: NodeJS.Timeout;
  /** Small frames only until the handshake completes. */
  splitter: FrameSplitter;
}

/**
 * Before a client has authenticated it may send only handshake frames (well under 1 KiB), and
 * only so many clients may be in their handshake at once: a stranger cannot make the server
 * buffer 64 MiB frames, nor hold connections open by the thousand.
 */
const HANDSHAKE_FRAME_BYTES = 1024;
const MAX_HANDSHAKES = 256;

/**
 * Serves the TcpStore protocol (see protocol.ts) from memory. Waits are held on the
 * server and answered when the keys exist, so clients never poll. Clients authenticate with
 * the server's secret before anything else; a client with a wrong proof, or sending
 * malformed bytes, loses its connection (logged) without touching a key; the server keeps
 * serving the others.
 *
 * @example
 * // rank 0 (or the launcher): the secret from WEFT_STORE_SECRET, else a random one
 * const server = await TcpStoreServer.listen({ host: '0.0.0.0', port: 29500 });
 * // every rank: WEFT_STORE=tcp://<rank-0 host>:29500 and WEFT_STORE_SECRET=<server.secret>
 * const store = await TcpStore.connect(server.url); // or { secret: server.secret } in-process
 */
export class TcpStoreServer {
  /** Requests served. */
  readonly stats: StoreStats = newStats();
  private readonly data = new Map<string, Uint8Array>();
  private readonly waiting = new Map<string, Set<Waiter>>();
  private readonly conns = new Set<Conn>();
  private readonly log: (message: string) => void;
  private readonly handshakeTimeoutMs: number;
  // Private fields (#): util.inspect / console.log of the server never show the secret.
  readonly #secret: string | null;
  readonly #key: KeyObject | undefined;
  private closed = false;

  private constructor(
    private readonly server: Server,
    private readonly maxFrame: number,
    options: TcpStoreServerOptions,
    secret: string | null,
  ) {
    this.log = options.log ?? ((m) => console.error(m));
    this.handshakeTimeoutMs = options.handshakeTimeoutMs ?? 10_000;
    this.#secret = secret;
    this.#key = secret === null ? undefined : secretKey(secret);
    server.on('connection', (s) => this.accept(s));
  }

  /**
   * Starts listening; resolves once bound. Throws EINVAL for an empty secret, or when
   * WEFT_STORE_SECRET_FILE cannot be read.
   */
  static async listen(options: TcpStoreServerOptions = {}): Promise<TcpStoreServer> {
    const host = options.host ?? '127.0.0.1';
    const port = options.port ?? 0;
    let secret: string | null;
    if (options.secret === undefined) secret = credentialFromEnv('WEFT_STORE_SECRET', 'TcpStoreServer')?.value ?? randomBytes(32).toString('hex');
    else if (options.secret === null) secret = null;
    else if (typeof options.secret !== 'string' || !options.secret) throw new WeftError('EINVAL', 'TcpStoreServer: secret must be a non-empty string (or null to serve without authentication)');
    else secret = options.secret;
    const handshake = options.handshakeTimeoutMs;
    if (handshake !== undefined && !(typeof handshake === 'number' && handshake > 0)) throw new WeftError('EINVAL', `TcpStoreServer: handshakeTimeoutMs must be a positive number, got ${String(handshake)}`);
    const server = createServer({ noDelay: true });
    const store = new TcpStoreServer(server, options.maxFrameBytes ?? DEFAULT_MAX_FRAME, options, secret);
    return new Promise((resolve, reject) => {
      server.once('error', (e) => reject(new WeftError('EINVAL', `TcpStoreServer: cannot listen on ${host}:${port} (${e.message}); pick another port or 0 for any`, { cause: e })));
      server.listen(port, host, () => (store.bound(), resolve(store)));
    });
  }

  /** The bound address. */
  address = { host: '', port: 0 };
  /** `tcp://host:port` for TcpStore.connect / openStore (a wildcard host is reported as loopback). */
  url = '';

  /**
   * The secret clients must prove they know (hand it to them through their environment,
   * WEFT_STORE_SECRET, never a command line), or null when the server runs without one.
   */
  get secret(): string | null {
    return this.#secret;
  }

  /** Open client connections (a launcher hosting the store waits for its job's to go). */
  get connections(): number {
    return this.conns.size;
  }

  private bound(): void {
    const a = this.server.address() as AddressInfo;
    this.address = { host: a.address, port: a.port };
    const h = a.address === '0.0.0.0' ? '127.0.0.1' : a.address === '::' ? '::1' : a.address;
    this.url = `tcp://${h.includes(':') ? `[${h}]` : h}:${a.port}`;
    // Once listening, an accept error (EMFILE with many connections) must not be an unhandled
    // 'error' that kills the launcher hosting the store: say so once per kind and go on.
    const seen = new Set<string>();
    this.server.on('error', (e: NodeJS.ErrnoException) => {
      this.acceptErrors++;
      const kind = e.code ?? e.message;
      if (seen.has(kind)) return;
      seen.add(kind);
      process.stderr.write(`weft TcpStoreServer ${this.url}: ${e.message} (the store goes on serving its connections)\n`);
    });
  }

  /** Errors the listening socket reported after it was bound (accept errors). */
  acceptErrors = 0;

  /** Stops listening and drops every connection (pending waits end with the connection). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const c of this.conns) c.socket.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private accept(socket: Socket): void {
    const label = `${socket.remoteAddress}:${socket.remotePort}`;
    let handshaking = 0;
    for (const c of this.conns) if (c.stage !== 'ready') handshaking++;
    if (handshaking >= MAX_HANDSHAKES) {
      this.log(`weft TcpStoreServer ${this.url}: refusing the connection from ${label}: ${MAX_HANDSHAKES} connections are already in their handshake`);
      socket.destroy();
      return;
    }
    const conn: Conn = { socket, label, waiters: new Map(), stage: 'hello', splitter: new FrameSplitter(HANDSHAKE_FRAME_BYTES) };
    this.conns.add(conn);
    conn.handshakeTimer = setTimeout(() => {
      // (A denied client was logged already; this only cuts it off if it never closed its side.)
      if (conn.stage !== 'closing') this.log(`weft TcpStoreServer ${this.url}: closing the connection from ${conn.label}: no completed handshake within ${this.handshakeTimeoutMs} ms`);
      socket.destroy();
    }, this.handshakeTimeoutMs);
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const frame of conn.splitter.push(chunk)) {
          if (conn.stage === 'closing') break;
          this.handle(conn, new FrameReader(frame));
        }
      } catch (err) {
        const why = err instanceof ProtocolError ? `malformed frame: ${err.message}` : `internal error: ${(err as Error).stack ?? err}`;
        this.log(`weft TcpStoreServer ${this.url}: closing the connection from ${conn.label}: ${why}`);
        socket.destroy();
      }
    });
    socket.on('error', () => {}); // a reset by the peer: 'close' follows
    socket.on('close', () => {
      clearTimeout(conn.handshakeTimer);
      this.conns.delete(conn);
      for (const w of conn.waiters.values()) this.dropWaiter(w);
    });
  }

  private handle(conn: Conn, r: FrameReader): void {
    const { code, id } = r;
    this.stats.commands++;
    this.stats.roundTrips++;
    if (conn.stage !== 'ready') return this.handshake(conn, r);
    switch (code) {
      case Op.SET: {
        const flags = r.u8();
        const key = r.str();
        const value = r.bytes();
        r.end();
        return this.writeMany(conn, id, flags, [[key, value]]);
      }
      case Op.MSET: {
        const flags = r.u8();
        const n = r.count(6);
        const entries: [string, Uint8Array][] = [];
        for (let i = 0; i < n; i++) entries.push([r.str(), r.bytes()]);
        r.end();
        return this.writeMany(conn, id, flags, entries);
      }
      case Op.GET:
      case Op.WAIT:
      case Op.MGET: {
        const timeoutMs = r.u32();
        const keys: string[] = [];
        if (code === Op.GET) keys.push(r.str());
        else for (let i = 0, n = r.count(2); i < n; i++) keys.push(r.str());
        r.end();
        return this.hold(conn, id, code, keys, timeoutMs);
      }
      case Op.ADD: {
        const key = r.str();
        const delta = r.i64();
        r.end();
        const cur = this.data.get(key);
        const text = cur ? Buffer.from(cur).toString() : '0';
        if (!/^-?\d+$/.test(text)) return this.reply(conn, new FrameWriter(Status.ERROR, id).str(`add('${key}'): the key holds a value that is not a counter`));
        const next = BigInt(text) + delta;
        this.put(key, encodeCounter(next));
        return this.reply(conn, new FrameWriter(Status.OK, id).i64(BigInt.asIntN(64, next)));
      }
      case Op.DELETE: {
        const key = r.str();
        r.end();
        return this.reply(conn, new FrameWriter(Status.OK, id).u8(this.data.delete(key) ? 1 : 0));
      }
      case Op.CAS: {
        const key = r.str();
        const expected = r.bytes();
        const desired = r.bytes();
        r.end();
        const cur = this.data.get(key);
        const matches = cur === undefined ? expected.byteLength === 0 : sameBytes(cur, expected);
        if (matches) this.put(key, desired);
        return this.reply(conn, new FrameWriter(Status.OK, id).bytes(matches ? desired : (cur ?? new Uint8Array(0))));
      }
      case Op.PURGE: {
        const prefix = r.str();
        r.end();
        let n = 0;
        for (const k of [...this.data.keys()]) if (!prefix || k === prefix || k.startsWith(`${prefix}/`)) this.data.delete(k), n++;
        return this.reply(conn, new FrameWriter(Status.OK, id).u32(n));
      }
      case Op.CANCEL: {
        const target = r.u32();
        r.end();
        const w = conn.waiters.get(target);
        if (w) this.dropWaiter(w);
        return;
      }
      default:
        throw new ProtocolError(`unknown opcode 0x${code.toString(16)}`);
    }
  }

  /**
   * HELLO, then (with a secret) AUTH; until it passes, any other frame is a ProtocolError
   * (the connection closes) and no key is read or written.
   */
  private handshake(conn: Conn, r: FrameReader): void {
    const { code, id } = r;
    if (conn.stage === 'hello') {
      if (code !== Op.HELLO) throw new ProtocolError(`the first frame must be HELLO, got opcode ${code}`);
      const magic = r.u32();
      const version = r.u16();
      if (magic !== MAGIC || version !== VERSION) throw new ProtocolError(`bad HELLO (magic 0x${magic.toString(16)}, version ${version}): not a weft store client of protocol version ${VERSION}`);
      const client = r.bytes();
      r.end();
      if (client.byteLength !== NONCE_BYTES) throw new ProtocolError(`HELLO nonce of ${client.byteLength} bytes, expected ${NONCE_BYTES}`);
      const server = randomBytes(NONCE_BYTES);
      const answer = new FrameWriter(Status.OK, id);
      if (!this.#key) {
        this.ready(conn);
        return this.reply(conn, answer.u8(0).bytes(server).bytes(new Uint8Array(0)));
      }
      conn.stage = 'auth';
      conn.nonces = { client, server };
      return this.reply(conn, answer.u8(FLAG_AUTH).bytes(server).bytes(handshakeProof(this.#key, 'server', client, server)));
    }
    // stage 'auth'
    if (code !== Op.AUTH) throw new ProtocolError(`expected AUTH after the HELLO challenge, got opcode ${code}`);
    const proof = r.bytes();
    r.end();
    const { client, server } = conn.nonces as { client: Uint8Array; server: Buffer };
    conn.nonces = undefined;
    if (proofMatches(proof, handshakeProof(this.#key as KeyObject, 'client', server, client))) {
      this.ready(conn);
      return this.reply(conn, new FrameWriter(Status.OK, id));
    }
    // Wrong secret (or a proof replayed from another connection): say so, then hang up.
    conn.stage = 'closing';
    this.log(`weft TcpStoreServer ${this.url}: closing the connection from ${conn.label}: authentication failed (the client does not know the store's secret)`);
    const denied = new FrameWriter(Status.DENIED, id).str('authentication failed: the client does not know the secret this store server was started with').finish();
    conn.socket.end(denied);
  }

  private ready(conn: Conn): void {
    conn.stage = 'ready';
    conn.splitter.maxFrame = this.maxFrame;
    clearTimeout(conn.handshakeTimer);
    conn.handshakeTimer = undefined;
  }

  /** Write-once is all or none: a conflict on any key writes nothing. */
  private writeMany(conn: Conn, id: number, flags: number, entries: [string, Uint8Array][]): void {
    if (flags & FLAG_ONCE) {
      const i = entries.findIndex(([k]) => this.data.has(k));
      if (i >= 0) return this.reply(conn, new FrameWriter(Status.EXISTS, id).u32(i).bytes(this.data.get(entries[i][0]) as Uint8Array));
    }
    for (const [k, v] of entries) this.put(k, v);
    this.reply(conn, new FrameWriter(Status.OK, id));
  }

  private put(key: string, value: Uint8Array): void {
    this.data.set(key, value);
    const ws = this.waiting.get(key);
    if (!ws) return;
    this.waiting.delete(key);
    for (const w of ws) {
      w.missing.delete(key);
      if (w.missing.size === 0) this.answer(w);
    }
  }

  private hold(conn: Conn, id: number, op: number, keys: string[], timeoutMs: number): void {
    const missing = new Set(keys.filter((k) => !this.data.has(k)));
    const w: Waiter = { conn, id, op, keys, missing, timer: undefined as unknown as NodeJS.Timeout };
    if (missing.size === 0) return this.answer(w);
    if (timeoutMs === 0) return this.timeout(w);
    w.timer = setTimeout(() => this.timeout(w), timerMs(timeoutMs));
    conn.waiters.set(id, w);
    for (const k of missing) {
      let set = this.waiting.get(k);
      if (!set) this.waiting.set(k, (set = new Set()));
      set.add(w);
    }
  }

  private answer(w: Waiter): void {
    this.dropWaiter(w);
    const f = new FrameWriter(Status.OK, w.id);
    if (w.op === Op.GET) f.bytes(this.data.get(w.keys[0]) as Uint8Array);
    else if (w.op === Op.MGET) {
      f.u32(w.keys.length);
      for (const k of w.keys) f.bytes(this.data.get(k) as Uint8Array);
    }
    this.reply(w.conn, f);
  }

  private timeout(w: Waiter): void {
    this.dropWaiter(w);
    const idx = w.keys.flatMap((k, i) => (w.missing.has(k) ? [i] : []));
    const f = new FrameWriter(Status.TIMEOUT, w.id).u32(idx.length);
    for (const i of idx) f.u32(i);
    this.reply(w.conn, f);
  }

  private dropWaiter(w: Waiter): void {
    clearTimeout(w.timer);
    w.conn.waiters.delete(w.id);
    for (const k of w.missing) {
      const set = this.waiting.get(k);
      set?.delete(w);
      if (set?.size === 0) this.waiting.delete(k);
    }
  }

  private reply(conn: Conn, f: FrameWriter): void {
    if (!conn.socket.destroyed) conn.socket.write(f.finish());
  }
}
