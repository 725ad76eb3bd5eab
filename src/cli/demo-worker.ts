/**
 * One rank of `weft demo`: a token ring for latency, a one-sided READ of the left neighbor's
 * greeting, and every rank streaming 1 MiB writes to its right neighbor at once.
 */
import { CompletionBatch, Opcode, Status } from '../nic/index.js';
import { joinMesh } from '../launch/local-group.js';

const [, rankS, nS, provider, argsJson] = process.argv.slice(2);
const rank = Number(rankS);
const n = Number(nS);
const args = JSON.parse(argsJson) as { laps: number; blocks: number };
const batch = new CompletionBatch(256);
const released = new Promise<void>((resolve) => process.on('message', (m: { type: string }) => m.type === 'release' && resolve()));

const BLOCK = 1 << 20;
const SLOTS = 4;

async function main(): Promise<unknown> {
  const mesh = await joinMesh(rank, n, provider, [SLOTS * BLOCK, BLOCK]);
  const [inbox, outbox] = mesh.mrs;
  const right = (rank + 1) % n;
  const left = (rank + n - 1) % n;
  const toRight = mesh.qps[right]!;
  const cq = mesh.device.cq;
  const greeting = `hello from rank ${rank} (pid ${process.pid})`;
  outbox.bytes.set(Buffer.from(greeting.padEnd(64)), 0);

  // Stage-3 blocks from a faster left neighbor may arrive during earlier stages: count them always.
  let received = 0;
  const isBlock = (i: number) => batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.imm[i] >= 1_000_000;
  const waitFor = async (pred: (i: number) => boolean, done: () => boolean = () => false): Promise<void> => {
    for (;;) {
      const k = cq.poll(batch);
      let hit = false;
      for (let i = 0; i < k; i++) {
        if (batch.status[i] !== Status.SUCCESS) throw new Error(batch.errors[i]?.message);
        if (isBlock(i)) received++;
        else if (pred(i)) hit = true;
      }
      if (hit || done()) return;
      if (k === 0) await cq.wait({ timeoutMs: 20_000 });
    }
  };

  // 1. Token ring: rank 0 starts each lap; everyone forwards.
  const t0 = performance.now();
  for (let lap = 0; lap < args.laps; lap++) {
    if (rank === 0) toRight.postWriteImm(outbox, 0, mesh.remotes[right][0], 0, 64, lap, 0, false);
    await waitFor((i) => batch.opcode[i] === Opcode.RECV_WRITE_IMM && batch.imm[i] === lap);
    if (rank !== 0) toRight.postWriteImm(outbox, 0, mesh.remotes[right][0], 0, 64, lap, 0, false);
  }
  const hopUs = ((performance.now() - t0) * 1000) / args.laps / n;

  // 2. One-sided READ of the left neighbor's greeting from its outbox.
  mesh.qps[left]!.postRead(inbox, 0, mesh.remotes[left][1], 0, 64, 1, true);
  await waitFor((i) => batch.opcode[i] === Opcode.READ);
  const heard = Buffer.from(inbox.bytes.subarray(0, 64)).toString().trim();

  // 3. Everyone streams `blocks` MiB to the right at once; receipts count from the left.
  let sent = 0;
  const t1 = performance.now();
  for (let b = 0; b < args.blocks; b++) {
    toRight.postWriteImm(outbox, 0, mesh.remotes[right][0], (b % SLOTS) * BLOCK, BLOCK, 1_000_000 + b, b, b === args.blocks - 1);
    const k = cq.poll(batch);
    for (let i = 0; i < k; i++) {
      if (isBlock(i)) received++;
      else if (batch.opcode[i] === Opcode.WRITE_IMM) sent = args.blocks;
    }
  }
  while (sent < args.blocks || received < args.blocks) {
    await waitFor(
      (i) => {
        if (batch.opcode[i] === Opcode.WRITE_IMM) sent = args.blocks;
        return true;
      },
      () => sent === args.blocks && received >= args.blocks,
    );
  }
  const gbps = (args.blocks * BLOCK) / ((performance.now() - t1) / 1000) / 1e9;
  return { rank, pid: process.pid, provider: mesh.device.providerName, hopUs, heard, gbps, received };
}

main()
  .then(async (result) => {
    process.send!({ type: 'result', rank, result });
    await released;
    process.exit(0);
  })
  .catch((err: Error) => process.send!({ type: 'error', rank, message: err.stack ?? String(err) }, () => process.exit(1)));
