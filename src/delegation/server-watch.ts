/**
 * A client's view of its server's health: the segment's alive flag (a clean close) on
 * every call, and the server thread's liveness (a crash) every LIVENESS_EVERY-th call but at
 * most every LIVENESS_MS, since reading /proc costs microseconds. Waits check both each
 * time they sleep.
 */
import { loadAcquire } from '../host/acquire.js';
import { ServerDisconnected } from './errors.js';
import { ownerAlive, ownerLabel } from './owner.js';

const LIVENESS_EVERY = 1024;
const LIVENESS_MS = 50;
const IDLE_EVERY = 64;

/**
 * When to check a peer's liveness: every `every`-th time (a power of two), at most every
 * LIVENESS_MS. On calls (every 1024th), and on paths that found nothing to do (an empty poll,
 * a call with no free slot: every 64th), where a party that only polls, and never waits,
 * learns of a dead peer.
 */
export class LivenessProbe {
  private n = 0;
  private last = 0;

  constructor(private readonly every: number = IDLE_EVERY) {}

  due(): boolean {
    if ((++this.n & (this.every - 1)) !== 0) return false;
    const now = performance.now();
    if (now - this.last < LIVENESS_MS) return false;
    this.last = now;
    return true;
  }
}

export class ServerWatch {
  private readonly calls = new LivenessProbe(LIVENESS_EVERY);
  private readonly idle = new LivenessProbe(IDLE_EVERY);

  /**
   * @param flag the segment's server-alive flag: `flag[flagIndex]` is 1 while it serves
   * @param i32 the segment, whose word `line` starts the server's line (state, owner)
   * @param who names the client in errors, `name` the segment; `lost` says what a disconnection loses
   */
  constructor(
    private readonly flag: Uint8Array | Int32Array,
    private readonly flagIndex: number,
    private readonly i32: Int32Array,
    private readonly line: number,
    private readonly who: string,
    private readonly name: string,
    private readonly lost: () => string,
  ) {}

  /** On every call: cheap unless the flag dropped or a liveness check is due. */
  onCall(): void {
    if (loadAcquire(this.flag, this.flagIndex) !== 1 || this.calls.due()) this.check('call');
  }

  /**
   * When a poll found nothing or a call found no free slot: the flag each time, liveness now
   * and then (LivenessProbe). Without it a client that polls and never waits spun forever on a
   * dead server.
   */
  onIdle(what: string): void {
    if (loadAcquire(this.flag, this.flagIndex) !== 1 || this.idle.due()) this.check(what);
  }

  /** Throws ServerDisconnected when the server closed or its thread is gone. */
  check(what: string): void {
    const open = Atomics.load(this.flag, this.flagIndex) === 1;
    if (open && Atomics.load(this.i32, this.line) === 1 && ownerAlive(this.i32, this.line)) return;
    throw new ServerDisconnected(`${this.who}: ${what}: the server of ${this.name} (${ownerLabel(this.i32, this.line)}) ${open ? 'died' : 'closed'}; ${this.lost()}; reconnect to a new server`);
  }
}
