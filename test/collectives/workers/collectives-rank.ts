// One rank of the collectives tests, started by `weft run` (or directly, for the kill test).
// argv[2] is the mode:
//   matrix    every collective x dtypes x sizes, checked against a reference computed here
//   mismatch  rank 1 passes a different length (or dtype, with argv[3] = 'dtype')
//   kill      allreduce (argv[3] elements; argv[4] 'barrier': barriers) in a loop; the last rank SIGKILLs itself mid-way
//   shared    allreduce over ctx.alloc arrays read in place (shm), mixed with heap arrays
//   hostshared (a job that spans hosts, as many ranks per host) the hierarchical allreduce over
//             ctx.alloc arrays, whose steps inside a host read them in place; heap arrays on one
//             host only; a barrier made while such an allreduce is between its steps
//   groups    the matrix on subgroups (split by parity with reversed keys, then newGroup of
//             the job's first and last rank), with world calls on the same tags in between
// Prints "ok rank R: N checks" at the end, or throws (exit code 1) naming the failed case.
import { init, WeftError, UnboundBuffer, createSendBuffer, createRecvBuffer, type ProcessGroup, type Subgroup, type TypedArray } from '../../../src/index.js';
import type { ReduceOp } from '../../../src/reduce/index.js';

type Ctor = { new (n: number): TypedArray; name: string; BYTES_PER_ELEMENT: number };
const mode = process.argv[2] ?? 'matrix';
const big = Number(process.env.WEFT_TEST_BIG ?? 1024 * 1024 + 3);
// The shared and registered modes run the large size on every dtype under WEFT_SOAK=1 only;
// otherwise on Float32Array (the paths do not depend on the dtype past its width, and 70001
// elements of each dtype already take the in-place and chunked paths).
const bigFor = (C: Ctor): number[] => (process.env.WEFT_SOAK === '1' || C === Float32Array ? [big] : []);
const ctx = await init({ timeoutMs: Number(process.env.WEFT_TEST_TIMEOUT ?? 60_000) });
// The matrix checks one communicator at a time: these are its rank and size (groups mode moves them).
let { rank, size } = ctx;
type Comm = ProcessGroup | Subgroup;
let checks = 0;

const isBig = (C: Ctor) => C.name.startsWith('Big');
const isFloat = (C: Ctor) => C.name.startsWith('Float');
const unsigned = (C: Ctor) => C.name.startsWith('Uint') || C.name.startsWith('BigUint');

const memo = new Map<string, TypedArray>();
/** A fresh copy of a memoized array (the reference folds over every rank's data). */
function cached(key: string, make: () => TypedArray): TypedArray {
  let a = memo.get(key);
  if (!a) memo.set(key, (a = make()));
  return a.slice() as TypedArray;
}

/** Small values so float sums are exact; the pattern differs per rank and per index. */
function gen(C: Ctor, r: number, n: number, op: ReduceOp = 'sum', salt = 0): TypedArray {
  return cached(`g ${C.name} ${r} ${n} ${op} ${salt}`, () => genRaw(C, r, n, op, salt));
}

function genRaw(C: Ctor, r: number, n: number, op: ReduceOp, salt: number): TypedArray {
  const a = new C(n);
  for (let i = 0; i < n; i++) {
    let v = ((r * 7 + i * 3 + salt) % 11) - (unsigned(C) ? 0 : 5);
    if (op === 'prod') v = unsigned(C) ? 1 + ((r + i) % 2) : ((r + i) % 3) - 1;
    if (op === 'band' || op === 'bor' || op === 'bxor') v = (r * 37 + i * 11 + salt) % 127;
    (a as unknown as (number | bigint)[])[i] = isBig(C) ? BigInt(v) : v;
  }
  return a;
}

function apply(op: ReduceOp, x: any, y: any): any {
  switch (op) {
    case 'sum': return x + y;
    case 'prod': return x * y; // factors are in {-1, 0, 1, 2}: exact; the typed array wraps
    case 'min': return x < y ? x : y;
    case 'max': return x > y ? x : y;
    case 'band': return x & y;
    case 'bor': return x | y;
    case 'bxor': return x ^ y;
  }
}

/** Fold of gen(r) over ranks in rank order; assignment into C wraps like C integers. */
function reference(C: Ctor, n: number, op: ReduceOp, salt = 0): TypedArray {
  return cached(`r ${C.name} ${n} ${op} ${salt}`, () => referenceRaw(C, n, op, salt));
}

function referenceRaw(C: Ctor, n: number, op: ReduceOp, salt: number): TypedArray {
  const out = gen(C, 0, n, op, salt) as any;
  for (let r = 1; r < size; r++) {
    const x = gen(C, r, n, op, salt) as any;
    for (let i = 0; i < n; i++) out[i] = apply(op, out[i], x[i]);
  }
  return out;
}

function same(what: string, got: TypedArray, want: TypedArray, from = 0, len = want.length): void {
  checks++;
  if (got.length < from + len) throw new Error(`rank ${rank}: ${what}: result has ${got.length} elements, expected ${from + len}`);
  for (let i = 0; i < len; i++) {
    const g = (got as any)[from + i];
    const w = (want as any)[i];
    if (g !== w && !(Number.isNaN(g) && Number.isNaN(w))) throw new Error(`rank ${rank}: ${what}: element ${from + i} is ${g}, expected ${w}`);
  }
}

const ALL: Ctor[] = [Float32Array, Float64Array, Int8Array, Uint8Array, Int16Array, Uint16Array, Int32Array, Uint32Array, BigInt64Array, BigUint64Array];
const SIZES = [0, 1, 7, 1000];

async function matrix(c: Comm): Promise<void> {
  // allreduce: every dtype with sum; every op on a few dtypes; each algorithm; in/out of place; async/sync.
  for (const C of ALL) {
    for (const n of [...SIZES, ...(C === Float32Array || C === Int32Array ? [big] : [])]) {
      const shm = 'device' in c && c.device.provider === 'shm'; // the board: every rank of the job on one host
      for (const algorithm of ['auto', 'direct', 'ring', ...(shm ? ['board' as const] : [])] as const) {
        if (n === big && (algorithm === 'direct' || algorithm === 'board')) continue;
        const x = gen(C, rank, n);
        await c.allreduce(x, { algorithm });
        same(`allreduce ${C.name} n=${n} ${algorithm}`, x, reference(C, n, 'sum'));
      }
      const input = gen(C, rank, n);
      const out = c.allreduceSync(input, { output: new C(n) });
      same(`allreduceSync out-of-place ${C.name} n=${n}`, out, reference(C, n, 'sum'));
      same(`allreduceSync leaves its input alone ${C.name} n=${n}`, input, gen(C, rank, n));
    }
  }
  for (const C of [Float64Array, Int32Array, Uint8Array, BigInt64Array, Int16Array] as Ctor[]) {
    for (const op of ['prod', 'min', 'max', 'band', 'bor', 'bxor'] as ReduceOp[]) {
      if (isFloat(C) && op.startsWith('b')) continue;
      for (const n of [7, 1000, 70_000]) {
        const x = gen(C, rank, n, op);
        await c.allreduce(x, { op, algorithm: n > 1000 ? 'ring' : 'auto' });
        same(`allreduce ${op} ${C.name} n=${n}`, x, reference(C, n, op));
      }
    }
  }

  for (const C of [Float32Array, Int32Array, Uint8Array, BigUint64Array, Float64Array] as Ctor[]) {
    const sizes = C === Float32Array ? [...SIZES, big] : SIZES;
    for (const n of sizes) {
      // broadcast from the last rank.
      const root = size - 1;
      const b = rank === root ? gen(C, 99, n) : new C(n);
      await c.broadcast(b, { root });
      same(`broadcast ${C.name} n=${n}`, b, gen(C, 99, n));

      // allgather: block r from rank r.
      const ag = new C(n * size);
      c.allgatherSync(gen(C, rank, n), ag);
      for (let r = 0; r < size; r++) same(`allgather ${C.name} n=${n} block ${r}`, ag, gen(C, r, n), r * n, n);

      // reduceScatter: rank r keeps block r of the full reduction.
      const rs = new C(n);
      await c.reduceScatter(gen(C, rank, n * size), rs);
      same(`reduceScatter ${C.name} n=${n}`, rs, reference(C, n * size, 'sum').subarray(rank * n, rank * n + n) as TypedArray);

      // reduce to rank 1 % size, in place at the root.
      const rroot = 1 % size;
      const rd = gen(C, rank, n);
      await c.reduce(rd, { root: rroot, op: 'max' });
      if (rank === rroot) same(`reduce max ${C.name} n=${n}`, rd, reference(C, n, 'max'));
      else same(`reduce leaves non-root input alone ${C.name} n=${n}`, rd, gen(C, rank, n, 'max'));

      if (n > 1000) continue;
      // gather / scatter at root 0.
      const gout = rank === 0 ? new C(n * size) : undefined;
      await c.gather(gen(C, rank, n), gout, { root: 0 });
      if (gout) for (let r = 0; r < size; r++) same(`gather ${C.name} n=${n} block ${r}`, gout, gen(C, r, n), r * n, n);
      const sout = new C(n);
      await c.scatter(rank === 0 ? gen(C, 5, n * size) : undefined, sout, { root: 0 });
      same(`scatter ${C.name} n=${n}`, sout, gen(C, 5, n * size).subarray(rank * n, rank * n + n) as TypedArray);

      // alltoall: block p of rank r's input is gen(r, salt p).
      const ain = new C(n * size);
      for (let p = 0; p < size; p++) (ain as any).set(gen(C, rank, n, 'sum', p), p * n);
      const aout = new C(n * size);
      c.alltoallSync(ain, aout);
      for (let p = 0; p < size; p++) same(`alltoall ${C.name} n=${n} from ${p}`, aout, gen(C, p, n, 'sum', rank), p * n, n);
    }
  }

  // v-variants: rank r contributes r + 2 elements (and 0 for the last rank).
  const counts = Array.from({ length: size }, (_, r) => (r === size - 1 ? 0 : r + 2));
  const total = counts.reduce((a, b) => a + b, 0);
  const agv = new Float64Array(total);
  await c.allgatherv(gen(Float64Array, rank, counts[rank]) as Float64Array, agv, counts);
  let o = 0;
  for (let r = 0; r < size; r++) (same(`allgatherv block ${r}`, agv, gen(Float64Array, r, counts[r]), o, counts[r]), (o += counts[r]));
  const gv = rank === size - 1 ? new Float64Array(total) : undefined;
  await c.gatherv(gen(Float64Array, rank, counts[rank]) as Float64Array, gv, counts, { root: size - 1 });
  if (gv) for (let r = 0, off = 0; r < size; off += counts[r], r++) same(`gatherv block ${r}`, gv, gen(Float64Array, r, counts[r]), off, counts[r]);
  const rsv = new Int32Array(counts[rank]);
  await c.reduceScatter(gen(Int32Array, rank, total) as Int32Array, rsv, { counts });
  const rsOff = counts.slice(0, rank).reduce((a, b) => a + b, 0);
  same('reduceScatter with counts', rsv, reference(Int32Array, total, 'sum').subarray(rsOff, rsOff + counts[rank]) as TypedArray);
  // alltoallv: rank r sends (r + p) % 3 elements to p.
  const sc = Array.from({ length: size }, (_, p) => (rank + p) % 3);
  const rc = Array.from({ length: size }, (_, p) => (p + rank) % 3);
  const vin = new Int32Array(sc.reduce((a, b) => a + b, 0));
  for (let p = 0, off = 0; p < size; off += sc[p], p++) vin.set(gen(Int32Array, rank, sc[p], 'sum', p) as Int32Array, off);
  const vout = new Int32Array(rc.reduce((a, b) => a + b, 0));
  await c.alltoallv(vin, sc, vout, rc);
  for (let p = 0, off = 0; p < size; off += rc[p], p++) same(`alltoallv from ${p}`, vout, gen(Int32Array, p, rc[p], 'sum', rank), off, rc[p]);

  // float16 / bfloat16 over Uint16Array: 1.0 (0x3c00 / 0x3f80) summed over ranks.
  const h = new Uint16Array(33).fill(0x3c00);
  await c.allreduce(h, { float: 'float16' });
  const hw = { 2: 0x4000, 3: 0x4200, 4: 0x4400, 5: 0x4500 }[size] ?? -1;
  if (hw >= 0) same('allreduce float16', h, new Uint16Array(33).fill(hw));
  const bf = new Uint16Array(9).fill(0x3f80);
  await c.allreduce(bf, { float: 'bfloat16' });
  const bw = { 2: 0x4000, 3: 0x4040, 4: 0x4080, 5: 0x40a0 }[size] ?? -1;
  if (bw >= 0) same('allreduce bfloat16', bf, new Uint16Array(9).fill(bw));

  // Point to point: a ring of tagged messages, then everyone to rank 0 received from any.
  const right = (rank + 1) % size;
  const left = (rank + size - 1) % size;
  const inbox = new Float32Array(5000);
  const rq = c.irecv(inbox, left, { tag: 3 });
  await c.send(gen(Float32Array, rank, 5000) as Float32Array, right, { tag: 3 });
  await rq.wait();
  same('send/recv ring', inbox, gen(Float32Array, left, 5000));
  if (rank === 0) {
    const seen = new Set<number>();
    for (let k = 1; k < size; k++) {
      const buf = new Int32Array(4);
      const from = await c.recv(buf, undefined, { tag: 9 });
      same(`recv from any (rank ${from})`, buf, Int32Array.of(from, from, from, from));
      seen.add(from);
    }
    if (seen.size !== size - 1) throw new Error(`rank 0: recv from any saw ${[...seen]}`);
  } else {
    c.sendSync(Int32Array.of(rank, rank, rank, rank), 0, { tag: 9 });
  }

  // Bad input is the misuse matrix's (test/collectives/misuse.test.ts): it aborts the job.
  await c.barrier();
  c.barrierSync({ tag: 1 });
}

/** Gloo's transport vocabulary directly: unbound buffers (any source, abort) and bound buffers. */
async function transport(c: ProcessGroup): Promise<void> {
  const dev = c.transport;
  const right = (rank + 1) % size;
  const left = (rank + size - 1) % size;
  // Unbound: a ring under slot 11, then receive-from-any at rank 0 under slot 12.
  const out = new UnboundBuffer(dev, gen(Float64Array, rank, 3000));
  const inb = new UnboundBuffer(dev, new Float64Array(3000));
  inb.recv(left, 11);
  out.send(right, 11);
  if ((await out.waitSend()) !== right) throw new Error(`rank ${rank}: waitSend named the wrong rank`);
  if ((await inb.waitRecv()) !== left) throw new Error(`rank ${rank}: waitRecv named the wrong rank`);
  same('UnboundBuffer ring', inb.view as TypedArray, gen(Float64Array, left, 3000));
  // Offsets: a slice of 100 elements lands at element 200.
  const part = new UnboundBuffer(dev, new Float64Array(400));
  part.recv(left, 13, 200 * 8, 100 * 8);
  out.send(right, 13, 50 * 8, 100 * 8);
  out.waitSendSync();
  part.waitRecvSync();
  same('UnboundBuffer offsets', (part.view as Float64Array).subarray(200, 300), (gen(Float64Array, left, 3000) as Float64Array).subarray(50, 150));
  if (rank === 0) {
    const any = new UnboundBuffer(dev, new Int32Array(1));
    const seen: number[] = [];
    for (let k = 1; k < size; k++) {
      any.recv([...Array(size).keys()].filter((r) => r !== 0), 12);
      const from = await any.waitRecv();
      if ((any.view as Int32Array)[0] !== from * 10) throw new Error(`rank 0: any-source message from ${from} holds ${(any.view as Int32Array)[0]}`);
      seen.push(from);
    }
    checks++;
    if (new Set(seen).size !== size - 1) throw new Error(`rank 0: any-source saw ${seen}`);
    // abortWaitRecv: a receive nobody sends to is given up cleanly.
    any.recv(1, 99);
    setTimeout(() => any.abortWaitRecv(), 50);
    try {
      await any.waitRecv({ timeoutMs: 5000 });
      throw new Error('rank 0: waitRecv returned after abortWaitRecv');
    } catch (err) {
      checks++;
      if ((err as WeftError).code !== 'EABORTED') throw err;
    }
  } else {
    const mine = new UnboundBuffer(dev, Int32Array.of(rank * 10));
    mine.send(0, 12);
    await mine.waitSend();
  }
  // Bound buffers: three sends into one receive buffer at different remote offsets.
  const rb = createRecvBuffer(dev, left, 21, new Uint8Array(300));
  const sb = createSendBuffer(dev, right, 21, Uint8Array.from({ length: 100 }, (_, i) => (i + rank) & 0xff));
  for (let k = 0; k < 3; k++) sb.send(0, 100, k * 100);
  for (let k = 0; k < 3; k++) await sb.waitSend();
  for (let k = 0; k < 3; k++) await rb.waitRecv();
  const want = Uint8Array.from({ length: 300 }, (_, i) => ((i % 100) + left) & 0xff);
  same('bound buffers', rb.bytes, want);
  rb.close();
  await c.barrier();
}

/** A ctx.alloc array holding `data`. */
function allocOf(c: ProcessGroup, C: Ctor, data: TypedArray): TypedArray {
  const a = c.alloc(C as never, data.length) as TypedArray;
  (a as { set(d: TypedArray): void }).set(data);
  return a;
}

async function shared(c: ProcessGroup): Promise<void> {
  for (const C of [Float32Array, Int32Array, Float64Array, BigInt64Array, Uint8Array] as Ctor[]) {
    for (const n of [70_001, ...bigFor(C)]) {
      // 'shared' forced never falls back to the ring: it fails unless every rank's arrays are shared.
      for (const algorithm of ['auto', 'shared'] as const) {
        const x = allocOf(c, C, gen(C, rank, n));
        await c.allreduce(x, { algorithm });
        same(`shared allreduce in place ${C.name} n=${n} ${algorithm}`, x, reference(C, n, 'sum'));
        const input = allocOf(c, C, gen(C, rank, n));
        const out = c.allreduceSync(input, { output: c.alloc(C as never, n) as TypedArray, algorithm });
        same(`shared allreduceSync out of place ${C.name} n=${n} ${algorithm}`, out, reference(C, n, 'sum'));
        same(`shared allreduceSync leaves its input alone ${C.name} n=${n}`, input, gen(C, rank, n));
      }
    }
  }
  for (const op of ['max', 'prod', 'bxor'] as ReduceOp[]) {
    const x = allocOf(c, Int32Array, gen(Int32Array, rank, 70_001, op));
    await c.allreduce(x, { op, algorithm: 'shared' });
    same(`shared allreduce ${op}`, x, reference(Int32Array, 70_001, op));
  }
  // A view at an offset inside an allocation; the same arrays again (imported regions reused).
  const whole = c.alloc(Float32Array, 100_000);
  for (let k = 0; k < 3; k++) {
    const view = whole.subarray(1000 + k, 1000 + k + 70_001);
    view.set(gen(Float32Array, rank, 70_001, 'sum', k) as Float32Array);
    c.allreduceSync(view, { algorithm: 'shared' });
    same(`shared allreduce of a subarray, round ${k}`, view, reference(Float32Array, 70_001, 'sum', k));
  }
  // Rank 1 passes a heap array: 'auto' takes the ring on every rank; 'shared' fails on every rank.
  const mixed = () => (rank === 1 ? gen(Float32Array, rank, 70_001) : allocOf(c, Float32Array, gen(Float32Array, rank, 70_001)));
  const m = mixed();
  await c.allreduce(m);
  same('mixed heap and shared arrays (ring)', m, reference(Float32Array, 70_001, 'sum'));
  try {
    await c.allreduce(mixed(), { algorithm: 'shared' });
    throw new Error(`rank ${rank}: forced 'shared' with a heap array on rank 1 did not fail`);
  } catch (err) {
    if (!(err instanceof WeftError) || err.code !== 'EINVAL' || !/rank 1's are not/.test(err.message)) throw err;
    checks++;
  }
  // Still usable afterwards.
  const after = allocOf(c, Float32Array, gen(Float32Array, rank, 70_001));
  await c.allreduce(after);
  same('shared allreduce after the refused call', after, reference(Float32Array, 70_001, 'sum'));
}

/**
 * The hierarchical allreduce over ctx.alloc arrays on hosts with as many ranks each: inside a
 * host its steps read the peers' arrays in place on the host board (allreduce-shared.ts), and
 * across hosts each local rank allreduces its chunk with its counterparts.
 */
async function hostshared(c: ProcessGroup): Promise<void> {
  for (const C of [Float32Array, Int32Array, Float64Array, BigInt64Array, Uint8Array] as Ctor[]) {
    for (const n of [70_001, ...bigFor(C)]) {
      const x = allocOf(c, C, gen(C, rank, n));
      await c.allreduce(x);
      same(`host-shared allreduce in place ${C.name} n=${n}`, x, reference(C, n, 'sum'));
      const input = allocOf(c, C, gen(C, rank, n));
      const out = c.allreduceSync(input, { output: c.alloc(C as never, n) as TypedArray });
      same(`host-shared allreduceSync out of place ${C.name} n=${n}`, out, reference(C, n, 'sum'));
      same(`host-shared allreduceSync leaves its input alone ${C.name} n=${n}`, input, gen(C, rank, n));
    }
  }
  for (const op of ['max', 'min', 'prod', 'bxor'] as ReduceOp[]) {
    const x = allocOf(c, Int32Array, gen(Int32Array, rank, 70_001, op));
    await c.allreduce(x, { op });
    same(`host-shared allreduce ${op}`, x, reference(Int32Array, 70_001, op));
  }
  // 5 MiB + 4 bytes: the step across hosts runs in segments over the fabric (3 of them between
  // 2 hosts, 2 among 3), and a leader that crosses alone reduces each segment just before it
  // goes out and hands each finished one to its host's ranks while the next is on the wire.
  {
    const n = 1_310_721;
    const x = allocOf(c, Float32Array, gen(Float32Array, rank, n));
    c.allreduceSync(x);
    same(`host-shared allreduceSync of ${n} floats`, x, reference(Float32Array, n, 'sum'));
    const input = allocOf(c, Float32Array, gen(Float32Array, rank, n, 'sum', 1));
    const out = await c.allreduce(input, { output: c.alloc(Float32Array, n) });
    same(`host-shared allreduce of ${n} floats out of place`, out, reference(Float32Array, n, 'sum', 1));
    same(`host-shared allreduce of ${n} floats leaves its input alone`, input, gen(Float32Array, rank, n, 'sum', 1));
  }
  // Views at offsets inside one allocation, the same arrays again (imported regions reused).
  const whole = c.alloc(Float32Array, 100_000);
  for (let k = 0; k < 3; k++) {
    const view = whole.subarray(1000 + k, 1000 + k + 70_001);
    view.set(gen(Float32Array, rank, 70_001, 'sum', k) as Float32Array);
    c.allreduceSync(view);
    same(`host-shared allreduce of a subarray, round ${k}`, view, reference(Float32Array, 70_001, 'sum', k));
  }
  // A heap array on one rank: its host takes the message steps, the others stay in place; the
  // step across hosts is the same call in both, so they still meet.
  for (const heapRank of [1, size - 1]) {
    const m = rank === heapRank ? gen(Float32Array, rank, 70_001) : allocOf(c, Float32Array, gen(Float32Array, rank, 70_001));
    await c.allreduce(m);
    same(`host-shared allreduce with a heap array on rank ${heapRank}`, m, reference(Float32Array, 70_001, 'sum'));
  }
  // A barrier made while the allreduce is between its board steps (local rank 0 made it 20 ms
  // later): both take the host board, and the barrier's call pairs with the barrier's on every
  // rank, not with one of the allreduce's later steps.
  // The same with arrays the host board holds (its sum on the board, the leaders across hosts,
  // the leader's result on the board), heap and ctx.alloc alike, and with a barrier first.
  for (const n of [70_001, 8, 16_384]) {
    for (let k = 0; k < 3; k++) {
      const x = n === 70_001 || k === 1 ? allocOf(c, Float32Array, gen(Float32Array, rank, n, 'sum', k)) : gen(Float32Array, rank, n, 'sum', k);
      const p = c.allreduce(x);
      if (ctx.localRank === 0) await new Promise((r) => setTimeout(r, 20));
      await Promise.all([p, c.barrier()]);
      same(`host-board allreduce of ${n} beside a barrier, round ${k}`, x, reference(Float32Array, n, 'sum', k));
    }
    const y = gen(Float32Array, rank, n, 'sum', 5);
    const b = c.barrier();
    if (ctx.localRank === 1) await new Promise((r) => setTimeout(r, 20));
    await Promise.all([b, c.allreduce(y)]);
    same(`host-board allreduce of ${n} made while a barrier runs`, y, reference(Float32Array, n, 'sum', 5));
  }
  // Broadcasts from every root (a leader or not), on the host board when it holds the array,
  // blocking and awaited, and one with a barrier made while it is between its steps.
  for (const n of [8, 16_384, 70_001]) {
    for (let root = 0; root < size; root++) {
      const x = rank === root ? gen(Float32Array, 40 + root, n) : new Float32Array(n).fill(-1);
      if (root & 1) await c.broadcast(x, { root });
      else c.broadcastSync(x, { root });
      same(`host-board broadcast of ${n} from rank ${root}`, x, gen(Float32Array, 40 + root, n));
      const z = rank === root ? gen(Float32Array, 50 + root, n) : new Float32Array(n).fill(-1);
      const p = c.broadcast(z, { root });
      if (ctx.localRank === 0) await new Promise((r) => setTimeout(r, 5));
      await Promise.all([p, c.barrier()]);
      same(`host-board broadcast of ${n} from rank ${root} beside a barrier`, z, gen(Float32Array, 50 + root, n));
    }
  }
  // allgather and reduceScatter whose arrays the host board holds (up to 64 KiB in all), blocking
  // and awaited beside a barrier made while they are between their steps; then past the board.
  for (const n of [1, 100, 4096, 5000]) {
    for (let k = 0; k < 2; k++) {
      const ag = new Float32Array(n * size).fill(-1);
      const mine = gen(Float32Array, rank + 10 * k, n);
      if (k === 0) c.allgatherSync(mine, ag);
      else {
        const p = c.allgather(mine, ag);
        if (ctx.localRank === 0) await new Promise((r) => setTimeout(r, 5));
        await Promise.all([p, c.barrier()]);
      }
      for (let r = 0; r < size; r++) same(`host-board allgather of ${n} block ${r}, round ${k}`, ag, gen(Float32Array, r + 10 * k, n), r * n, n);
      const rs = new Float32Array(n).fill(-1);
      const all = gen(Float32Array, rank, n * size, 'sum', k);
      if (k === 0) c.reduceScatterSync(all, rs);
      else {
        const p = c.reduceScatter(all, rs);
        if (ctx.localRank === 0) await new Promise((r) => setTimeout(r, 5));
        await Promise.all([p, c.barrier()]);
      }
      same(`host-board reduceScatter of ${n}, round ${k}`, rs, reference(Float32Array, n * size, 'sum', k).subarray(rank * n, rank * n + n) as TypedArray);
      same(`host-board reduceScatter leaves its input alone, ${n}`, all, gen(Float32Array, rank, n * size, 'sum', k));
    }
  }
}

/**
 * Collectives over ctx.alloc arrays on any provider. On ofi, a collective's sends of at least
 * 512 KiB from such arrays are written from them in place (no staging copy) and finish once
 * their last write completed locally (the fabric has taken the bytes), whether or not the peer
 * has read them yet.
 */
async function registered(c: ProcessGroup): Promise<void> {
  for (const C of [Float32Array, Int32Array, Float64Array, BigInt64Array, Uint8Array] as Ctor[]) {
    for (const n of [70_001, ...bigFor(C)]) {
      const x = allocOf(c, C, gen(C, rank, n));
      await c.allreduce(x);
      same(`registered allreduce in place ${C.name} n=${n}`, x, reference(C, n, 'sum'));
      const input = allocOf(c, C, gen(C, rank, n));
      const out = c.allreduceSync(input, { output: c.alloc(C as never, n) as TypedArray, algorithm: 'ring' });
      same(`registered allreduceSync ring out of place ${C.name} n=${n}`, out, reference(C, n, 'sum'));
      same(`registered allreduceSync leaves its input alone ${C.name} n=${n}`, input, gen(C, rank, n));

      const root = size - 1;
      const b = rank === root ? allocOf(c, C, gen(C, 99, n)) : (c.alloc(C as never, n) as TypedArray);
      await c.broadcast(b, { root });
      same(`registered broadcast ${C.name} n=${n}`, b, gen(C, 99, n));

      const ag = c.alloc(C as never, n * size) as TypedArray;
      c.allgatherSync(allocOf(c, C, gen(C, rank, n)), ag);
      for (let r = 0; r < size; r++) same(`registered allgather ${C.name} n=${n} block ${r}`, ag, gen(C, r, n), r * n, n);

      const rs = c.alloc(C as never, n) as TypedArray;
      await c.reduceScatter(allocOf(c, C, gen(C, rank, n * size)), rs);
      same(`registered reduceScatter ${C.name} n=${n}`, rs, reference(C, n * size, 'sum').subarray(rank * n, rank * n + n) as TypedArray);
    }
  }
  // A zero-copy broadcast's root may overwrite its array as soon as the call returns: the
  // message (8 MiB: twice the ofi ring, so its second half waits for the receiver's credits)
  // has left the array by then. The next rank is late to every round, so a send that finished
  // before its last chunk was written would carry the next round's bytes. (Over tcp the kernel
  // copies at the post, so a send finished between its last post and that write's completion
  // passes here; over verbs or efa the bytes are read later and it would not.)
  {
    const big = 2 * 1024 * 1024;
    const bc = c.alloc(Float32Array, big);
    const root = 0;
    for (let round = 0; round < 4; round++) {
      if (rank === root) bc.fill(round + 1);
      if (rank === (root + 1) % size) await new Promise((r) => setTimeout(r, 50));
      await c.broadcast(bc, { root });
      if (rank === root) bc.fill(-1);
      else {
        let bad = -1;
        for (let i = 0; i < big; i++) if (bc[i] !== round + 1) { bad = i; break; }
        if (bad >= 0) throw new Error(`zero-copy broadcast round ${round}: element ${bad} is ${bc[bad]}, expected ${round + 1} (the root's send finished before its bytes left the array)`);
        checks++;
      }
      c.barrierSync();
    }
  }
  // Point to point stays buffered: a send of a registered array completes while its receiver
  // is still busy, and the bytes received are those at send time.
  const n = 300_000;
  const right = (rank + 1) % size, left = (rank - 1 + size) % size;
  const mine = allocOf(c, Float32Array, gen(Float32Array, rank, n)) as Float32Array;
  await c.send(mine, right, { tag: 21, timeoutMs: 20_000 });
  mine.fill(-1);
  await new Promise((r) => setTimeout(r, 200));
  const got = c.alloc(Float32Array, n);
  await c.recv(got, left, { tag: 21 });
  same('registered send completes before the receiver calls recv; bytes as sent', got, gen(Float32Array, left, n));
}

/**
 * Subgroups: the matrix on each half of a parity split (keys reversed: group rank 0 is the
 * half's highest job rank), then on newGroup([0, last]); between them, world and subgroup
 * allreduces on the same tag at once (isolated: each sums its own members).
 */
async function groups(c: ProcessGroup): Promise<void> {
  const world = { rank, size };
  const half = await c.split(world.rank % 2, -world.rank);
  if (!half) throw new Error(`rank ${world.rank}: split gave no group`);
  const mine = [...Array(world.size).keys()].filter((r) => r % 2 === world.rank % 2).reverse();
  if (half.size !== mine.length || half.rank !== mine.indexOf(world.rank) || half.ranks.join() !== mine.join()) throw new Error(`rank ${world.rank}: split gave rank ${half.rank} of ${half.size} (${half.ranks}), expected ${mine.indexOf(world.rank)} of ${mine.length} (${mine})`);
  checks++;
  const both = async () => {
    const a = new Float64Array(100).fill(world.rank + 1);
    const b = new Float64Array(100).fill(world.rank + 1);
    await Promise.all([c.allreduce(a, { tag: 7 }), half.allreduce(b, { tag: 7 })]);
    same('world allreduce beside a subgroup one', a, new Float64Array(100).fill((world.size * (world.size + 1)) / 2));
    same('subgroup allreduce beside a world one', b, new Float64Array(100).fill(mine.reduce((x, r) => x + r + 1, 0)));
  };
  await both();
  ({ rank, size } = half);
  memo.clear();
  await matrix(half);
  ({ rank, size } = world);
  memo.clear();
  await both();
  const ends = await c.newGroup([world.size - 1, 0]);
  const member = world.rank === 0 || world.rank === world.size - 1;
  if (Boolean(ends) !== member) throw new Error(`rank ${world.rank}: newGroup membership is ${Boolean(ends)}`);
  if (ends) {
    ({ rank, size } = ends);
    memo.clear();
    await matrix(ends);
    ({ rank, size } = world);
    memo.clear();
  }
  // Two groups made at once from different parents that share ranks (0 and the last): they
  // must not agree on the same id (their traffic would share slots). A = all but the last
  // rank, from the world; B = {0, last}, from `ends`.
  const last = world.size - 1;
  const [A, B] = await Promise.all([c.split(world.rank < last ? 0 : 1), ends ? ends.newGroup([0, 1]) : Promise.resolve(undefined)]);
  if (A && B && A.transport.groupId === B.transport.groupId) throw new Error(`rank ${world.rank}: two groups sharing this rank got one id, ${A.transport.groupId}`);
  checks++;
  const x = Int32Array.of(world.rank);
  const y = Int32Array.of(world.rank);
  await Promise.all([A && A.size === last ? A.allreduce(x) : undefined, B ? B.allreduce(y) : undefined]);
  if (A && A.size === last && x[0] !== (last * (last - 1)) / 2) throw new Error(`rank ${world.rank}: allreduce on A gave ${x[0]}`);
  if (B && y[0] !== last) throw new Error(`rank ${world.rank}: allreduce on B gave ${y[0]}`);
  checks++;
  await c.barrier();
}

/** Modes that run a set of checks and report how many passed. */
const checked: Record<string, (c: ProcessGroup) => Promise<void>> = { registered, shared, hostshared, transport, matrix, groups };

if (mode in checked) {
  await checked[mode](ctx);
  console.log(`ok rank ${rank}: ${checks} checks`);
  await ctx.close();
} else if (mode === 'mismatch') {
  const dtype = process.argv[3] === 'dtype';
  const x = dtype && rank === 1 ? new Float64Array(1000) : new Float32Array(rank === 1 && !dtype ? 999 : 1000);
  try {
    await ctx.allreduce(x as Float32Array, { timeoutMs: 20_000 });
    console.log(`rank ${rank}: no error`);
  } catch (err) {
    console.log(`rank ${rank} error ${(err as WeftError).code}: ${(err as Error).message}`);
  }
  await ctx.close({ timeoutMs: 10_000 });
} else if (mode === 'kill') {
  const x = new Float32Array(Number(process.argv[3] ?? 300_000));
  const t0 = performance.now();
  try {
    for (let i = 0; ; i++) {
      if (rank === size - 1 && i === 20) process.kill(process.pid, 'SIGKILL');
      if (process.argv[4] === 'barrier') await ctx.barrier({ timeoutMs: 10_000 });
      else await ctx.allreduce(x, { timeoutMs: 10_000 });
    }
  } catch (err) {
    console.log(`rank ${rank} error after ${Math.round(performance.now() - t0)} ms ${(err as WeftError).code}: ${(err as Error).message}`);
  }
  await ctx.close({ timeoutMs: 3000 });
}
