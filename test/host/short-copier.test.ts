/**
 * ShortCopier (src/host/copy.ts): the same bytes as copyToShared whatever the source does
 * between calls: reused (read as words from its second use), rewritten in place, alternating
 * with another, unaligned, of a length not a multiple of 4, resized or detached.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ShortCopier } from '../../src/host/copy.js';

function shared(bytes: number): { u8: Uint8Array; i32: Int32Array } {
  const sab = new SharedArrayBuffer(bytes);
  return { u8: new Uint8Array(sab), i32: new Int32Array(sab) };
}

const fill = (a: Uint8Array, seed: number) => {
  for (let i = 0; i < a.length; i++) a[i] = (seed * 31 + i * 7) & 0xff;
};

test('a reused source is copied exactly, and rewriting it between calls is seen', () => {
  const c = new ShortCopier();
  const d = shared(4096);
  const src = new Uint8Array(32);
  for (let call = 0; call < 20; call++) {
    fill(src, call);
    const at = (call % 8) * 64;
    c.copy(d.u8, d.i32, at, src, src.length);
    assert.equal(d.u8.subarray(at, at + 32), src, `call ${call}`);
  }
});

test('lengths that are not a multiple of 4, and shorter copies of a longer source', () => {
  const c = new ShortCopier();
  const d = shared(4096);
  const src = new Uint8Array(63);
  fill(src, 3);
  for (const len of [63, 63, 62, 61, 5, 4, 3, 1, 0, 63]) {
    d.u8.fill(0xee);
    c.copy(d.u8, d.i32, 128, src, len);
    assert.equal(d.u8.subarray(128, 128 + len), src.subarray(0, len), `len ${len}`);
    assert.is(d.u8[128 + len], 0xee, `byte after a ${len}-byte copy untouched`);
  }
});

test('a reused source longer than the short-copy bound is copied exactly, and no view is made for it', () => {
  const c = new ShortCopier();
  const d = shared(8192);
  const src = new Uint8Array(4096);
  for (let call = 0; call < 4; call++) {
    fill(src, call);
    c.copy(d.u8, d.i32, 64, src, src.length);
    assert.equal(d.u8.subarray(64, 64 + 4096), src, `call ${call}`);
    c.copy(d.u8, d.i32, 64, src, 100);
    assert.equal(d.u8.subarray(64, 164), src.subarray(0, 100), `call ${call}, 100 bytes`);
  }
  assert.is((c as unknown as { words: Int32Array | null }).words, null, 'a view was made for copies that never use one');
});

test('alternating sources, an unaligned one, and one inside another buffer', () => {
  const c = new ShortCopier();
  const d = shared(4096);
  const backing = new Uint8Array(200);
  fill(backing, 9);
  const own = new Uint8Array(40);
  fill(own, 1);
  const inShared = new Uint8Array(shared(64).u8.buffer, 4, 40);
  fill(inShared, 2);
  const sources = [own, backing.subarray(1, 41), backing.subarray(8, 48), inShared];
  for (const [call, i] of [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 0, 2, 0, 2, 1, 3, 1].entries()) {
    const s = sources[i];
    c.copy(d.u8, d.i32, 256, s, s.length);
    assert.equal(d.u8.subarray(256, 256 + s.length), s, `call ${call} (source ${i})`);
  }
});

test('a source whose buffer grew, shrank or was detached is never read through a stale view', () => {
  const c = new ShortCopier();
  const d = shared(4096);
  // A resizable ArrayBuffer (ES2024; TypeScript's lib here predates it).
  type Resizable = ArrayBuffer & { resize(bytes: number): void };
  const ab = new (ArrayBuffer as unknown as new (bytes: number, o: { maxByteLength: number }) => Resizable)(16, { maxByteLength: 64 });
  const src = new Uint8Array(ab); // length-tracking
  fill(src, 1);
  c.copy(d.u8, d.i32, 0, src, src.length);
  c.copy(d.u8, d.i32, 0, src, src.length); // second use in a row: the word view is made
  ab.resize(40);
  fill(src, 2);
  c.copy(d.u8, d.i32, 64, src, src.length);
  assert.is(src.length, 40);
  assert.equal(d.u8.subarray(64, 104), src);
  ab.resize(8);
  fill(src, 3);
  c.copy(d.u8, d.i32, 128, src, src.length);
  assert.equal(d.u8.subarray(128, 136), src);
  const moved = new Uint8Array(48);
  fill(moved, 4);
  c.copy(d.u8, d.i32, 192, moved, 48);
  c.copy(d.u8, d.i32, 192, moved, 48);
  structuredClone(moved.buffer, { transfer: [moved.buffer as ArrayBuffer] }); // detaches: length 0
  d.u8.fill(0xee, 256, 320);
  c.copy(d.u8, d.i32, 256, moved, moved.length);
  assert.is(moved.length, 0);
  assert.is(d.u8[256], 0xee, 'nothing copied from a detached source');
});

test.run();
