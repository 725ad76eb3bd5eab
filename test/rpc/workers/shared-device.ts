/**
 * A rank of shared-device.test (under `weft run -n 2`): collectives and copyrpc in one
 * process on ONE NIC device. While rank 0 keeps requests in flight toward rank 1 (which
 * serves them), both ranks run allreduces and check every sum; rank 1 exposes a `ctx.alloc`
 * array through copyrpc (rpc.register) and rank 0 reads it one-sidedly into its own. Prints
 * `ok rank R: {json}` on success.
 */
import { init } from '../../../src/index.js';
import { connectRpcMesh } from '../../../src/rpc/index.js';

const ctx = await init({ timeoutMs: 30_000 });
const { rank } = ctx;
const rpc = ctx.rpc();
if (rpc.device !== ctx.device) throw new Error('ctx.rpc() opened a second device');
if (ctx.rpc() !== rpc) throw new Error('ctx.rpc() returned a second engine');
const eps = await connectRpcMesh(ctx.store, rpc, rank, ctx.size, { timeoutMs: 30_000 });
const peer = eps[1 - rank]!;

// Rank 1's array in registered memory, readable by rank 0 through copyrpc's endpoint.
const exposed = ctx.alloc(Int32Array, 4096);
for (let i = 0; i < exposed.length; i++) exposed[i] = i * 7 + 3;
const exposedMr = rpc.register(exposed);

const ROUNDS = 200;
const REQUESTS = 2000;
let served = 0;
const server = rank === 1 ? rpc.serve((payload) => (served++, payload.length === 1 && payload[0] === 255 ? exposedMr.descriptor() : payload)) : undefined;

async function collectives(): Promise<number> {
  let checks = 0;
  for (let r = 0; r < ROUNDS; r++) {
    const small = new Float64Array(3).fill(rank + r);
    await ctx.allreduce(small);
    const big = ctx.alloc(Float32Array, 70_001);
    big.fill(rank + 1);
    await ctx.allreduce(big);
    for (const v of small) if (v !== 2 * r + 1) throw new Error(`round ${r}: small allreduce gave ${v}, want ${2 * r + 1}`);
    if (big[0] !== 3 || big[70_000] !== 3) throw new Error(`round ${r}: large allreduce gave ${big[0]}, ${big[70_000]}, want 3`);
    checks += 2;
  }
  return checks;
}

async function requests(): Promise<number> {
  if (rank !== 0) return 0;
  let answered = 0;
  const inFlight = 16;
  let next = 0;
  const one = async () => {
    while (next < REQUESTS) {
      const k = next++;
      const bytes = new Uint8Array([k & 0xff, (k >> 8) & 0xff, 7]);
      const reply = await peer.request(bytes, { timeoutMs: 20_000 });
      if (reply.length !== 3 || reply[0] !== bytes[0] || reply[1] !== bytes[1]) throw new Error(`request ${k}: echo came back as ${[...reply]}`);
      answered++;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, one));
  return answered;
}

const [checks, answered] = await Promise.all([collectives(), requests()]);

let readOk = rank === 1;
if (rank === 0) {
  // One-sided read of rank 1's ctx.alloc array into our own, over the copyrpc endpoint.
  const desc = await peer.request(new Uint8Array([255]), { timeoutMs: 20_000, responseAllowance: 256 });
  const into = ctx.alloc(Int32Array, 4096);
  const mr = rpc.register(into);
  peer.rdmaRead(mr, 0, peer.importRegion(desc), 0, into.byteLength);
  while (rpc.rawPending > 0) {
    if (rpc.poll() === 0) await rpc.wait({ timeoutMs: 20_000 });
  }
  if (rpc.rawFailed > 0) throw new Error(`rdmaRead failed: ${rpc.rawError?.message}`);
  readOk = into.every((v, i) => v === i * 7 + 3);
  if (!readOk) throw new Error('rdmaRead of the peer ctx.alloc array returned other bytes');
}
await ctx.barrier();
server?.close();
console.log(`ok rank ${rank}: ${JSON.stringify({ checks, answered, served, readOk })}`);
await ctx.close();
