// Run with: npx weft run -n 4 examples/hello.ts
// The NIC layer directly: connect() joins the job like init() but leaves the QPs and the CQ to
// this program (init()'s ProcessGroup runs collectives over them and polls the CQ itself).
import { connect, CompletionBatch, Opcode } from 'weftjs';

const ctx = await connect();
const { rank, size, device, pairs } = ctx;
const mr = device.allocate(64);
const right = pairs[(rank + 1) % size]!;
const left = pairs[(rank + size - 1) % size]!;
// Regions are exchanged through the job's store, as any rendezvous data.
await ctx.store.set(`region/${rank}`, mr.descriptor());
const [desc] = await ctx.store.multiGet([`region/${(rank + 1) % size}`], { timeoutMs: 10_000 });
const remote = right.importRegion(desc);
const msg = new TextEncoder().encode(`hello from rank ${rank}`);
mr.bytes.set(msg);
right.postWriteImm(mr, 0, remote, 32, msg.length, rank, 0, false);
const batch = new CompletionBatch(8);
for (let got = false; !got; ) {
  await device.cq.wait({ timeoutMs: 10_000 });
  const n = device.cq.poll(batch);
  for (let i = 0; i < n; i++) {
    if (batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.qpn[i] === left.qpn) {
      console.log(`rank ${rank}/${size} got: ${new TextDecoder().decode(mr.bytes.subarray(32, 32 + batch.byteLength[i]))}`);
      got = true;
    }
  }
}
await ctx.close();
