/**
 * `node:net`: a pipelined, length-prefixed request/response protocol over a Unix domain
 * socket, written for speed as a careful Node user would: a frame is a u32 LE payload length
 * and the payload (its first 4 bytes carry the call's number); every chunk that arrives is
 * parsed in place for as many frames as it holds (only a frame split across chunks is copied,
 * into a carry buffer kept per connection), and the frames it answers go out in one write per
 * chunk, staged in a reused buffer (no Buffer.concat, no allocation per message).
 * Threads and processes.
 */
import net from 'node:net';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { threadId } from 'node:worker_threads';
import { payloadByte, whenStopped, type IpcSystem } from '../system.js';

/** Calls onFrame(buffer, payloadOffset, payloadLength) for every whole frame pushed. */
export class FrameReader {
  private carry = Buffer.allocUnsafe(4096);
  private carryLen = 0;

  constructor(private readonly onFrame: (buf: Buffer, off: number, len: number) => void) {}

  push(chunk: Buffer): void {
    const end = chunk.length;
    let off = 0;
    if (this.carryLen > 0) {
      // Finish the frame split across chunks.
      if (this.carryLen < 4) {
        const n = Math.min(4 - this.carryLen, end);
        chunk.copy(this.carry, this.carryLen, 0, n);
        this.carryLen += n;
        off = n;
        if (this.carryLen < 4) return;
      }
      const need = 4 + this.carry.readUInt32LE(0);
      if (need > this.carry.length) this.grow(need);
      const n = Math.min(need - this.carryLen, end - off);
      chunk.copy(this.carry, this.carryLen, off, off + n);
      this.carryLen += n;
      off += n;
      if (this.carryLen < need) return;
      this.carryLen = 0;
      this.onFrame(this.carry, 4, need - 4);
    }
    while (end - off >= 4) {
      const len = chunk.readUInt32LE(off);
      if (end - off < 4 + len) break;
      this.onFrame(chunk, off + 4, len);
      off += 4 + len;
    }
    if (off < end) {
      if (end - off > this.carry.length) this.grow(end - off);
      chunk.copy(this.carry, 0, off, end);
      this.carryLen = end - off;
    }
  }

  private grow(n: number): void {
    const next = Buffer.allocUnsafe(Math.max(n, this.carry.length * 2));
    this.carry.copy(next, 0, 0, this.carryLen);
    this.carry = next;
  }
}

/** Frames staged for one write; flush() hands them to the socket in one Buffer. */
export class FrameWriter {
  buf = Buffer.allocUnsafe(16384);
  len = 0;

  /** Room for one frame of `payload` bytes: returns the payload's offset in `buf` (the length is written). */
  frame(payload: number): number {
    const need = this.len + 4 + payload;
    if (need > this.buf.length) {
      const next = Buffer.allocUnsafe(Math.max(need, this.buf.length * 2));
      this.buf.copy(next, 0, 0, this.len);
      this.buf = next;
    }
    this.buf.writeUInt32LE(payload, this.len);
    const off = this.len + 4;
    this.len = need;
    return off;
  }

  flush(sock: net.Socket): void {
    if (this.len === 0) return;
    // The socket may hold the buffer until it is written: hand it a copy, keep staging here.
    const out = Buffer.allocUnsafe(this.len);
    this.buf.copy(out, 0, 0, this.len);
    this.len = 0;
    sock.write(out);
  }
}

/** Copies n bytes (a loop for small payloads, where Buffer#copy's call costs more than the copy). */
function copyBytes(src: Buffer, from: number, dst: Buffer, to: number, n: number): void {
  if (n > 64) {
    src.copy(dst, to, from, from + n);
    return;
  }
  for (let i = 0; i < n; i++) dst[to + i] = src[from + i];
}

let sockets = 0;

const system: IpcSystem = {
  name: 'node:net',
  placements: ['threads', 'processes'],
  async startServer(cfg) {
    const file = path.join(tmpdir(), `weft-ipc-${process.pid}-${threadId}-${sockets++}.sock`);
    rmSync(file, { force: true });
    const conns = new Set<net.Socket>();
    const server = net.createServer((sock) => {
      conns.add(sock);
      sock.on('close', () => conns.delete(sock));
      sock.on('error', () => {});
      const out = new FrameWriter();
      const reader = new FrameReader((buf, off, len) => {
        // The response: cfg.bytes bytes, the request's bytes echoed (its number first).
        const at = out.frame(cfg.bytes);
        copyBytes(buf, off, out.buf, at, Math.min(len, cfg.bytes));
      });
      sock.on('data', (chunk: Buffer) => {
        reader.push(chunk);
        out.flush(sock);
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(file, () => resolve());
    });
    return {
      descriptor: { path: file },
      serve: (stop) => whenStopped(stop),
      close: () => {
        for (const s of conns) s.destroy();
        server.close();
        rmSync(file, { force: true });
      },
    };
  },
  async runClient(descriptor, _index, cfg, ctx) {
    const { path: file } = descriptor as { path: string };
    const sock = net.connect(file);
    await new Promise<void>((resolve, reject) => {
      sock.once('connect', resolve);
      sock.once('error', reject);
    });
    const bytes = cfg.bytes;
    const tmpl = Buffer.alloc(bytes);
    for (let i = 4; i < bytes; i++) tmpl[i] = payloadByte(i);
    const last = bytes - 1;
    const out = new FrameWriter();
    let next = 0;
    let expect = 0;
    let total = 0;
    let sent = 0;
    let got = 0;
    let done: (() => void) | undefined;
    let fail: ((e: Error) => void) | undefined;
    const stage = () => {
      const at = out.frame(bytes);
      copyBytes(tmpl, 0, out.buf, at, bytes);
      out.buf.writeInt32LE(next++, at);
      sent++;
    };
    const reader = new FrameReader((buf, off, len) => {
      const n = buf.readInt32LE(off);
      if (n !== expect || len !== bytes || (last >= 4 && buf[off + last] !== tmpl[last])) {
        fail?.(new Error(`wrong response: call ${n} (${len} B), expected ${expect} (${bytes} B)`));
        return;
      }
      expect++;
      got++;
      if (sent < total) stage();
    });
    sock.on('data', (chunk: Buffer) => {
      reader.push(chunk);
      out.flush(sock);
      if (got === total) done?.();
    });
    sock.on('error', (e) => fail?.(e));
    sock.on('close', () => fail?.(new Error('the server closed the connection')));
    const phase = (calls: number) =>
      new Promise<void>((resolve, reject) => {
        if (calls === 0) return resolve();
        total = calls;
        sent = 0;
        got = 0;
        done = resolve;
        fail = reject;
        while (sent < Math.min(cfg.qd, total)) stage();
        out.flush(sock);
      });
    try {
      await phase(cfg.warmup);
      await ctx?.barrier();
      const t0 = performance.now();
      await phase(cfg.calls);
      return performance.now() - t0;
    } finally {
      sock.destroy();
    }
  },
};

export default system;
