/**
 * `floor`: the lower bound of request/response in JS: per client, a single-producer
 * single-consumer request ring (client -> server) and response ring (server -> client) in one
 * SharedArrayBuffer, and a busy-spinning server that drains every client's requests in turn.
 *
 * A slot is [stamp, length, payload words...], padded to whole 64-byte lines. The slot of
 * position p (p = 0, 1, ... per ring) is `p & mask` and is published by storing the stamp
 * p + 1 (Atomics.store, after the payload's plain stores); the consumer waits for exactly that
 * stamp (Atomics.load), so the lap is in the stamp and a slot's previous lap never matches.
 * Rings hold nextPow2(qd) slots and a client never has more than qd calls in flight, so a
 * producer never finds its slot still unread (the response of a call frees its request slot,
 * and the client's reading of response p - qd precedes request p, hence response p): no
 * head/tail indices to share. Views are made once, nothing is allocated per message.
 *
 * Threads: the SharedArrayBuffer travels in the descriptor (postMessage). Processes: the
 * server maps a /dev/shm segment as a SharedArrayBuffer and the descriptor carries its name.
 */
import { nextPow2, payloadByte, type IpcSystem, type PointConfig } from '../system.js';

interface Layout {
  /** Slots per ring (a power of two). */
  cap: number;
  /** Payload words (4 bytes) per slot. */
  words: number;
  /** Int32 elements per slot, per ring and per client. */
  slotInts: number;
  ringInts: number;
  regionInts: number;
  /** Bytes of the whole buffer. */
  bytes: number;
}

type Descriptor = { layout: Layout; sab?: SharedArrayBuffer; shm?: string };

function layoutOf(cfg: PointConfig): Layout {
  const cap = nextPow2(Math.max(1, cfg.qd));
  const words = Math.max(1, Math.ceil(cfg.bytes / 4));
  const slotInts = Math.ceil((2 + words) / 16) * 16;
  const ringInts = cap * slotInts;
  const regionInts = 2 * ringInts;
  return { cap, words, slotInts, ringInts, regionInts, bytes: regionInts * 4 * cfg.clients };
}

let segments = 0;

const system: IpcSystem = {
  name: 'floor',
  placements: ['threads', 'processes'],
  async startServer(cfg, ctx) {
    const layout = layoutOf(cfg);
    let sab: SharedArrayBuffer;
    let shm: string | undefined;
    let release = () => {};
    if (ctx?.placement === 'processes') {
      // Loaded here only: the threads placement needs no native code.
      const { createSegment, devicePrefix, unlinkSegment } = await import('../../../src/host/segments.js');
      shm = `${devicePrefix('bench', `floor${segments++}`)}.ring`;
      sab = createSegment(shm, layout.bytes);
      const name = shm;
      release = () => unlinkSegment(name);
    } else {
      sab = new SharedArrayBuffer(layout.bytes);
    }
    const descriptor: Descriptor = shm ? { layout, shm } : { layout, sab };
    return { descriptor, serve: (stop) => serve(new Int32Array(sab), layout, cfg.clients, stop), close: release };
  },
  async runClient(descriptor, index, cfg, ctx) {
    const d = descriptor as Descriptor;
    let sab = d.sab;
    if (!sab) {
      const { openSegment } = await import('../../../src/host/segments.js');
      sab = openSegment(d.shm!);
    }
    const c = new FloorClient(new Int32Array(sab), d.layout, index, cfg);
    c.run(cfg.warmup);
    await ctx?.barrier();
    const t0 = performance.now();
    c.run(cfg.calls);
    return performance.now() - t0;
  },
};

/** The server's loop: drains each client's request ring, answers in its response ring. */
function serve(i32: Int32Array, l: Layout, clients: number, stop: () => boolean): void {
  const mask = l.cap - 1;
  const { slotInts, ringInts, regionInts, words } = l;
  const pos = new Int32Array(clients);
  for (let spins = 0; ; spins++) {
    for (let c = 0; c < clients; c++) {
      const req = c * regionInts;
      const resp = req + ringInts;
      let p = pos[c];
      for (;;) {
        const s = (p & mask) * slotInts;
        const stamp = (p + 1) | 0;
        if (Atomics.load(i32, req + s) !== stamp) break;
        const len = i32[req + s + 1];
        const from = req + s + 2;
        const to = resp + s + 2;
        if (words <= 16) for (let w = 0; w < words; w++) i32[to + w] = i32[from + w];
        else i32.copyWithin(to, from, from + words);
        i32[resp + s + 1] = len;
        Atomics.store(i32, resp + s, stamp);
        p = stamp;
      }
      pos[c] = p;
    }
    if ((spins & 1023) === 0 && stop()) return;
  }
}

class FloorClient {
  private readonly mask: number;
  private readonly req: number;
  private readonly resp: number;
  private readonly tmpl: Int32Array;
  /** tmpl without its first word (the call's number), for large payloads' one-call copy. */
  private readonly tail: Int32Array;
  /** Positions of the next request to send and of the next response to read. */
  private sendPos = 0;
  private recvPos = 0;

  constructor(
    private readonly i32: Int32Array,
    private readonly l: Layout,
    index: number,
    private readonly cfg: PointConfig,
  ) {
    this.mask = l.cap - 1;
    this.req = index * l.regionInts;
    this.resp = this.req + l.ringInts;
    const bytes = new Uint8Array(l.words * 4);
    for (let i = 4; i < bytes.length; i++) bytes[i] = payloadByte(i);
    this.tmpl = new Int32Array(bytes.buffer);
    this.tail = this.tmpl.subarray(1);
  }

  /** `total` calls with up to cfg.qd in flight; every response is checked (number, length, last word). */
  run(total: number): void {
    const { i32, mask, req, resp, tmpl, tail } = this;
    const { slotInts, words } = this.l;
    const bytes = this.cfg.bytes;
    const lastW = words - 1;
    let sendPos = this.sendPos;
    let recvPos = this.recvPos;
    const end = recvPos + total;
    const sendEnd = sendPos + total;
    const send = (p: number) => {
      const s = (p & mask) * slotInts;
      const to = req + s + 2;
      i32[to] = p;
      if (words <= 16) for (let w = 1; w < words; w++) i32[to + w] = tmpl[w];
      else i32.set(tail, to + 1);
      i32[req + s + 1] = bytes;
      Atomics.store(i32, req + s, (p + 1) | 0);
    };
    while (sendPos < sendEnd && sendPos - recvPos < this.cfg.qd) send(sendPos++);
    while (recvPos < end) {
      const s = resp + (recvPos & mask) * slotInts;
      const stamp = (recvPos + 1) | 0;
      while (Atomics.load(i32, s) !== stamp);
      if (i32[s + 2] !== recvPos || i32[s + 1] !== bytes || (lastW > 0 && i32[s + 2 + lastW] !== tmpl[lastW])) {
        throw new Error(`wrong response at call ${recvPos}: number ${i32[s + 2]}, ${i32[s + 1]} B`);
      }
      recvPos++;
      if (sendPos < sendEnd) send(sendPos++);
    }
    this.sendPos = sendPos;
    this.recvPos = recvPos;
  }
}

export default system;
