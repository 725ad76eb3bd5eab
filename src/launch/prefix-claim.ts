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
import { createHash, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import path from 'node:path';
import { WeftError } from '../errors.js';
import { isPeerAlive, localIdentity, type ProcessIdentity } from '../host/identity.js';
import { openStore } from '../rendezvous/open.js';
import { PrefixStore } from '../rendezvous/prefix-store.js';
import type { Store } from '../rendezvous/store.js';
import { redactUrl } from '../rendezvous/stores/redis/store.js';
import { sameBytes } from '../rendezvous/stores/shared/values.js';
import { sleep } from '../rendezvous/stores/shared/wait-for-keys.js';

/** Longest pause between two looks at the store while launchers join (a job's start waits up to this). */
const POLL_MAX_MS = 100;

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
   * the live launcher that holds it. `timeoutMs` and `signal` bound reaching the store;
   * `nnodes` is the job's number of hosts.
   */
  static async take(url: string, prefix: string, nodeRank: number, timeoutMs = 10_000, signal?: AbortSignal, nnodes = 1): Promise<PrefixClaim> {
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
            // Its ranks end within the watchdog's grace (1.5 s after their launcher died): purge
            // after. On several hosts node 0 purges once every launcher has joined (another
            // job's ranks may use the prefix now: a claim of a node rank it does not have).
            await new Promise((r) => setTimeout(r, 2000));
            if (nnodes === 1) await job.purge().catch(() => 0);
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
   * node 0 publishes again), checks once more that every entry and acknowledgement still
   * stands, deletes whatever a failed earlier job left under the prefix (each of that job's
   * launchers has ended: this job holds every node's claim), and writes `start`. A launcher
   * starts its ranks when `start` names the layout that holds its own nonce. Launchers that
   * disagree on `--nnodes`, the script or its arguments are two jobs on one prefix: node 0
   * publishes the disagreement as a layout, and stops when that launcher has acknowledged it
   * (an entry nobody acknowledges is a dead launcher's, replaced in time). Node 0 that fails
   * for any reason publishes why to every launcher it heard of, which stop at once.
   */
  async join(o: { nnodes: number; nodeRank: number; ranks: number; script: string; args: readonly string[]; timeoutMs: number; signal?: AbortSignal }): Promise<{ firstRank: number; world: number }> {
    const deadline = performance.now() + o.timeoutMs;
    const argv = createHash('sha256').update(JSON.stringify([path.basename(o.script), ...o.args])).digest('hex').slice(0, 16);
    const mine: JoinEntry = { nonce: randomBytes(8).toString('hex'), ranks: o.ranks, nnodes: o.nnodes, script: path.basename(o.script), argv, host: hostname(), pid: process.pid };
    await this.claims.set(`join/${o.nodeRank}`, encode(mine));
    this.joined = o.nodeRank;
    let layout: Layout;
    if (o.nodeRank === 0) {
      try {
        layout = await this.lead(mine, o, deadline);
      } catch (err) {
        await this.publishFailure(o.nnodes, (err as Error).message);
        throw err;
      }
    } else {
      layout = await this.follow(mine, o, deadline);
    }
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
      const backoff = new Backoff(o.signal);
      for (let n = 1; n < o.nnodes; ) {
        const e = await this.readEntry(n);
        if (e) {
          const why = disagreement(mine, e, n);
          if (why && (await this.confirmDisagreement(n, e, entries, why, deadline, o.signal))) throw new WeftError('EINVAL', `weft run: node 0: ${why}`);
          if (why) break; // that entry was replaced: read the entries again
          entries.push(e);
          n++;
          continue;
        }
        if (performance.now() >= deadline) {
          const missing: number[] = [];
          for (let m = n; m < o.nnodes; m++) if (!(await this.readEntry(m))) missing.push(m);
          throw new WeftError('ETIMEDOUT', `weft run: node 0: the launchers of nodes ${missing.join(', ')} did not start within ${o.timeoutMs} ms (each host runs \`weft run --nnodes ${o.nnodes} --node-rank R\` with the same store and --prefix)`);
        }
        await backoff.pause();
      }
      if (entries.length < o.nnodes) continue;
      const layout: Layout = { instance: randomBytes(8).toString('hex'), nonces: entries.map((e) => e.nonce), ranks: entries.map((e) => e.ranks) };
      await this.claims.set('layout', encode(layout));
      // Until every launcher acknowledged, in node order; the entry of the node waited for
      // replaced meanwhile (a launcher that died, and one that took its place) means a new layout.
      let n = 1;
      const acks = new Backoff(o.signal);
      while (n < o.nnodes) {
        if (await this.acked(n, layout.instance)) {
          n++;
          continue;
        }
        const e = await this.readEntry(n);
        if (e?.nonce !== layout.nonces[n]) break;
        if (performance.now() >= deadline) throw new WeftError('ETIMEDOUT', `weft run: node 0: the launcher of node ${n} (${e.host}, pid ${e.pid}) did not acknowledge the job's layout within ${o.timeoutMs} ms; is it still running?`);
        await acks.pause();
      }
      // A launcher that acknowledged may have gone since (Ctrl-C, or SIGKILL and a new one in its
      // place): the layout must still stand for every node, else a job would start without it.
      if (n < o.nnodes || !(await this.stands(layout))) continue;
      await this.checkNoWiderJob(o.nnodes);
      // Each launcher of any earlier job on this prefix has ended (this job holds every node's
      // claim), so what they left, ranks' keys of a failed job, can go.
      await this.job.purge().catch(() => 0);
      await this.claims.set('start', new TextEncoder().encode(layout.instance));
      return layout;
    }
  }

  /**
   * Node `n`'s entry disagrees with node 0's: published as an error layout; true once that
   * launcher acknowledges it or has ended (it stops too), false when the entry is replaced
   * first (it was a dead launcher's). Throws ETIMEDOUT at the deadline.
   */
  private async confirmDisagreement(n: number, e: JoinEntry, entries: JoinEntry[], why: string, deadline: number, signal?: AbortSignal): Promise<boolean> {
    const instance = randomBytes(8).toString('hex');
    await this.claims.set('layout', encode({ instance, nonces: [...entries.map((x) => x.nonce), e.nonce], ranks: [], error: why } satisfies Layout));
    const backoff = new Backoff(signal);
    for (;;) {
      if (await this.acked(n, instance)) return true;
      // Gone: its launcher read the disagreement and ended (it removes its entry as it goes;
      // a dead launcher's entry stays until a new launcher replaces it).
      const now = await this.readEntry(n);
      if (!now) return true;
      if (now.nonce !== e.nonce) return false;
      if (performance.now() >= deadline) throw new WeftError('ETIMEDOUT', `weft run: node 0: node ${n}'s entry in the store disagrees (${why}), and no launcher answered for it: left by a launcher that died? Start node ${n}'s launcher again with this job's arguments, or use another --prefix`);
      await backoff.pause();
    }
  }

  /** Tells every launcher whose entry is in the store that node 0 gave up, and why (best effort). */
  private async publishFailure(nnodes: number, why: string): Promise<void> {
    try {
      const nonces: string[] = [];
      for (let n = 0; n < nnodes; n++) nonces.push((await this.readEntry(n).catch(() => undefined))?.nonce ?? '');
      await this.claims.set('layout', encode({ instance: randomBytes(8).toString('hex'), nonces, ranks: [], error: `node 0 stopped: ${why.replace(/^weft run: node 0: /, '')}` } satisfies Layout));
    } catch {
      // The store is gone: the others time out.
    }
  }

  /** Whether every node's entry still holds the layout's nonce and has acknowledged it. */
  private async stands(layout: Layout): Promise<boolean> {
    for (let n = 1; n < layout.nonces.length; n++) {
      if ((await this.readEntry(n))?.nonce !== layout.nonces[n] || !(await this.acked(n, layout.instance))) return false;
    }
    return true;
  }

  /**
   * A claim of a node rank this job does not have (an earlier job with more hosts whose
   * launchers there still run) would see its keys purged under it: refused, naming it.
   */
  private async checkNoWiderJob(nnodes: number): Promise<void> {
    for (let m = nnodes; m < nnodes + 8; m++) {
      const b = await this.claims.get(String(m), { timeoutMs: 0 }).catch(() => undefined);
      if (!b) continue;
      const h = parse(b);
      if (h && !isPeerAlive(h.identity)) continue;
      const who = h ? `the launcher pid ${h.identity.pid} on ${h.host}, since ${h.since}` : 'another launcher';
      throw new WeftError('EEXIST', `weft run: node 0: node rank ${m} of this prefix is claimed by ${who}: a job with more than ${nnodes} hosts uses the prefix; end it, or give this job another --prefix`);
    }
  }

  /** A follower's side of join(): waits for a layout naming its nonce, acknowledges it, then for `start`. */
  private async follow(mine: JoinEntry, o: { nnodes: number; nodeRank: number; timeoutMs: number; signal?: AbortSignal }, deadline: number): Promise<Layout> {
    let acked = '';
    const backoff = new Backoff(o.signal);
    for (;;) {
      const layout = await this.claims.get('layout', { timeoutMs: 0 }).then((b) => parseLayout(b), () => undefined);
      if (layout?.nonces[o.nodeRank] === mine.nonce) {
        if (acked !== layout.instance) {
          await this.claims.set(`ack/${o.nodeRank}`, new TextEncoder().encode(layout.instance));
          acked = layout.instance;
          backoff.reset();
        }
        if (layout.error) throw new WeftError('EINVAL', `weft run: node ${o.nodeRank}: ${layout.error}`);
        if (layout.ranks.length !== o.nnodes) throw new WeftError('EPROTO', `weft run: node ${o.nodeRank}: the job's layout in the store is malformed; use a fresh --prefix`);
        if ((await this.started()) === layout.instance) return layout;
      } else if (layout && !layout.error && layout.ranks.length !== o.nnodes) {
        await this.refuseRunningJob(layout, o);
      }
      if (performance.now() >= deadline) {
        const leader = await this.readEntry(0);
        throw new WeftError('ETIMEDOUT', `weft run: node ${o.nodeRank}: ${leader ? `node 0's launcher (${leader.host}, pid ${leader.pid}) did not start the job` : "the launcher of node 0 did not start"} within ${o.timeoutMs} ms (each host runs \`weft run --nnodes ${o.nnodes} --node-rank R\` with the same store and --prefix)`);
      }
      await backoff.pause();
    }
  }

  /**
   * A follower whose --nnodes differs from that of a job node 0 started on this prefix without
   * it (its node rank may not even be in that job) stops at once instead of waiting out the
   * join timeout. Only when the job runs: node 0's entry still holds the layout's nonce (a
   * layout left by a job that ended is not one; the next job's node 0 replaces it).
   */
  private async refuseRunningJob(layout: Layout, o: { nnodes: number; nodeRank: number }): Promise<void> {
    if ((await this.started()) !== layout.instance) return;
    const leader = await this.readEntry(0);
    if (!leader || leader.nonce !== layout.nonces[0]) return;
    throw new WeftError('EINVAL', `weft run: node ${o.nodeRank}: node 0 (${leader.host}, pid ${leader.pid}) runs \`${leader.script}\` with --nnodes ${layout.ranks.length} on this prefix, started without this launcher (--nnodes ${o.nnodes}): two jobs on one prefix, or launchers started with different --nnodes; give each job its own --prefix, and every launcher of a job the same --nnodes`);
  }

  /** The instance of the layout node 0 started ('' before any). */
  private async started(): Promise<string> {
    return this.claims.get('start', { timeoutMs: 0 }).then(decodeText, () => '');
  }

  private async readEntry(n: number): Promise<JoinEntry | undefined> {
    const b = await this.claims.get(`join/${n}`, { timeoutMs: 0 }).catch(() => undefined);
    if (!b) return undefined;
    const e = parseEntry(b);
    if (!e) throw new WeftError('EPROTO', `weft run: node ${n}'s entry in the store is malformed (is an older weft on that host?); use a fresh --prefix`);
    return e;
  }

  private async acked(n: number, instance: string): Promise<boolean> {
    return this.claims.get(`ack/${n}`, { timeoutMs: 0 }).then((b) => decodeText(b) === instance, () => false);
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
  /** A hash of the script's name and arguments. */
  argv: string;
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
    const ok = typeof e?.nonce === 'string' && Number.isInteger(e.ranks) && e.ranks > 0 && Number.isInteger(e.nnodes) && typeof e.script === 'string' && typeof e.argv === 'string' && typeof e.host === 'string' && Number.isInteger(e.pid);
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
  if (e.nnodes === lead.nnodes && e.argv === lead.argv) return undefined;
  const run = (x: JoinEntry) => `\`${x.script}\` with --nnodes ${x.nnodes}`;
  const what = e.nnodes === lead.nnodes && e.script === lead.script ? `\`${e.script}\` with other arguments` : null;
  return `node 0 (${lead.host}, pid ${lead.pid}) runs ${run(lead)} and node ${n} (${e.host}, pid ${e.pid}) runs ${what ?? run(e)}: two jobs on one prefix, or launchers started with different arguments; give each job its own --prefix, and every launcher of a job the same --nnodes, script and arguments`;
}

/**
 * The pauses between two looks at the store while launchers join: 20 ms, doubling up to
 * POLL_MAX_MS; EABORTED once the signal fires (Ctrl-C).
 */
class Backoff {
  private ms = 20;
  constructor(private readonly signal?: AbortSignal) {}

  reset(): void {
    this.ms = 20;
  }

  async pause(): Promise<void> {
    await sleep(this.ms, this.signal);
    if (this.signal?.aborted) throw new WeftError('EABORTED', 'weft run: joining the other hosts was aborted');
    this.ms = Math.min(this.ms * 2, POLL_MAX_MS);
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
