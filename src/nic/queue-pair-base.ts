/**
 * What every provider's queue pair shares: the public post calls (which funnel into the
 * provider's `post`), the argument checks done before anything moves, and the names of
 * operations in messages.
 */
import { WeftError } from '../errors.js';
import { Opcode, type MemoryRegion, type RemoteRegion } from './types.js';

export const OP_NAMES = ['', 'WRITE', 'WRITE_IMM', 'READ'];

export abstract class QueuePairBase {
  abstract readonly peerLabel: string;

  /** How the local side is called in messages (the device label). */
  protected abstract localLabel(): string;

  /** Runs or queues one operation; arguments are already known to be well-formed numbers. */
  protected abstract post(op: number, local: MemoryRegion, lOff: number, remote: RemoteRegion, rOff: number, len: number, imm: number, wrId: number, signaled: boolean): void;

  postWriteImm(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number, imm: number, wrId: number, signaled: boolean): void {
    this.post(Opcode.WRITE_IMM, local, localOffset, remote, remoteOffset, length, imm, wrId, signaled);
  }

  postWrite(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number, wrId: number, signaled: boolean): void {
    this.post(Opcode.WRITE, local, localOffset, remote, remoteOffset, length, 0, wrId, signaled);
  }

  postRead(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number, wrId: number, signaled: boolean): void {
    this.post(Opcode.READ, local, localOffset, remote, remoteOffset, length, 0, wrId, signaled);
  }

  /** Throws EINVAL unless the local range lies inside the region and the numbers are u32. */
  protected checkRanges(op: number, localLength: number, lOff: number, len: number, rOff: number): void {
    if ((len >>> 0) !== len || (lOff >>> 0) !== lOff || lOff + len > localLength) this.badArg(op, `local range [${lOff}, ${lOff}+${len}) is outside the ${localLength}-byte region`);
    if ((rOff >>> 0) !== rOff) this.badArg(op, `remoteOffset must be a non-negative integer, got ${rOff}`);
  }

  protected badArg(op: number, what: string): never {
    throw new WeftError('EINVAL', `${this.localLabel()}: ${OP_NAMES[op]} toward ${this.peerLabel}: ${what}`);
  }
}
