// A rank of test/collectives/pair-protocol.test: counts the CREDIT immediates its pair to the other
// rank posts (the transport's flow control) in two phases, and then, as rank 0, sends one
// chunk with a forged header (argv[2]: credit, magic, old-magic, seq or length); prints one JSON line per
// phase.
import { init, type WeftError } from '../../../src/index.js';
import { H, HEADER_BYTES, KIND_CREDIT, KIND_DATA, KIND_SHIFT } from '../../../src/transport/layout.js';

const forge = process.argv[2] ?? 'credit';

const ctx = await init({ timeoutMs: 10_000 });
const { rank } = ctx;
const other = 1 - rank;
interface PairInternals {
  qp: { postWriteImm(...args: unknown[]): void };
  consumed: number;
  remoteBase: number;
  direct: Uint8Array | undefined;
}
const pair = (ctx.transport.device as unknown as { pairs: PairInternals[] }).pairs[other];
let credits = 0;
/** Set on rank 0 for the last phase: rewrites the next data chunk's header before it leaves. */
let tamper: ((header: DataView) => void) | undefined;
const post = pair.qp.postWriteImm.bind(pair.qp);
pair.qp.postWriteImm = (...args: unknown[]) => {
  const imm = args[5] as number;
  if (imm >>> KIND_SHIFT === KIND_CREDIT) credits++;
  if (tamper && imm >>> KIND_SHIFT === KIND_DATA) {
    // shm: the header is already in the peer's ring (through the mapping); ofi: in the staging
    // ring this WRITE_IMM sends from.
    const [local, lOff, , rOff] = args as [{ bytes: Uint8Array }, number, unknown, number];
    const bytes = pair.direct ?? local.bytes;
    const at = pair.direct ? rOff - pair.remoteBase : lOff;
    tamper(new DataView(bytes.buffer, bytes.byteOffset + at, HEADER_BYTES));
    tamper = undefined;
  }
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

// 3. Rank 0 sends one chunk with a forged header; rank 1 must refuse it (EPROTO), not crash,
// hang or read out of range.
if (rank === 0) {
  const w = (i: number) => i * 4;
  if (forge === 'credit') pair.consumed += 1000; // a credit for 1,000 chunks rank 1 never sent
  else if (forge === 'magic') tamper = (h) => h.setUint32(w(H.MAGIC), 0xdeadbeef, true);
  else if (forge === 'old-magic') tamper = (h) => h.setUint32(w(H.MAGIC), 0x324d5457, true); // 'WTM2': the version before, whose zero-copy sends waited for an early credit
  else if (forge === 'seq') tamper = (h) => h.setUint32(w(H.SEQ), h.getUint32(w(H.SEQ), true) + 5, true);
  else if (forge === 'length') tamper = (h) => h.setUint32(w(H.LENGTH), 0x7fffffff, true);
}
try {
  if (rank === 0) ctx.sendSync(x, 1);
  ctx.recvSync(x, other, { timeoutMs: 5000 });
  report('forged', { error: null });
} catch (err) {
  report('forged', { code: (err as WeftError).code, message: (err as Error).message });
}
await ctx.close().catch(() => {});
