/**
 * The receiving side of the stream tests (conformance `stream`, ofi-native `sink`): the
 * sender posts WRITE_IMMs whose length, source offset in a seeded pool and immediate come
 * from prng(99), into slot `i % slots` of the receiver's ring; this checks every one.
 */
import { prng, randomPool } from '../../harness/data.js';

export const STREAM_POOL_BYTES = 1 << 20;

export class StreamCheck {
  received = 0;
  /** The first few mismatches, for the test's message. */
  readonly errors: string[] = [];
  private readonly pool = randomPool(STREAM_POOL_BYTES, 7);
  private readonly gen = prng(99);

  constructor(
    private readonly ring: Uint8Array,
    private readonly slots: number,
    private readonly maxLen: number,
  ) {}

  /** The next WRITE_IMM arrived with immediate `imm` and `byteLength` bytes. */
  check(imm: number, byteLength: number): void {
    const { gen, maxLen } = this;
    const len = gen() % (maxLen + 1);
    const off = gen() % (STREAM_POOL_BYTES - maxLen);
    const want = gen();
    const slot = (this.received % this.slots) * maxLen;
    if (imm !== want || byteLength !== len) {
      this.error(`msg ${this.received}: imm ${imm} len ${byteLength}, want imm ${want} len ${len}`);
    } else if (Buffer.compare(this.ring.subarray(slot, slot + len), this.pool.subarray(off, off + len)) !== 0) {
      this.error(`msg ${this.received}: bytes differ`);
    }
    this.received++;
  }

  private error(text: string): void {
    if (this.errors.length < 5) this.errors.push(text);
  }
}
