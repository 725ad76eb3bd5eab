// A rank of test/collectives/credits.test: counts the CREDIT immediates its pair to the other
// rank posts (the transport's flow control) in three phases, and then, as rank 0, forges a
// credit in a chunk header; prints one JSON line per phase.
import { init, type WeftError } from '../../../src/index.js';
import { KIND_CREDIT, KIND_SHIFT } from '../../../src/transport/layout.js';

const ctx = await init({ timeoutMs: 10_000 });
const { rank } = ctx;
const other = 1 - rank;
interface PairInternals {
  qp: { postWriteImm(...args: unknown[]): void };
  consumed: number;
}
const pair = (ctx.transport.device as unknown as { pairs: PairInternals[] }).pairs[other];
let credits = 0;
const post = pair.qp.postWriteImm.bind(pair.qp);
pair.qp.postWriteImm = (...args: unknown[]) => {
  if ((args[5] as number) >>> KIND_SHIFT === KIND_CREDIT) credits++;
  post(...args);
};
const report = (phase: string, extra: object = {}) => console.log(`credits ${JSON.stringify({ rank, phase, credits, ...extra })}`);

// 1. Request and reply, 1,000 times: the credits ride on the replies and requests.
const x = new Float64Array(4);
for (let i = 0; i < 1000; i++) {
  if (rank === 0) {
    x[0] = i;
    ctx.sendSync(x, other);
    ctx.recvSync(x, other);
    if (x[0] !== i + 0.5) throw new Error(`reply ${i} carried ${x[0]}`);
  } else {
    ctx.recvSync(x, other);
    x[0] += 0.5;
    ctx.sendSync(x, other);
  }
}
report('request-reply');
credits = 0;

// 2. One way, 200 messages from rank 0 while rank 1 sends nothing: rank 1 must return credits
// on its own, or rank 0 stops once its ring is full.
for (let i = 0; i < 200; i++) {
  if (rank === 0) ctx.sendSync(Float64Array.of(i), 1);
  else {
    const y = new Float64Array(1);
    ctx.recvSync(y, 0);
    if (y[0] !== i) throw new Error(`message ${i} carried ${y[0]}`);
  }
}
report('one-way');
ctx.barrierSync();

// 3. Rank 0 claims to have consumed 1,000 chunks more than rank 1 sent: rank 1 refuses.
if (rank === 0) pair.consumed += 1000;
try {
  if (rank === 0) ctx.sendSync(x, 1);
  ctx.recvSync(x, other, { timeoutMs: 5000 });
  report('forged', { error: null });
} catch (err) {
  report('forged', { code: (err as WeftError).code, message: (err as Error).message });
}
await ctx.close().catch(() => {});
