/**
 * The wait()/waitSync() pair every party of the delegation layer offers (servers wait for
 * requests, clients for responses, Flux nodes for either), through the one waiting loop.
 */
import type { Doorbell, WaitPlan } from '../host/wait.js';
import { waitAsync, waitSync } from '../host/wait.js';
import type { WaitOptions } from '../util/deadline.js';

export abstract class Waiter {
  /** What a sleeping wait sleeps on (this party's futex in the segment). */
  protected abstract readonly bell: Doorbell;
  /** Whether the wait is over (something arrived, or the party closed). */
  abstract ready(): boolean;
  /** The plan of one wait: oversubscription, deadline and name, liveness probe. */
  protected abstract plan(what: string, options: WaitOptions): WaitPlan;
  /** Throws when a wait could never end (a client with nothing in flight). */
  protected checkWait(_what: string): void {}

  private readonly isReady = () => this.ready();

  /** Blocks until ready(): spins, yields, then sleeps on the futex; throws on timeout, abort or a dead peer. */
  waitSync(options: WaitOptions = {}): void {
    if (this.ready()) return;
    this.checkWait('waitSync');
    waitSync(this.isReady, this.bell, this.plan('waitSync', options));
  }

  /** Resolves when ready(); the event loop runs meanwhile. Rejects as waitSync throws. */
  wait(options: WaitOptions = {}): Promise<void> {
    // A promise-returning call rejects; it never throws at the caller.
    try {
      if (this.ready()) return Promise.resolve();
      this.checkWait('wait');
      return waitAsync(this.isReady, this.bell, this.plan('wait', options));
    } catch (err) {
      return Promise.reject(err);
    }
  }
}
