/**
 * A launcher's claim on its job's prefix in a shared store. Two jobs started with the same
 * `--prefix` used to meet inside the store: ranks of one connected to ranks of the other,
 * then both failed with EEXIST, and the failed jobs' keys blocked the prefix for 24 hours.
 * Now every launcher writes `<prefix>.launcher/<node rank>` once before it starts a rank: a
 * second job with that prefix stops before any rank runs, with an error naming the launcher
 * that holds it. A claim whose launcher is dead (same host: its pid and start time are gone)
 * is taken over, with the dead job's keys. The claim is removed when the job ends, and the
 * prefix is purged after a failed job (a clean job's last rank purges it already); of a job on
 * several hosts, by the next job's node 0 once all its launchers have joined (`join()`).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import path from 'node:path';
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

  /** The node rank whose `join/` entry this launcher wrote. */
  private joined: number | undefined;

  /**
   * Claims `prefix` for node `nodeRank` of a job in the store at `url`; throws EEXIST naming
   * the live launcher that holds it. `timeoutMs` and `signal` bound reaching the store.
   */
  static async take(url: string, prefix: string, nodeRank: number, timeoutMs = 10_000, signal?: AbortSignal): Promise<PrefixClaim> {
    const raw: Store = await openStore(url, { timeoutMs, signal });
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
   * The launchers of a job on `nnodes` hosts agree on where each host's ranks sit (hosts may
   * run different numbers of ranks) and that they are one job, within `timeoutMs`.
   *
   * Why a handshake and not each launcher publishing its count: entries in the store can be
   * left by a launcher that died (SIGKILL, a reboot), and a live launcher cannot tell them from
   * a fresh one on another host. So each launcher writes `join/<n>` with a nonce of its own;
   * node 0 publishes a `layout` naming the nonces it read, waits until every launcher has
   * acknowledged that layout (a dead one never does; when a fresh launcher replaces its entry,
   * node 0 publishes again), deletes whatever a failed earlier job left under the prefix (each
   * of that job's launchers has ended: this job holds every node's claim), and writes `start`.
   * A launcher starts its ranks when `start` names the layout that holds its own nonce.
   * Launchers that disagree on `--nnodes` or the script are two jobs on one prefix: node 0
   * publishes the disagreement and both stop at once.
   */
  async join(o: { nnodes: number; nodeRank: number; ranks: number; script: string; timeoutMs: number; signal?: AbortSignal }): Promise<{ firstRank: number; world: number }> {
    const deadline = performance.now() + o.timeoutMs;
    const mine: JoinEntry = { nonce: randomBytes(8).toString('hex'), ranks: o.ranks, nnodes: o.nnodes, script: path.basename(o.script), host: hostname(), pid: process.pid };
    await this.claims.set(`join/${o.nodeRank}`, encode(mine));
    this.joined = o.nodeRank;
    const layout = o.nodeRank === 0 ? await this.lead(mine, o, deadline) : await this.follow(mine, o, deadline);
    let firstRank = 0;
    for (let n = 0; n < o.nodeRank; n++) firstRank += layout.ranks[n];
    return { firstRank, world: layout.ranks.reduce((a, b) => a + b, 0) };
  }

  /** Node 0's side of join(). */
  private async lead(mine: JoinEntry, o: { nnodes: number; timeoutMs: number; signal?: AbortSignal }, deadline: number): Promise<Layout> {
    await this.claims.delete('start');
    for (;;) {
      // Every node's entry, checked as it comes: a disagreement stops the job at once, not
      // after the join timeout.
      const entries: JoinEntry[] = [mine];
      for (let n = 1, pause = 20; n < o.nnodes; ) {
        const e = await this.readEntry(n);
        if (e) {
          const why = disagreement(mine, e, n);
          if (why) {
            await this.claims.set('layout', encode({ instance: '', nonces: entries.map((x) => x.nonce).concat(e.nonce), ranks: [], error: why } satisfies Layout)).catch(() => {});
            throw new WeftError('EINVAL', `weft run: node 0: ${why}`);
          }
          entries.push(e);
          n++;
          continue;
        }
        if (performance.now() >= deadline) {
          const missing: number[] = [];
          for (let m = n; m < o.nnodes; m++) if (!(await this.readEntry(m))) missing.push(m);
          throw new WeftError('ETIMEDOUT', `weft run: node 0: the launchers of nodes ${missing.join(', ')} did not start within ${o.timeoutMs} ms (each host runs \`weft run --nnodes ${o.nnodes} --node-rank R\` with the same store and --prefix)`);
        }
        await pauseFor(pause, o.signal);
        pause = Math.min(pause * 2, 250);
      }
      const layout: Layout = { instance: randomBytes(8).toString('hex'), nonces: entries.map((e) => e.nonce), ranks: entries.map((e) => e.ranks) };
      await this.claims.set('layout', encode(layout));
      // Until every launcher acknowledged, in node order; the entry of the node waited for
      // replaced meanwhile (a launcher that died, and one that took its place) means a new layout.
      let n = 1;
      for (let pause = 20; n < o.nnodes; ) {
        if (await this.acked(n, layout)) {
          n++;
          continue;
        }
        const e = await this.readEntry(n);
        if (e?.nonce !== layout.nonces[n]) break;
        if (performance.now() >= deadline) throw new WeftError('ETIMEDOUT', `weft run: node 0: the launcher of node ${n} (${e.host}, pid ${e.pid}) did not acknowledge the job's layout within ${o.timeoutMs} ms; is it still running?`);
        await pauseFor(pause, o.signal);
        pause = Math.min(pause * 2, 250);
      }
      if (n < o.nnodes) continue;
      // Each launcher of any earlier job on this prefix has ended (this job holds every node's
      // claim), so what they left, ranks' keys of a failed job, can go.
      await this.job.purge().catch(() => 0);
      await this.claims.set('start', new TextEncoder().encode(layout.instance));
      return layout;
    }
  }

  /** A follower's side of join(): waits for a layout naming its nonce, acknowledges it, then for `start`. */
  private async follow(mine: JoinEntry, o: { nnodes: number; nodeRank: number; timeoutMs: number; signal?: AbortSignal }, deadline: number): Promise<Layout> {
    let acked = '';
    for (let pause = 20; ; ) {
      const layout = await this.claims.get('layout', { timeoutMs: 0 }).then((b) => parseLayout(b), () => undefined);
      if (layout?.nonces[o.nodeRank] === mine.nonce) {
        if (layout.error) throw new WeftError('EINVAL', `weft run: node ${o.nodeRank}: ${layout.error}`);
        if (layout.ranks.length !== o.nnodes) throw new WeftError('EPROTO', `weft run: node ${o.nodeRank}: the job's layout in the store is malformed; use a fresh --prefix`);
        if (acked !== layout.instance) {
          await this.claims.set(`ack/${o.nodeRank}`, new TextEncoder().encode(layout.instance));
          acked = layout.instance;
          pause = 20;
        }
        const start = await this.claims.get('start', { timeoutMs: 0 }).then(decodeText, () => '');
        if (start === layout.instance) return layout;
      }
      if (performance.now() >= deadline) {
        const leader = await this.readEntry(0);
        throw new WeftError('ETIMEDOUT', `weft run: node ${o.nodeRank}: ${leader ? `node 0's launcher (${leader.host}, pid ${leader.pid}) did not start the job` : "the launcher of node 0 did not start"} within ${o.timeoutMs} ms (each host runs \`weft run --nnodes ${o.nnodes} --node-rank R\` with the same store and --prefix)`);
      }
      await pauseFor(pause, o.signal);
      pause = Math.min(pause * 2, 250);
    }
  }

  private async readEntry(n: number): Promise<JoinEntry | undefined> {
    const b = await this.claims.get(`join/${n}`, { timeoutMs: 0 }).catch(() => undefined);
    if (!b) return undefined;
    const e = parseEntry(b);
    if (!e) throw new WeftError('EPROTO', `weft run: node ${n}'s entry in the store is malformed (is an older weft on that host?); use a fresh --prefix`);
    return e;
  }

  private async acked(n: number, layout: Layout): Promise<boolean> {
    return this.claims.get(`ack/${n}`, { timeoutMs: 0 }).then((b) => decodeText(b) === layout.instance, () => false);
  }

  /** Ends the claim; after a failed job also deletes the job's keys (node rank 0). */
  async release(purge: boolean): Promise<void> {
    try {
      // Stores without purge() (none of weft's) keep the keys: the next job then fails with EEXIST.
      if (purge) await this.job.purge().catch(() => 0);
      const stored = await this.claims.get(this.key, { timeoutMs: 0 }).catch(() => undefined);
      if (stored && sameBytes(stored, this.mine)) {
        if (this.joined !== undefined) {
          await this.claims.delete(`join/${this.joined}`);
          await this.claims.delete(`ack/${this.joined}`);
        }
        await this.claims.delete(this.key);
      }
    } catch {
      // The store is gone: nothing left to release.
    } finally {
      await this.claims.close().catch(() => {});
    }
  }
}


/** What a launcher writes when it joins a job on several hosts. */
interface JoinEntry {
  nonce: string;
  ranks: number;
  nnodes: number;
  script: string;
  host: string;
  pid: number;
}

/** Node 0's answer: the nonce and rank count of each node, or why the launchers are not one job. */
interface Layout {
  instance: string;
  nonces: string[];
  ranks: number[];
  error?: string;
}

function encode(v: JoinEntry | Layout): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(v));
}

function decodeText(b: Uint8Array): string {
  return new TextDecoder().decode(b);
}

function parseEntry(b: Uint8Array): JoinEntry | undefined {
  try {
    const e = JSON.parse(decodeText(b)) as JoinEntry;
    const ok = typeof e?.nonce === 'string' && Number.isInteger(e.ranks) && e.ranks > 0 && Number.isInteger(e.nnodes) && typeof e.script === 'string' && typeof e.host === 'string' && Number.isInteger(e.pid);
    return ok ? e : undefined;
  } catch {
    return undefined;
  }
}

function parseLayout(b: Uint8Array): Layout | undefined {
  try {
    const l = JSON.parse(decodeText(b)) as Layout;
    const ok = typeof l?.instance === 'string' && Array.isArray(l.nonces) && Array.isArray(l.ranks) && l.ranks.every((r) => Number.isInteger(r) && r > 0) && (l.error === undefined || typeof l.error === 'string');
    return ok ? l : undefined;
  } catch {
    return undefined;
  }
}

/** Why node `n`'s launcher is not of node 0's job, or undefined. */
function disagreement(lead: JoinEntry, e: JoinEntry, n: number): string | undefined {
  if (e.nnodes === lead.nnodes && e.script === lead.script) return undefined;
  const run = (x: JoinEntry) => `\`${x.script}\` with --nnodes ${x.nnodes}`;
  return `node 0 (${lead.host}, pid ${lead.pid}) runs ${run(lead)} and node ${n} (${e.host}, pid ${e.pid}) runs ${run(e)}: two jobs on one prefix, or launchers started with different arguments; give each job its own --prefix, and every launcher of a job the same --nnodes and script`;
}

function pauseFor(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new WeftError('EABORTED', 'weft run: joining the other hosts was aborted'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(new WeftError('EABORTED', 'weft run: joining the other hosts was aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function parse(bytes: Uint8Array): Holder | undefined {
  try {
    const h = JSON.parse(new TextDecoder().decode(bytes)) as Holder;
    return h && typeof h.identity?.pid === 'number' && typeof h.identity.hostId === 'string' ? h : undefined;
  } catch {
    return undefined;
  }
}
