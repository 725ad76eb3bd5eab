/**
 * A peer device's control segment as mapped by this process: its completion ring, credit
 * grants, memory-region table and doorbell, plus the peer's data segments mapped on demand.
 */
import { WeftError } from '../../errors.js';
import { ringBell } from '../../host/futex-bell.js';
import { isPeerAlive, type ProcessIdentity } from '../../host/identity.js';
import { openSegment } from '../../host/segments.js';
import * as L from './layout.js';

export class PeerControl {
  readonly i32: Int32Array;
  readonly mask: number;
  readonly nonce: number;
  private readonly segments = new Map<number, SharedArrayBuffer>();
  /** QPs of this process connected to the peer (mapping is shared and closed with the last). */
  refs = 0;

  constructor(readonly prefix: string, readonly identity: ProcessIdentity, readonly label: string) {
    let sab: SharedArrayBuffer;
    try {
      sab = openSegment(`${prefix}.ctl`);
    } catch (err) {
      throw new WeftError('EPEERDEAD', `cannot map the control segment of ${label} (${prefix}.ctl): ${(err as Error).message}; is the peer alive and on this host?`, { cause: err });
    }
    const i32 = new Int32Array(sab);
    const depth = i32.length > L.H_CQ_DEPTH ? i32[L.H_CQ_DEPTH] : 0;
    if (
      i32.length < L.CQ_RING ||
      i32[L.H_MAGIC] !== L.CTL_MAGIC ||
      i32[L.H_VERSION] !== L.CTL_VERSION ||
      i32[L.H_MAX_QPS] !== L.MAX_QPS ||
      i32[L.H_MAX_MRS] !== L.MAX_MRS ||
      depth <= 0 ||
      (depth & (depth - 1)) !== 0 ||
      sab.byteLength < L.controlBytes(depth)
    ) {
      throw new WeftError('EPROTO', `the control segment of ${label} (${prefix}.ctl) has a bad header: a different weft version, or not a weft segment`);
    }
    this.i32 = i32;
    this.mask = depth - 1;
    this.nonce = i32[L.H_NONCE];
  }

  /** Wakes the peer if it sleeps on its doorbell (a syscall only when it does). */
  ring(): void {
    ringBell(this.i32, L.SLEEPING, L.DOORBELL);
  }

  /** Maps (once) the peer's data segment `segId`. */
  segment(segId: number): SharedArrayBuffer {
    let sab = this.segments.get(segId);
    if (!sab) {
      const name = `${this.prefix}.m${segId}`;
      try {
        sab = openSegment(name);
      } catch (err) {
        // A peer's advertised memory disappears when its process exits (it unlinks its
        // segments on the way out, before the process is gone).
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
          throw new WeftError('EPEERDEAD', `${this.label} is gone: its memory segment ${name} was removed (the peer exited, or deregistered that memory)`, { cause: err });
        }
        throw err;
      }
      this.segments.set(segId, sab);
    }
    return sab;
  }

  alive(): boolean {
    return isPeerAlive(this.identity);
  }
}
