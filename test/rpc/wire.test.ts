/**
 * copyrpc wire format, byte for byte: a real endpoint (rank 0) talks to a peer that speaks
 * the protocol by hand over raw NIC verbs (rank 1, test/rpc/workers/wire-peer.ts) and
 * captures every batch. The expected bytes below are written out by hand from
 * docs/wire-format.md: metadata, headers, padding, the wrap marker and the immediates.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { runScenario } from '../../harness/local-group.js';
import { decodeImm, encodeImm, internalAllowance, paddedMessageSize, maxResponseReservation } from '../../src/rpc/index.js';
import { WORKER, providers } from './setup.js';

const unit = suite('copyrpc encoding rules');
unit('padding, imm and internal allowance follow the notes', () => {
  assert.equal([0, 20, 21, 52, 53].map(paddedMessageSize), [32, 32, 64, 64, 96]);
  assert.is(encodeImm(96), 3);
  assert.is(decodeImm(3), 96);
  assert.is(decodeImm(0xffffffff), 0xffffffff * 32);
  assert.is(internalAllowance(0), 64);
  assert.is(internalAllowance(20), 64);
  assert.is(internalAllowance(21), 96);
  assert.is(maxResponseReservation(1 << 20, 1024), 256);
  assert.is(maxResponseReservation(64, 1024), 64);
});
unit.run();

/** Hex of the bytes written out field by field; spaces and `|` are for the reader. */
const h = (s: string) => s.replace(/[\s|]/g, '');
const z = (n: number) => '00'.repeat(n);
const seq = (n: number, start: number) => Buffer.from(new Uint8Array(n).map((_, i) => (start + i) & 255)).toString('hex');
/** 32-byte flow metadata: consumer u64, grant u64, count u32, 12 zero bytes. */
const meta = (consumer: string, grant: string, count: string) => h(consumer) + h(grant) + h(count) + z(12);
/** 12-byte header then payload then zero padding to 32. */
const msg = (id: string, pig: string, len: string, payloadHex: string) => {
  const body = h(id) + h(pig) + h(len) + payloadHex;
  return body + z((64 - ((body.length / 2) % 32)) % 32);
};

const EXPECTED = [
  {
    what: 'batch 1: two calls, ids 0 and 1, allowances 20 and 0 -> 64 B of credit each (piggyback 2 blocks)',
    off: 0, imm: 3, len: 96,
    hex:
      meta('00000000 00000000', '00000000 00000000', '02000000') +
      msg('00000000', '02000000', '05000000', '0102030405') +
      msg('01000000', '02000000', '14000000', seq(20, 0x10)),
  },
  {
    what: 'batch 2: consumer 64 (the peer batch we decoded), ids 1 (reused) and 2, 200-byte payloads padded to 224',
    off: 96, imm: 15, len: 480,
    hex:
      meta('40000000 00000000', '00000000 00000000', '02000000') +
      msg('01000000', '02000000', 'c8000000', seq(200, 0x20)) +
      msg('02000000', '02000000', 'c8000000', seq(200, 0x40)),
  },
  {
    what: 'batch 3: the next message would reach the cycle end (576+256+224 >= 1024), so the batch is sent alone',
    off: 576, imm: 8, len: 256,
    hex: meta('60000000 00000000', '00000000 00000000', '01000000') + msg('03000000', '02000000', 'c8000000', seq(200, 0x60)),
  },
  {
    what: 'wrap marker at 832: 32 bytes, count 0xFFFFFFFF, imm covers the 192-byte skip to the cycle end',
    off: 832, imm: 6, len: 32,
    hex: meta('60000000 00000000', '00000000 00000000', 'ffffffff'),
  },
  {
    what: 'batch 4 at offset 0 of the next cycle',
    off: 0, imm: 8, len: 256,
    hex: meta('60000000 00000000', '00000000 00000000', '01000000') + msg('04000000', '02000000', 'c8000000', seq(200, 0x80)),
  },
  {
    what: 'batch 5: the reply to request 7 (response flag, piggyback echoes its 2 blocks); consumer 128: the request recv() took stays readable until the next poll; grant 64',
    off: 256, imm: 2, len: 64,
    hex: meta('80000000 00000000', '40000000 00000000', '01000000') + msg('07000080', '02000000', '02000000', '1122'),
  },
];

for (const provider of providers) {
  const test = suite(`copyrpc wire format (${provider})`);
  test('batches, headers, padding, wrap marker and imm match the hand-built bytes', async () => {
    const { results } = await runScenario('wire', { n: 2, provider, worker: WORKER, timeoutMs: 60_000 });
    const [sender, capture] = results as [{ ids: number[]; responses: string[]; req: { callId: number; payload: string; allowance: number } }, { captured: { off: number; imm: number; len: number; hex: string }[] }];
    assert.equal(sender.ids, [0, 1, 1, 2, 3, 4], 'call ids (slab indexes, reused after a response)');
    assert.equal(sender.responses, ['B:090807'], 'the hand-built response reached call 1 with its payload');
    assert.equal(sender.req, { callId: 7, payload: 'aabbccdd', allowance: 20 });
    assert.is(capture.captured.length, EXPECTED.length, `captured ${capture.captured.length} batches`);
    EXPECTED.forEach((e, i) => {
      const c = capture.captured[i];
      assert.is(c.off, e.off, `${e.what}: ring offset`);
      assert.is(c.imm, e.imm, `${e.what}: imm`);
      assert.is(c.len, e.len, `${e.what}: bytes written`);
      assert.is(c.hex, e.hex, e.what);
    });
  });
  test.run();
}
