/**
 * The SegmentDesc JSON a rank publishes (src/transfer/segment-desc.ts): what decodes, and that
 * every malformed or hostile record from the store is an EPROTO naming the key and the field,
 * never a descriptor the engine would act on.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeSegmentDesc, encodeSegmentDesc, SEGMENT_PROTOCOL, type SegmentDesc } from '../../src/transfer/index.js';

const good = (): SegmentDesc => ({
  protocol: SEGMENT_PROTOCOL,
  instance: '1234-abc',
  name: 'node-a:0',
  rank: 0,
  host: 'node-a',
  version: 3,
  devices: [{ name: 'nic0', provider: 'shm', lid: 0, gid: '00112233445566778899aabbccddeeff' }],
  priority_matrix: { 'cpu:0': [['nic0'], []] },
  buffers: [
    { name: 'cpu:0', addr: 2 ** 40 + 65536, length: 4096, rkey: ['0a0b'], offset: 0 },
    { name: 'cpu:0', addr: 2 ** 40, length: 65536, rkey: ['ff'], offset: 0 },
  ],
});

test('a descriptor round-trips, buffers sorted by address', () => {
  const d = decodeSegmentDesc(encodeSegmentDesc(good()), 'k');
  assert.is(d.name, 'node-a:0');
  assert.equal(d.buffers.map((b) => b.addr), [2 ** 40, 2 ** 40 + 65536]);
  assert.equal(d.priority_matrix, { 'cpu:0': [['nic0'], []] });
});

const hostile: [string, (d: Record<string, unknown>) => unknown, RegExp][] = [
  ['not JSON', () => '{"protocol":', /not JSON/],
  ['an array', () => [], /not an object/],
  ['another protocol', (d) => ({ ...d, protocol: 'mooncake' }), /protocol/],
  ['a negative rank', (d) => ({ ...d, rank: -1 }), /rank is not/],
  ['a fractional version', (d) => ({ ...d, version: 1.5 }), /version is not/],
  ['no devices', (d) => ({ ...d, devices: [] }), /devices/],
  ['a matrix naming an unknown device', (d) => ({ ...d, priority_matrix: { 'cpu:0': [['mlx5_0'], []] } }), /priority_matrix/],
  ['a buffer past 2^53', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: 2 ** 53 - 10, length: 100, rkey: ['00'], offset: 0 }] }), /past 2\^53|safe integer/],
  ['an empty buffer', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: 4096, length: 0, rkey: ['00'], offset: 0 }] }), /empty/],
  ['overlapping buffers', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: 4096, length: 100, rkey: ['00'], offset: 0 }, { name: 'cpu:0', addr: 4100, length: 100, rkey: ['00'], offset: 0 }] }), /overlap/],
  ['an rkey that is not hex', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: 4096, length: 100, rkey: ['zz'], offset: 0 }] }), /hex/],
  ['one rkey too many', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: 4096, length: 100, rkey: ['00', '11'], offset: 0 }] }), /one key per device/],
  ['a string address', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: '4096', length: 100, rkey: ['00'], offset: 0 }] }), /addr/],
  ['a huge name', (d) => ({ ...d, name: 'x'.repeat(5000) }), /name/],
  ['no instance', (d) => ({ ...d, instance: undefined }), /instance/],
  ['a buffer past 4 GiB of its region', (d) => ({ ...d, buffers: [{ name: 'cpu:0', addr: 4096, length: 100, rkey: ['00'], offset: 2 ** 32 - 50 }] }), /4 GiB/],
];

for (const [what, mutate, why] of hostile) {
  test(`refused: ${what}`, () => {
    const v = mutate(good() as unknown as Record<string, unknown>);
    const bytes = new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));
    try {
      decodeSegmentDesc(bytes, 'job/transfer/segment/x');
      assert.unreachable('accepted');
    } catch (err) {
      assert.is((err as { code?: string }).code, 'EPROTO', (err as Error).message);
      assert.match((err as Error).message, /job\/transfer\/segment\/x/);
      assert.match((err as Error).message, why);
    }
  });
}

test('a location named __proto__ stays an own key and does not touch the prototype', () => {
  const d = good() as unknown as Record<string, unknown>;
  const text = JSON.stringify(d).replace('"priority_matrix":{', '"priority_matrix":{"__proto__":[["nic0"],[]],');
  const out = decodeSegmentDesc(new TextEncoder().encode(text), 'k');
  assert.ok(Object.hasOwn(out.priority_matrix, '__proto__'));
  assert.is(Object.getPrototypeOf(out.priority_matrix), Object.prototype);
});

test('invalid UTF-8 is refused', () => {
  try {
    decodeSegmentDesc(new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), 'k');
    assert.unreachable('accepted');
  } catch (err) {
    assert.is((err as { code?: string }).code, 'EPROTO');
  }
});

test.run();
