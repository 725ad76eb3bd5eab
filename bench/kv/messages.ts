/**
 * benchkv's messages (section 8 of the notes), fixed-size and little-endian so they travel
 * unchanged through ipc, delegationrpc, Flux and copyrpc (docs/benchkv.md#messages):
 *
 * Request, 24 bytes (ipc / delegationrpc / copyrpc RemoteRequest / Flux DelegatePayload::Req):
 *   u8 op (1 MetaPut, 2 MetaGet) | u8 0 | u8 0 | u8 payload tag (Flux: 1 Req) | u32 rank |
 *   u32 key lo | u32 key hi | u32 value lo | u32 value hi
 * Response, 16 bytes (RemoteResponse / Flux DelegatePayload::Resp, tag 2 in byte 3):
 *   u8 kind (1 MetaPutOk, 2 MetaGetOk, 3 MetaGetNotFound) | u8 0 | u8 0 | u8 payload tag |
 *   u32 0 | u32 value lo | u32 value hi
 *
 * Keys and values are u64 held as two u32 halves: no BigInt on the data path. A codec reads
 * and writes through its own aligned scratch (the slot views of the channels are not always
 * 4-byte aligned), so encoding and decoding allocate nothing.
 */
export const REQUEST_BYTES = 24;
export const RESPONSE_BYTES = 16;

export const OP_PUT = 1;
export const OP_GET = 2;
export const PUT_OK = 1;
export const GET_OK = 2;
export const GET_NOT_FOUND = 3;
/** Flux DelegatePayload tags (byte 3). */
export const TAG_REQ = 1;
export const TAG_RESP = 2;

/** A request or response decoded into plain fields (one instance per thread, reused). */
export class KvMessage {
  readonly bytes = new Uint8Array(REQUEST_BYTES);
  readonly u32 = new Uint32Array(this.bytes.buffer);

  /** Copies a request out of `buf` at `off` and checks it; false when malformed. */
  readRequest(buf: Uint8Array, off = 0): boolean {
    copy(this.bytes, buf, off, REQUEST_BYTES);
    const op = this.bytes[0];
    return op === OP_PUT || op === OP_GET;
  }

  /** Copies a response out of `buf` at `off`; false when malformed. */
  readResponse(buf: Uint8Array, off = 0): boolean {
    copy(this.bytes, buf, off, RESPONSE_BYTES);
    const k = this.bytes[0];
    return k === PUT_OK || k === GET_OK || k === GET_NOT_FOUND;
  }

  get op(): number {
    return this.bytes[0];
  }
  get rank(): number {
    return this.u32[1];
  }
  get keyLo(): number {
    return this.u32[2];
  }
  get keyHi(): number {
    return this.u32[3];
  }
  get valueLo(): number {
    return this.u32[4];
  }
  get valueHi(): number {
    return this.u32[5];
  }
  /** Response fields (same scratch, response layout). */
  get kind(): number {
    return this.bytes[0];
  }
  get respLo(): number {
    return this.u32[2];
  }
  get respHi(): number {
    return this.u32[3];
  }
}

/** 24 or 16 bytes: a loop beats subarray+set, which would allocate a view per message. */
function copy(dst: Uint8Array, src: Uint8Array, off: number, n: number): void {
  for (let i = 0; i < n; i++) dst[i] = src[off + i];
}

/**
 * Builds requests and responses in an aligned scratch: `request` / `response` are the bytes to
 * send (copyrpc call / reply take them as they are); `into` copies them into a channel slot.
 */
export class KvWriter {
  readonly request = new Uint8Array(REQUEST_BYTES);
  readonly response = new Uint8Array(RESPONSE_BYTES);
  private readonly rq = new Uint32Array(this.request.buffer);
  private readonly rs = new Uint32Array(this.response.buffer);

  /** Fills `request`; `tag` is the Flux payload tag (0 elsewhere). */
  setRequest(op: number, rank: number, keyLo: number, keyHi: number, valueLo: number, valueHi: number, tag = 0): Uint8Array {
    const u = this.rq;
    u[0] = op | (tag << 24);
    u[1] = rank;
    u[2] = keyLo;
    u[3] = keyHi;
    u[4] = valueLo;
    u[5] = valueHi;
    return this.request;
  }

  /** Copies a decoded request into `request` with a new payload tag (forwarding). */
  setRequestFrom(m: KvMessage, tag: number): Uint8Array {
    this.rq.set(m.u32);
    this.request[3] = tag;
    return this.request;
  }

  /** Fills `response`. */
  setResponse(kind: number, valueLo: number, valueHi: number, tag = 0): Uint8Array {
    const u = this.rs;
    u[0] = kind | (tag << 24);
    u[1] = 0;
    u[2] = valueLo;
    u[3] = valueHi;
    return this.response;
  }

  /** Copies a decoded response into `response` with a new payload tag. */
  setResponseFrom(m: KvMessage, tag: number): Uint8Array {
    const u = this.rs;
    u[0] = m.u32[0];
    u[1] = 0;
    u[2] = m.u32[2];
    u[3] = m.u32[3];
    this.response[3] = tag;
    return this.response;
  }
}
