/**
 * What a Node user would pick today for RPC between two processes on one host, measured
 * with the same shape as copyrpc (32-byte echo, QD=1 round trip and pipelined throughput):
 * a length-prefixed protocol over a Unix socket (node:net), zeromq DEALER/ROUTER, and
 * @grpc/grpc-js unary and bidirectional streaming. The server runs in a child process
 * (`node peers.js server <system> <address>`); the client in the calling process.
 */
import { fork, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PEER_SYSTEMS = ['node:net', 'zeromq', 'grpc-unary', 'grpc-bidi'] as const;
export type PeerSystem = (typeof PEER_SYSTEMS)[number];

export interface PeerResult {
  system: string;
  qd: number;
  bytes: number;
  calls_per_s: number;
  rtt_us: number;
}

const SELF = fileURLToPath(import.meta.url);

// ---- servers (child process) ----------------------------------------------------------

async function serve(system: string, address: string): Promise<void> {
  if (system === 'node:net') {
    const srv = net.createServer((sock) => {
      sock.setNoDelay(true);
      let buf = Buffer.alloc(0);
      sock.on('data', (d) => {
        buf = buf.length ? Buffer.concat([buf, d]) : d;
        let o = 0;
        while (buf.length - o >= 4) {
          const len = buf.readUInt32LE(o);
          if (buf.length - o < 4 + len) break;
          o += 4 + len;
        }
        // Echo whole frames back in one write (the protocol is symmetric).
        if (o > 0) sock.write(buf.subarray(0, o));
        buf = buf.subarray(o);
      });
    });
    srv.listen(address, () => process.send!('ready'));
    return;
  }
  if (system === 'zeromq') {
    const zmq = await import('zeromq');
    const router = new zmq.Router();
    await router.bind(address);
    process.send!('ready');
    for await (const [id, msg] of router) await router.send([id, msg]);
    return;
  }
  const grpc = await import('@grpc/grpc-js');
  const server = new grpc.Server();
  server.addService(grpcService(grpc), {
    echo: (call: { request: Buffer }, cb: (e: null, r: Buffer) => void) => cb(null, call.request),
    stream: (call: NodeJS.ReadWriteStream) => {
      call.on('data', (d: Buffer) => call.write(d));
      call.on('end', () => call.end());
    },
  });
  server.bindAsync(address, grpc.ServerCredentials.createInsecure(), () => process.send!('ready'));
}

function grpcService(grpc: typeof import('@grpc/grpc-js')) {
  const id = (b: Buffer) => b;
  return {
    echo: { path: '/weft.Bench/Echo', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
    stream: { path: '/weft.Bench/Stream', requestStream: true, responseStream: true, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  } as unknown as import('@grpc/grpc-js').ServiceDefinition;
  void grpc;
}

// ---- clients ---------------------------------------------------------------------------

/** Runs `calls` echoes keeping `qd` outstanding; returns seconds. */
async function netClient(address: string, qd: number, bytes: number, calls: number): Promise<number> {
  const sock = net.connect(address);
  sock.setNoDelay(true);
  await new Promise((r) => sock.once('connect', r));
  const frame = Buffer.alloc(4 + bytes, 7);
  frame.writeUInt32LE(bytes, 0);
  let sent = 0;
  let got = 0;
  let pending = 0;
  const t0 = performance.now();
  await new Promise<void>((resolve) => {
    const pump = () => {
      const n = Math.min(qd - (sent - got), calls - sent);
      if (n > 0) {
        sock.write(n === 1 ? frame : Buffer.concat(Array(n).fill(frame)));
        sent += n;
      }
    };
    sock.on('data', (d) => {
      pending += d.length;
      const k = Math.floor(pending / frame.length);
      pending -= k * frame.length;
      got += k;
      if (got >= calls) resolve();
      else pump();
    });
    pump();
  });
  const sec = (performance.now() - t0) / 1000;
  sock.destroy();
  return sec;
}

async function zmqClient(address: string, qd: number, bytes: number, calls: number): Promise<number> {
  const zmq = await import('zeromq');
  const dealer = new zmq.Dealer();
  dealer.connect(address);
  const msg = Buffer.alloc(bytes, 7);
  let sent = 0;
  const t0 = performance.now();
  const sender = (async () => {
    // Keep qd outstanding: the receiver loop releases slots.
    while (sent < Math.min(qd, calls)) {
      await dealer.send(msg);
      sent++;
    }
  })();
  let got = 0;
  for await (const _ of dealer) {
    void _;
    got++;
    if (got >= calls) break;
    if (sent < calls) {
      await dealer.send(msg);
      sent++;
    }
  }
  await sender;
  const sec = (performance.now() - t0) / 1000;
  dealer.close();
  return sec;
}

async function grpcClient(system: string, address: string, qd: number, bytes: number, calls: number): Promise<number> {
  const grpc = await import('@grpc/grpc-js');
  const Client = grpc.makeGenericClientConstructor(grpcService(grpc) as never, 'Bench');
  const client = new Client(address, grpc.credentials.createInsecure()) as unknown as {
    echo(req: Buffer, cb: (e: Error | null, r: Buffer) => void): void;
    stream(): NodeJS.ReadWriteStream;
    close(): void;
  };
  const msg = Buffer.alloc(bytes, 7);
  const t0 = performance.now();
  if (system === 'grpc-unary') {
    let sent = 0;
    await new Promise<void>((resolve, reject) => {
      let got = 0;
      const one = () => {
        sent++;
        client.echo(msg, (err) => {
          if (err) return reject(err);
          if (++got >= calls) resolve();
          else if (sent < calls) one();
        });
      };
      for (let i = 0; i < Math.min(qd, calls); i++) one();
    });
  } else {
    const s = client.stream();
    // The server is killed after the run: a late reset on this stream is expected.
    s.on('error', () => {});
    let sent = 0;
    await new Promise<void>((resolve) => {
      let got = 0;
      s.on('data', () => {
        if (++got >= calls) resolve();
        else if (sent < calls) {
          s.write(msg);
          sent++;
        }
      });
      for (; sent < Math.min(qd, calls); sent++) s.write(msg);
    });
    s.end();
  }
  const sec = (performance.now() - t0) / 1000;
  client.close();
  return sec;
}

/** Starts a server for `system`, runs the client points, stops the server. */
export async function benchPeer(system: PeerSystem, points: { qd: number; bytes: number; calls: number }[], runs: number): Promise<PeerResult[]> {
  const sockPath = path.join(tmpdir(), `weft-bench-${process.pid}-${system.replace(/\W/g, '')}.sock`);
  const address = system === 'node:net' ? sockPath : system === 'zeromq' ? `ipc://${sockPath}` : `unix:${sockPath}`;
  rmSync(sockPath, { force: true });
  const child: ChildProcess = fork(SELF, ['server', system, address], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (c) => reject(new Error(`${system} server exited (${c})`)));
    });
    const out: PeerResult[] = [];
    for (const p of points) {
      const secs: number[] = [];
      for (let r = 0; r <= runs; r++) {
        const warm = r === 0;
        const calls = warm ? Math.min(p.calls, 2000) : p.calls;
        const sec = system === 'node:net' ? await netClient(address, p.qd, p.bytes, calls) : system === 'zeromq' ? await zmqClient(address, p.qd, p.bytes, calls) : await grpcClient(system, address, p.qd, p.bytes, calls);
        if (!warm) secs.push(sec);
      }
      secs.sort((a, b) => a - b);
      const sec = secs[secs.length >> 1];
      out.push({ system, qd: p.qd, bytes: p.bytes, calls_per_s: p.calls / sec, rtt_us: (sec * 1e6 * p.qd) / p.calls });
    }
    return out;
  } finally {
    child.kill('SIGKILL');
    rmSync(sockPath, { force: true });
  }
}

if (process.argv[1] === SELF && process.argv[2] === 'server') {
  serve(process.argv[3], process.argv[4]).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
