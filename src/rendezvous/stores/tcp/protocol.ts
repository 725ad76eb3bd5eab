/**
 * TcpStore wire format, shared by the client and the server. Little-endian, no JSON.
 *
 * Every frame: u32 length of the rest | u8 opcode (requests) or status (responses) |
 * u32 request id | fields. Field types: str = u16 length + UTF-8; bytes = u32 length + data;
 * i64 = signed 64-bit. Responses carry the id of their request, so a client pipelines freely;
 * the server answers a request when it is done (waits later than sets that follow them).
 *
 * | opcode | request     | request fields                         | OK response fields        |
 * |--------|-------------|----------------------------------------|---------------------------|
 * | 0x00   | HELLO       | u32 magic 'WFTS', u16 version, bytes client nonce (32) | u8 flags (bit 0: auth required), bytes server nonce (32), bytes server proof (32, or 0 without auth) |
 * | 0x0b   | AUTH        | bytes client proof (32)                | - (or DENIED)             |
 * | 0x01   | SET         | u8 flags (bit 0: once), str key, bytes | -                         |
 * | 0x02   | GET         | u32 timeoutMs, str key                 | bytes                     |
 * | 0x03   | WAIT        | u32 timeoutMs, u32 n, n x str key      | -                         |
 * | 0x04   | ADD         | str key, i64 delta                     | i64 new value             |
 * | 0x05   | MGET        | u32 timeoutMs, u32 n, n x str key      | u32 n, n x bytes          |
 * | 0x06   | MSET        | u8 flags, u32 n, n x (str key, bytes)  | -                         |
 * | 0x07   | DELETE      | str key                                | u8 existed                |
 * | 0x08   | CAS         | str key, bytes expected, bytes desired | bytes now stored          |
 * | 0x09   | PURGE       | str prefix                             | u32 keys deleted          |
 * | 0x0a   | CANCEL      | u32 id of a pending GET/WAIT/MGET      | (no response)             |
 *
 * | status | response | fields                                                              |
 * |--------|----------|---------------------------------------------------------------------|
 * | 0x00   | OK       | as in the table above                                               |
 * | 0x01   | EXISTS   | u32 index of the write-once key in the request, bytes existing value |
 * | 0x02   | TIMEOUT  | u32 n, n x u32 index of a key still missing                          |
 * | 0x03   | ERROR    | str message (e.g. add on a value that is not a counter)              |
 * | 0x04   | DENIED   | str message: the AUTH proof was wrong; the server then closes        |
 *
 * Handshake (mutual challenge-response on a shared secret; the secret never crosses the
 * wire): the client sends HELLO with a fresh random nonce Nc; the server answers with its own
 * fresh nonce Ns and, when it has a secret, the proof HMAC-SHA256(secret, "weft-store server"
 * | Nc | Ns); the client checks it (so it talks to a server that knows the secret, not to
 * whoever took the port) and sends AUTH with HMAC-SHA256(secret, "weft-store client" | Ns | Nc).
 * Every connection has a new Ns, so a recorded AUTH is worthless on another connection; the
 * two labels keep one side's proof from serving as the other's. Until AUTH passes the server
 * accepts no other frame (any other frame closes the connection, no key is read or written);
 * a wrong proof gets DENIED and the connection is closed. A server without a secret answers
 * HELLO with flags 0 and an empty proof, and takes requests at once.
 */
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';

export const MAGIC = 0x53544657; // 'WFTS'
export const VERSION = 2;
/** Frames above this size are refused (a corrupt length must not make us allocate gigabytes). */
export const DEFAULT_MAX_FRAME = 64 * 1024 * 1024;

export const Op = {
  HELLO: 0x00,
  SET: 0x01,
  GET: 0x02,
  WAIT: 0x03,
  ADD: 0x04,
  MGET: 0x05,
  MSET: 0x06,
  DELETE: 0x07,
  CAS: 0x08,
  PURGE: 0x09,
  CANCEL: 0x0a,
  AUTH: 0x0b,
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

export const Status = { OK: 0x00, EXISTS: 0x01, TIMEOUT: 0x02, ERROR: 0x03, DENIED: 0x04 } as const;

export const FLAG_ONCE = 1;
/** HELLO answer flag: the server has a secret; the client must prove it knows it (AUTH). */
export const FLAG_AUTH = 1;
/** Bytes of each side's handshake nonce and of an HMAC-SHA256 proof. */
export const NONCE_BYTES = 32;
export const PROOF_BYTES = 32;

/** The HMAC key of a shared secret (a KeyObject: printing it never shows the secret). */
export function secretKey(secret: string): KeyObject {
  return createSecretKey(Buffer.from(secret, 'utf8'));
}

/**
 * One side's handshake proof: HMAC-SHA256(key, "weft-store <role>" | own-side-first nonce |
 * other nonce). The server proves over (Nc, Ns), the client over (Ns, Nc).
 */
export function handshakeProof(key: KeyObject, role: 'server' | 'client', first: Uint8Array, second: Uint8Array): Buffer {
  return createHmac('sha256', key).update(`weft-store ${role}\0`).update(first).update(second).digest();
}

/** Constant-time comparison of a received proof with the expected one. */
export function proofMatches(received: Uint8Array, expected: Buffer): boolean {
  return received.byteLength === expected.length && timingSafeEqual(received, expected);
}

/** Malformed bytes from the other side. */
export class ProtocolError extends Error {}

/** Builds one frame; `finish()` patches the length prefix. */
export class FrameWriter {
  private buf = Buffer.allocUnsafe(64);
  private n = 4;

  constructor(code: number, id: number) {
    this.u8(code).u32(id);
  }

  private room(bytes: number): void {
    if (this.n + bytes <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.n + bytes));
    this.buf.copy(next, 0, 0, this.n);
    this.buf = next;
  }
  u8(v: number): this {
    this.room(1);
    this.buf.writeUInt8(v, this.n);
    this.n += 1;
    return this;
  }
  u16(v: number): this {
    this.room(2);
    this.buf.writeUInt16LE(v, this.n);
    this.n += 2;
    return this;
  }
  u32(v: number): this {
    this.room(4);
    this.buf.writeUInt32LE(v >>> 0, this.n);
    this.n += 4;
    return this;
  }
  i64(v: bigint): this {
    this.room(8);
    this.buf.writeBigInt64LE(v, this.n);
    this.n += 8;
    return this;
  }
  str(s: string): this {
    const b = Buffer.from(s);
    if (b.length > 0xffff) throw new ProtocolError(`key of ${b.length} bytes: keys are limited to 65535 bytes`);
    this.u16(b.length);
    return this.raw(b);
  }
  bytes(v: Uint8Array): this {
    this.u32(v.byteLength);
    return this.raw(v);
  }
  private raw(v: Uint8Array): this {
    this.room(v.byteLength);
    this.buf.set(v, this.n);
    this.n += v.byteLength;
    return this;
  }
  finish(): Buffer {
    this.buf.writeUInt32LE(this.n - 4, 0);
    return this.buf.subarray(0, this.n);
  }
}

/** Reads one frame's body with bounds checks; every overrun is a ProtocolError. */
export class FrameReader {
  private o = 0;
  readonly code: number;
  readonly id: number;

  constructor(private readonly b: Buffer) {
    this.code = this.u8();
    this.id = this.u32();
  }

  private need(n: number): void {
    if (this.o + n > this.b.length) throw new ProtocolError(`frame truncated (needs ${this.o + n} bytes, has ${this.b.length})`);
  }
  u8(): number {
    this.need(1);
    return this.b.readUInt8(this.o++);
  }
  u16(): number {
    this.need(2);
    const v = this.b.readUInt16LE(this.o);
    this.o += 2;
    return v;
  }
  u32(): number {
    this.need(4);
    const v = this.b.readUInt32LE(this.o);
    this.o += 4;
    return v;
  }
  i64(): bigint {
    this.need(8);
    const v = this.b.readBigInt64LE(this.o);
    this.o += 8;
    return v;
  }
  str(): string {
    const n = this.u16();
    this.need(n);
    const s = this.b.toString('utf8', this.o, this.o + n);
    this.o += n;
    return s;
  }
  /** A copy: the frame buffer is reused by the stream parser. */
  bytes(): Uint8Array {
    const n = this.u32();
    this.need(n);
    const v = new Uint8Array(n);
    v.set(this.b.subarray(this.o, this.o + n));
    this.o += n;
    return v;
  }
  /** A count of items each at least `minBytes` long, checked against what is left. */
  count(minBytes: number): number {
    const n = this.u32();
    if (n * minBytes > this.b.length - this.o) throw new ProtocolError(`count ${n} does not fit in the frame`);
    return n;
  }
  end(): void {
    if (this.o !== this.b.length) throw new ProtocolError(`${this.b.length - this.o} trailing bytes`);
  }
}

/**
 * Splits a byte stream into frame bodies. Throws ProtocolError on a length above `maxFrame`
 * (or below the 5-byte header).
 */
export class FrameSplitter {
  private chunks: Buffer[] = [];
  private have = 0;

  /** Frames longer than this are a protocol error (raised once the peer has authenticated). */
  constructor(public maxFrame: number) {}

  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.have += chunk.length;
    const out: Buffer[] = [];
    for (;;) {
      if (this.have < 4) break;
      const head = this.peek(4);
      const len = head.readUInt32LE(0);
      if (len < 5 || len > this.maxFrame) throw new ProtocolError(`frame length ${len} outside [5, ${this.maxFrame}]`);
      if (this.have < 4 + len) break;
      out.push(this.take(4 + len).subarray(4));
    }
    return out;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0].length >= n) return this.chunks[0];
    this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0];
  }

  private take(n: number): Buffer {
    const all = this.peek(n);
    const out = all.subarray(0, n);
    this.chunks = all.length > n ? [all.subarray(n)] : [];
    this.have -= n;
    return out;
  }
}
