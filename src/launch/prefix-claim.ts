/**
 * A launcher's claim on its job's prefix in a shared store. Two jobs started with the same
 * `--prefix` used to meet inside the store: ranks of one connected to ranks of the other,
 * then both failed with EEXIST, and the failed jobs' keys blocked the prefix for 24 hours.
 * Now every launcher writes `<prefix>.launcher/<node rank>` once before it starts a rank: a
 * second job with that prefix stops before any rank runs, with an error naming the launcher
 * that holds it. A claim whose launcher is dead (same host: its pid and start time are gone)
 * is taken over, with the dead job's keys. The claim is removed when the job ends, and the
 * prefix is purged after a failed job (a clean job's last rank purges it already).
 */
import { hostname } from 'node:os';
import { WeftError } from '../errors.js';
import { isPeerAlive, localIdentity, type ProcessIdentity } from '../host/identity.js';
import { openStore } from '../rendezvous/open.js';
import { PrefixStore } from '../rendezvous/prefix-store.js';
import type { Store } from '../rendezvous/store.js';
import { redactUrl } from '../rendezvous/stores/redis/store.js';
import { sameBytes } from '../rendezvous/stores/shared/values.js';

interface Holder {
  identity: ProcessIdentity;
  host: string;
  since: string;
}

/** The claim of one launcher (release it when the job ends). */
export class PrefixClaim {
  private constructor(
    /** Where the claims live: beside the job's keys, so purging the job keeps the claim. */
    private readonly claims: PrefixStore,
    private readonly job: PrefixStore,
    private readonly key: string,
    private readonly mine: Uint8Array,
  ) {}

  /**
   * Claims `prefix` for node `nodeRank` of a job in the store at `url`; throws EEXIST naming
   * the live launcher that holds it.
   */
  static async take(url: string, prefix: string, nodeRank: number, timeoutMs = 10_000): Promise<PrefixClaim> {
    const raw: Store = await openStore(url, { timeoutMs });
    const store = new PrefixStore(`${prefix}.launcher`, raw);
    const job = new PrefixStore(prefix, raw, { closeInner: false });
    const key = String(nodeRank);
    const holder: Holder = { identity: localIdentity(), host: hostname(), since: new Date().toISOString() };
    const mine = new TextEncoder().encode(JSON.stringify(holder));
    try {
      let stored = await store.compareSet(key, new Uint8Array(0), mine);
      if (!sameBytes(stored, mine)) {
        const other = parse(stored);
        if (other && !isPeerAlive(other.identity)) {
          // Its launcher died (SIGKILL, a crash) on this host: its job is over; take its place.
          stored = await store.compareSet(key, stored, mine);
          if (sameBytes(stored, mine)) {
            // Its ranks end within the watchdog's grace (1.5 s after their launcher died): purge after.
            await new Promise((r) => setTimeout(r, 2000));
            await job.purge().catch(() => 0);
          }
        }
        if (!sameBytes(stored, mine)) {
          const holder = parse(stored) ?? other;
          const who = holder ? `the launcher pid ${holder.identity.pid} on ${holder.host}, since ${holder.since}` : 'another launcher';
          throw new WeftError('EEXIST', `weft run: the prefix '${prefix}' (node rank ${nodeRank}) is in use in ${redactUrl(url)} by ${who}: two jobs with one prefix would connect to each other's ranks; give this job another --prefix (or none: a fresh one is made), or end that job`);
        }
      }
      return new PrefixClaim(store, job, key, mine);
    } catch (err) {
      await raw.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Where this host's ranks sit in a job on `nnodes` hosts that may run different numbers of
   * ranks: every launcher publishes its count, waits for the others' (within `timeoutMs`),
   * and numbers its ranks after those of the hosts with a lower node rank.
   */
  async nodeLayout(nnodes: number, nodeRank: number, ranks: number, timeoutMs: number): Promise<{ firstRank: number; world: number }> {
    const mine = new Uint8Array(4);
    new DataView(mine.buffer).setUint32(0, ranks, true);
    await this.claims.set(`ranks/${nodeRank}`, mine);
    const keys = [...Array(nnodes).keys()].map((n) => `ranks/${n}`);
    let counts: Uint8Array[];
    try {
      counts = await this.claims.multiGet(keys, { timeoutMs });
    } catch (err) {
      const missing: number[] = [];
      for (let n = 0; n < nnodes; n++) if (!(await this.claims.get(keys[n], { timeoutMs: 0 }).then(() => true, () => false))) missing.push(n);
      throw new WeftError('ETIMEDOUT', `weft run: node ${nodeRank}: the launchers of nodes ${missing.join(', ')} did not start within ${timeoutMs} ms (each host runs \`weft run --nnodes ${nnodes} --node-rank R\` with the same store and --prefix)`, { cause: err });
    }
    let firstRank = 0;
    let world = 0;
    counts.forEach((b, n) => {
      if (b.byteLength !== 4) throw new WeftError('EPROTO', `weft run: node ${n}'s rank count in the store is malformed; use a fresh --prefix`);
      const c = new DataView(b.buffer, b.byteOffset, 4).getUint32(0, true);
      if (n < nodeRank) firstRank += c;
      world += c;
    });
    return { firstRank, world };
  }

  /** Ends the claim; after a failed job also deletes the job's keys (node rank 0). */
  async release(purge: boolean): Promise<void> {
    try {
      // Stores without purge() (none of weft's) keep the keys: the next job then fails with EEXIST.
      if (purge) await this.job.purge().catch(() => 0);
      const stored = await this.claims.get(this.key, { timeoutMs: 0 }).catch(() => undefined);
      if (stored && sameBytes(stored, this.mine)) {
        await this.claims.delete(`ranks/${this.key}`);
        await this.claims.delete(this.key);
      }
    } catch {
      // The store is gone: nothing left to release.
    } finally {
      await this.claims.close().catch(() => {});
    }
  }
}


function parse(bytes: Uint8Array): Holder | undefined {
  try {
    const h = JSON.parse(new TextDecoder().decode(bytes)) as Holder;
    return h && typeof h.identity?.pid === 'number' && typeof h.identity.hostId === 'string' ? h : undefined;
  } catch {
    return undefined;
  }
}
