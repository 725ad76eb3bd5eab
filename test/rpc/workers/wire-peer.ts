/**
 * Scenarios where one side speaks copyrpc by hand over raw NIC verbs, to check the bytes a
 * real endpoint writes (wire) and how a real endpoint survives bytes it must refuse
 * (malformed). The raw side builds its endpoint info with encodeEndpointInfo, so the real
 * endpoint connects to it like to any peer.
 */
import { createDevice, CompletionBatch, Opcode, Status, type Device, type MemoryRegion, type QueuePair, type RemoteRegion } from '../../../src/nic/index.js';
import { createRpcEngine, decodeEndpointInfo, encodeEndpointInfo, writeFlowMetadata, writeHeader, type RecvHandle } from '../../../src/rpc/index.js';
import type { WeftError } from '../../../src/errors.js';
import { exchange, unb64 } from './mesh.js';

const RING = 1024;

/** A raw copyrpc peer: a QP, a recv ring, a consumer word, and a scratch buffer to send from. */
interface RawPeer {
  qp: QueuePair;
  recv: MemoryRegion;
  ctl: MemoryRegion;
  scratch: MemoryRegion;
  info: Uint8Array;
  remote?: RemoteRegion;
}

function rawPeer(dev: Device, maxResp: number, peerLabel: string): RawPeer {
  const qp = dev.createQueuePair({ peerLabel, recvCredits: 64 });
  const recv = dev.allocate(RING);
  const ctl = dev.allocate(64);
  const scratch = dev.allocate(4096);
  const info = encodeEndpointInfo({ recvRingSize: RING, sendRingSize: RING, maxRespReservation: maxResp, qpAddress: qp.address(), recvRing: recv.descriptor(), consumer: ctl.descriptor() });
  return { qp, recv, ctl, scratch, info };
}

function connectRaw(p: RawPeer, info: Uint8Array): void {
  const i = decodeEndpointInfo(info, 'raw peer');
  p.qp.connect(i.qpAddress);
  p.remote = p.qp.importRegion(i.recvRing);
}

/** Sends `bytes` at remote ring offset `off` with immediate `imm` (one WRITE_IMM). */
function sendRaw(p: RawPeer, off: number, bytes: Uint8Array, imm: number): void {
  p.scratch.bytes.set(bytes, 0);
  p.qp.postWriteImm(p.scratch, 0, p.remote as RemoteRegion, off, bytes.length, imm, 0, false);
}

/** Builds a batch: metadata then messages [callId, piggyback, payload], each padded to 32. */
export function buildBatch(consumer: number, grant: number, count: number, msgs: [number, number, Uint8Array][]): Uint8Array {
  let len = 32;
  for (const [, , p] of msgs) len += Math.ceil((12 + p.length) / 32) * 32;
  const out = new Uint8Array(len);
  const v = new DataView(out.buffer);
  writeFlowMetadata(v, 0, consumer, grant, count);
  let o = 32;
  for (const [id, pig, p] of msgs) {
    writeHeader(v, o, id, pig, p.length);
    out.set(p, o + 12);
    o += Math.ceil((12 + p.length) / 32) * 32;
  }
  return out;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
export const seqBytes = (n: number, start: number) => new Uint8Array(n).map((_, i) => (start + i) & 255);

async function until(dev: Device, batch: CompletionBatch, what: string, cond: () => boolean, onEntry: (i: number) => void, timeoutMs = 10_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    const k = dev.cq.poll(batch);
    for (let i = 0; i < k; i++) {
      if (batch.status[i] !== Status.SUCCESS) throw new Error(`${what}: ${batch.errors[i]?.message}`);
      onEntry(i);
    }
    if (k === 0) {
      if (performance.now() > end) throw new Error(`timed out: ${what}`);
      await new Promise((r) => setImmediate(r));
    }
  }
}

/**
 * wire: rank 0 is a real endpoint (1 KiB rings, maxRespReservation 64); rank 1 captures every
 * batch it receives (offset, imm, bytes) and answers with hand-built batches at fixed points.
 */
export async function wireScenario(rank: number, _n: number, provider: string, _args: Record<string, unknown>, released: Promise<void>): Promise<void> {
  if (rank === 1) {
    const dev = await createDevice({ provider, label: 'rank 1 (raw)' });
    const p = rawPeer(dev, 256, 'rank 0');
    const table = await exchange(rank, { 0: p.info });
    connectRaw(p, unb64(table.get(0)!.addrs[1]));
    const batch = new CompletionBatch(64);
    const captured: { off: number; imm: number; len: number; hex: string }[] = [];
    let pos = 0;
    const capture = (i: number) => {
      if (batch.opcode[i] !== Opcode.RECV_WRITE_IMM) return;
      const off = pos % RING;
      const len = batch.byteLength[i];
      captured.push({ off, imm: batch.imm[i], len, hex: hex(p.recv.bytes.subarray(off, off + len)) });
      pos += batch.imm[i] * 32;
    };
    await until(dev, batch, 'batch 1', () => captured.length >= 1, capture);
    // P1: consumed 96, grant 64, response to call 1 (3 bytes).
    sendRaw(p, 0, buildBatch(96, 64, 1, [[0x80000001, 2, new Uint8Array([9, 8, 7])]]), 2);
    await until(dev, batch, 'batch 2', () => captured.length >= 2, capture);
    // P2: metadata only: consumed 576, grant 128.
    sendRaw(p, 64, buildBatch(576, 128, 0, []), 1);
    await until(dev, batch, 'batches 3, wrap, 4', () => captured.length >= 5, capture);
    // P3: a request (call id 7, allowance 64 bytes = 2 blocks, payload AA BB CC DD).
    sendRaw(p, 96, buildBatch(576, 0, 1, [[7, 2, new Uint8Array([0xaa, 0xbb, 0xcc, 0xdd])]]), 2);
    await until(dev, batch, 'batch 5', () => captured.length >= 6, capture);
    process.send!({ type: 'result', rank, result: { captured } });
    await released;
    dev.close();
    return;
  }
  const ctx = await createRpcEngine<string>({ provider, label: 'rank 0', debug: true });
  const ep = ctx.createEndpoint({ sendRingSize: RING, recvRingSize: RING, maxRespReservation: 64, peerLabel: 'rank 1' });
  const table = await exchange(rank, { 1: ep.localInfo() });
  ep.connect(unb64(table.get(1)!.addrs[0]));
  const responses: string[] = [];
  const onResp = (ud: string, buf: Uint8Array, off: number, len: number) => responses.push(`${ud}:${hex(buf.subarray(off, off + len))}`);
  const pollUntil = async (what: string, cond: () => boolean) => {
    const end = performance.now() + 10_000;
    while (!cond()) {
      if (ctx.poll(onResp) === 0) await new Promise((r) => setImmediate(r));
      if (performance.now() > end) throw new Error(`rank 0 timed out: ${what}; state ${JSON.stringify(ep.debugState())}`);
    }
  };
  const ids: number[] = [];
  ids.push(ep.call(new Uint8Array([1, 2, 3, 4, 5]), 'A', 20));
  ids.push(ep.call(seqBytes(20, 0x10), 'B', 0));
  ctx.flush();
  await pollUntil('response to B', () => responses.length === 1);
  ids.push(ep.call(seqBytes(200, 0x20), 'C1', 0));
  ids.push(ep.call(seqBytes(200, 0x40), 'C2', 0));
  ctx.flush();
  await pollUntil('consumer 576', () => ep.debugState().remoteConsumer === 576);
  ids.push(ep.call(seqBytes(200, 0x60), 'D1', 0));
  ids.push(ep.call(seqBytes(200, 0x80), 'D2', 0));
  ctx.flush();
  let h: RecvHandle<string> | undefined;
  await pollUntil('request 7', () => (h = h ?? ctx.recv()) !== undefined);
  const req = { callId: h!.callId, payload: hex(h!.payload), allowance: h!.responseAllowance };
  h!.reply(new Uint8Array([0x11, 0x22]));
  ctx.flush();
  process.send!({ type: 'result', rank, result: { ids, responses, req, stats: ep.stats } });
  await released;
  ctx.close();
}

/** The malformed batches rank 2 sends, one per endpoint of rank 0 toward it. */
export const MALFORMED: { name: string; imm: number; bytes: () => Uint8Array; expect: RegExp }[] = [
  { name: 'message count past the data', imm: 2, bytes: () => buildBatch(0, 0, 5, [[1, 2, new Uint8Array(4)]]), expect: /message count 5 runs past the data/ },
  { name: 'length past the ring', imm: 2, bytes: () => { const b = buildBatch(0, 0, 1, [[1, 2, new Uint8Array(4)]]); new DataView(b.buffer).setUint32(40, 100_000, true); return b; }, expect: /claims 100000 payload bytes/ },
  { name: 'response to an unknown call id', imm: 2, bytes: () => buildBatch(0, 0, 1, [[0x80000000 + 9, 2, new Uint8Array(3)]]), expect: /response to call id 9, which is not pending/ },
  { name: 'bad wrap marker', imm: 1, bytes: () => buildBatch(0, 0, 0xffffffff, []), expect: /wrap marker .* not at the \d+-byte cycle boundary/ },
  { name: 'imm past the ring', imm: 100_000, bytes: () => buildBatch(0, 0, 0, []), expect: /does not fit in the \d+-byte ring cycle/ },
  { name: 'consumer position beyond what was sent', imm: 1, bytes: () => buildBatch(1 << 20, 0, 0, []), expect: /consumer position 1048576 is beyond/ },
  { name: 'credit grant above the ceiling', imm: 1, bytes: () => buildBatch(0, 1 << 20, 0, []), expect: /credit grant 1048576 would raise our credit/ },
  // The pending call (id 0) allowed 16 bytes of response: 20 with padding.
  { name: 'response longer than its allowance', imm: 4, bytes: () => buildBatch(0, 0, 1, [[0x80000000 + 0, 2, new Uint8Array(64)]]), expect: /the response to call id 0 carries 64 bytes, more than the 20 the call allowed/ },
  { name: 'request beyond its credit', imm: 2, bytes: () => buildBatch(0, 0, 1, [[3, 1000, new Uint8Array(2)]]), expect: /claims a response allowance of 32000 bytes/ },
];

/**
 * malformed: rank 0 has one endpoint toward rank 1 (a real peer that echoes) and one per
 * MALFORMED entry toward rank 2 (raw), each with a call pending. Rank 2 sends each entry's
 * bytes. Rank 0 reports how each endpoint failed and then runs traffic with rank 1.
 */
export async function malformedScenario(rank: number, _n: number, provider: string, args: Record<string, unknown>, released: Promise<void>): Promise<void> {
  const K = MALFORMED.length;
  if (rank === 2) {
    const dev = await createDevice({ provider, label: 'rank 2 (evil)' });
    const peers = MALFORMED.map(() => rawPeer(dev, 256, 'rank 0'));
    const table = await exchange(rank, {}, peers.map((p) => p.info));
    const infos = table.get(0)!.descs.map(unb64);
    peers.forEach((p, k) => connectRaw(p, infos[k]));
    MALFORMED.forEach((m, k) => sendRaw(peers[k], 0, m.bytes(), m.imm));
    const batch = new CompletionBatch(64);
    const end = performance.now() + 3000;
    // Keep the fabric progressing (ofi needs the initiator to poll) until released.
    let done = false;
    void released.then(() => (done = true));
    process.send!({ type: 'result', rank, result: { sent: K } });
    while (!done && performance.now() < end + 60_000) {
      dev.cq.poll(batch);
      await new Promise((r) => setTimeout(r, 1));
    }
    dev.close();
    return;
  }
  const ctx = await createRpcEngine<string>({ provider, label: `rank ${rank}` });
  if (rank === 1) {
    const ep = ctx.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'rank 0' });
    const table = await exchange(rank, { 0: ep.localInfo() });
    ep.connect(unb64(table.get(0)!.addrs[1]));
    process.send!({ type: 'result', rank, result: { serving: true } });
    let done = false;
    void released.then(() => (done = true));
    while (!done) {
      ctx.poll();
      for (let h = ctx.recv(); h; h = ctx.recv()) h.reply(h.payload);
      await new Promise((r) => setImmediate(r));
    }
    ctx.close();
    return;
  }
  const good = ctx.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'rank 1' });
  const evil = MALFORMED.map((m) => ctx.createEndpoint({ sendRingSize: 4096, recvRingSize: 4096, peerLabel: `rank 2 (${m.name})` }));
  const table = await exchange(rank, { 1: good.localInfo() }, evil.map((e) => e.localInfo()));
  good.connect(unb64(table.get(1)!.addrs[0]));
  const infos = table.get(2)!.descs.map(unb64);
  evil.forEach((e, k) => e.connect(infos[k]));
  evil.forEach((e, k) => e.call(new Uint8Array([k]), `pending ${k}`, 16));
  const failedCalls: string[] = [];
  const onFailed = (ud: string, err: WeftError) => failedCalls.push(`${ud}: ${err.code}`);
  let echoed = 0;
  const onResp = (ud: string, buf: Uint8Array, off: number, len: number) => {
    if (ud === 'echo' && len === 8 && buf[off] === 0xe7) echoed++;
  };
  const end = performance.now() + 20_000;
  while (evil.some((e) => e.state === 'ready') && performance.now() < end) {
    if (ctx.poll(onResp, onFailed) === 0) await new Promise((r) => setTimeout(r, 1));
  }
  // The process is up and the good endpoint still works.
  const want = Number(args.count ?? 1000);
  let sent = 0;
  const payload = new Uint8Array(8).fill(0xe7);
  while (echoed < want && performance.now() < end) {
    while (sent < want && sent - echoed < 32 && good.call(payload, 'echo', 8) >= 0) sent++;
    if (ctx.poll(onResp, onFailed) === 0) await new Promise((r) => setImmediate(r));
  }
  const outcomes = evil.map((e) => ({ state: e.state, code: e.error?.code, message: e.error?.message ?? '' }));
  process.send!({ type: 'result', rank, result: { outcomes, failedCalls, echoed, goodState: good.state, pid: process.pid } });
  await released;
  ctx.close();
}
