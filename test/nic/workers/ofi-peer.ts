/**
 * The remote side of test/nic/ofi-native.test.ts, in its own process:
 * `node ofi-peer.js <provider> <role> <json options>`. It opens an ofi device, one region and
 * one QP, sends {addr, desc} to the parent over IPC, connects to the parent's address, then
 * plays its role. Roles:
 *   sink      counts WRITE_IMMs and checks each against the shared pseudo-random script
 *   target    a passive region (filled with 0x5a), polled for progress; answers 'check'
 *   echo      answers every WRITE_IMM with a WRITE_IMM of the same length (ping-pong)
 *   count     counts WRITE_IMMs (autoRepost) and reports when `count` arrived
 *   slow      recvCredits 4, no autoRepost, reposts one credit per message, sleeps now and then
 *   mute      connects and never polls (to be SIGKILLed)
 */
import { createDevice, CompletionBatch, Opcode, Status, statusName, type QueuePair } from '../../../src/nic/index.js';
import { StreamCheck } from '../stream-check.js';

const [provider, role, optsJson] = process.argv.slice(2);
const opts = JSON.parse(optsJson ?? '{}') as Record<string, number>;
const send = (m: unknown) => process.send!(m);
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));

type Msg = { type: string; addr?: string; desc?: string };
const inbox: Msg[] = [];
let wake: (() => void) | undefined;
process.on('message', (m: Msg) => {
  inbox.push(m);
  wake?.();
});
function next(): Promise<Msg> {
  if (inbox.length) return Promise.resolve(inbox.shift()!);
  return new Promise((r) => (wake = () => ((wake = undefined), r(inbox.shift()!))));
}

async function main(): Promise<void> {
  const credits = role === 'slow' ? 4 : role === 'mute' ? 2 : Number(opts.recvCredits ?? 256);
  const dev = await createDevice({ provider, label: 'peer', autoRepost: role !== 'slow' && role !== 'sink' });
  const mr = dev.allocate(Number(opts.bytes ?? 1 << 20));
  const mr2 = dev.allocate(4096);
  mr.bytes.fill(0x5a);
  mr2.bytes.fill(0x5a);
  const qp: QueuePair = dev.createQueuePair({ peerLabel: 'parent', recvCredits: credits });
  send({ type: 'hello', addr: hex(qp.address()), desc: hex(mr.descriptor()), desc2: hex(mr2.descriptor()) });
  const c = await next();
  qp.connect(unhex(c.addr!));
  const remote = c.desc ? qp.importRegion(unhex(c.desc)) : undefined;
  send({ type: 'ready' });
  const batch = new CompletionBatch(256);

  if (role === 'mute') {
    await new Promise(() => {});
  }
  if (role === 'sink') {
    // The parent sends `count` messages: len, source offset and imm from prng(99), into slot i % slots.
    const count = Number(opts.count), slots = Number(opts.slots), maxLen = Number(opts.maxLen);
    const stream = new StreamCheck(mr.bytes, slots, maxLen);
    const errors = stream.errors;
    while (stream.received < count) {
      const k = dev.cq.poll(batch);
      for (let i = 0; i < k; i++) {
        if (batch.status[i] !== Status.SUCCESS) errors.push(`${statusName(batch.status[i])}: ${batch.errors[i]?.message}`);
        if (batch.opcode[i] !== Opcode.RECV_WRITE_IMM) continue;
        stream.check(batch.imm[i], batch.byteLength[i]);
        qp.postRecv(1);
      }
      if (k === 0) await dev.cq.wait({ timeoutMs: 30_000 });
    }
    send({ type: 'result', received: stream.received, errors });
  }
  if (role === 'slow') {
    const count = Number(opts.count);
    const one = new CompletionBatch(1);
    const words = new Uint32Array(mr.bytes.buffer, mr.bytes.byteOffset, 16);
    let got = 0, wrong = 0;
    while (got < count) {
      if (dev.cq.poll(one) === 0) {
        await dev.cq.wait({ timeoutMs: 30_000 });
        continue;
      }
      if (one.status[0] !== Status.SUCCESS || one.opcode[0] !== Opcode.RECV_WRITE_IMM) throw new Error(`slow: ${statusName(one.status[0])} ${one.errors[0]?.message}`);
      if (one.imm[0] !== got || words[(got % 4) * 2] !== got) wrong++;
      got++;
      if (got % 97 === 0) await new Promise((r) => setTimeout(r, 2));
      qp.postRecv(1);
    }
    await new Promise((r) => setTimeout(r, 200));
    const extra = dev.cq.poll(batch);
    send({ type: 'result', received: got, wrong, extra });
  }
  if (role === 'echo' || role === 'count') {
    // Busy-polls (yielding now and then so IPC gets through) until the parent says stop.
    let idle = 0;
    let counted = 0;
    for (;;) {
      const k = dev.cq.poll(batch);
      for (let i = 0; i < k; i++) {
        if (batch.opcode[i] !== Opcode.RECV_WRITE_IMM) continue;
        counted++;
        if (role === 'echo') qp.postWriteImm(mr, 0, remote!, 0, batch.byteLength[i], batch.imm[i], 0, false);
        else if (counted === Number(opts.count)) send({ type: 'result', counted });
      }
      if (k === 0 && ++idle % 4096 === 0) {
        await new Promise((r) => setImmediate(r));
        if (inbox.length) break;
      }
    }
  }
  if (role === 'target') {
    // Progress for incoming READs and writes; answer 'check' and 'dereg2'.
    for (let spin = 0; ; spin++) {
      dev.cq.poll(batch);
      if ((spin & 255) !== 0) continue;
      if (inbox.length) {
        // 'stop' stays in the inbox for the next() below (taking it here left that waiting for
        // a message that never came, until the parent's SIGKILL).
        if (inbox[0].type === 'stop') break;
        const m = inbox.shift()!;
        if (m.type === 'check') send({ type: 'checked', untouched: mr.bytes.every((b) => b === 0x5a) && mr2.bytes.every((b) => b === 0x5a), head: hex(mr.bytes.subarray(0, 16)) });
        else if (m.type === 'dereg2') {
          mr2.deregister();
          send({ type: 'dereged' });
        } else if (m.type === 'set') {
          mr.bytes.fill(0x5a);
          send({ type: 'done' });
        } else throw new Error(`target: unexpected message '${m.type}'`);
      }
      await new Promise((r) => setImmediate(r));
    }
  }
  await next();
  dev.close();
  process.exit(0);
}

main().catch((err: Error) => {
  send({ type: 'error', message: err.stack ?? String(err) });
  setTimeout(() => process.exit(1), 50);
});
