/**
 * Keeps this process's fabric moving while a transfer engine is open, so that peers' one-sided
 * READs and WRITEs of its memory complete with no call from its owner. On shared memory the
 * initiator's CPU moves the bytes and nothing is needed; libfabric's tcp provider (and other
 * software providers) serve a peer's RMA only while the target polls its completion queue.
 *
 * It is one waiter in the completion router's shared progress loop (the one waiting loop:
 * spin, yield, then sleep on the CQ's doorbell), not a loop of its own: when nothing arrives
 * the process sleeps, and every other waiter's progress serves peers too.
 */
import type { CompletionRouter } from '../nic/completion-router.js';
import { Deadline } from '../util/deadline.js';

/** The waiter re-arms this often (its deadline only bounds one wait of the shared loop). */
const REARM_MS = 60_000;

export class PassiveProgress {
  private stopped = false;
  private readonly done = () => {
    this.afterPoll();
    return this.stopped;
  };

  constructor(
    private readonly router: CompletionRouter,
    private readonly what: string,
    /** Runs after every poll of the shared loop (the engine's key retirement: key-revocation.ts). */
    private readonly afterPoll: () => void = () => {},
  ) {
    void this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        await this.router.waitAsync(this.done, { deadline: new Deadline(REARM_MS), what: this.what });
      } catch (err) {
        // A timeout only re-arms; anything else means the device is going away.
        if ((err as { code?: string }).code !== 'ETIMEDOUT') this.stopped = true;
      }
    }
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.router.kick();
  }
}
