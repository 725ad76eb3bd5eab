/**
 * Who talks to whom in one benchkv configuration: the threads of a rank (daemons 0..K-1,
 * clients 0..C-1), the shard owner of a key, and which thread of which rank holds each
 * copyrpc endpoint (section 1.4 of the notes):
 *
 * | backend    | endpoint toward rank p lives in           | on rank p it connects to        |
 * |------------|-------------------------------------------|---------------------------------|
 * | meta       | daemon p % K                              | daemon r % K (r: this rank)     |
 * | delegation | daemon 0 (all N-1 endpoints)              | daemon 0                        |
 * | direct     | every client c (its own N-1 endpoints)    | daemon c % K, which serves them |
 *
 * Every rank computes the same list from (backend, N, K, C), so the endpoint exchange needs
 * no negotiation: each thread publishes one blob with its endpoints' infos, keyed by the pair.
 */
export type Backend = 'meta' | 'delegation' | 'direct';
export const BACKENDS: readonly Backend[] = ['meta', 'delegation', 'direct'];

export type ThreadRole = 'daemon' | 'client';
export interface ThreadRef {
  role: ThreadRole;
  index: number;
}

/** One copyrpc connection: an endpoint in each of two threads of two ranks. */
export interface Link {
  /** Rank and thread of side a (the lower rank) and side b. */
  aRank: number;
  a: ThreadRef;
  bRank: number;
  b: ThreadRef;
}

export function threadName(t: ThreadRef): string {
  return `${t.role} ${t.index}`;
}

/** Daemon that owns `key`'s shard (`key % K`, as the notes). */
export function shardOwner(key: number, daemons: number): number {
  return key % daemons;
}

/** The links every rank agrees on. */
export function links(backend: Backend, ranks: number, daemons: number, clients: number): Link[] {
  const out: Link[] = [];
  for (let r = 0; r < ranks; r++) {
    for (let p = r + 1; p < ranks; p++) {
      if (backend === 'meta') out.push({ aRank: r, a: { role: 'daemon', index: p % daemons }, bRank: p, b: { role: 'daemon', index: r % daemons } });
      else if (backend === 'delegation') out.push({ aRank: r, a: { role: 'daemon', index: 0 }, bRank: p, b: { role: 'daemon', index: 0 } });
      else {
        // Each client of each side calls the other side; its endpoint's peer is a daemon there.
        for (let c = 0; c < clients; c++) {
          out.push({ aRank: r, a: { role: 'client', index: c }, bRank: p, b: { role: 'daemon', index: c % daemons } });
          out.push({ aRank: r, a: { role: 'daemon', index: c % daemons }, bRank: p, b: { role: 'client', index: c } });
        }
      }
    }
  }
  return out;
}

/** A thread's side of the links it takes part in: (peer rank, peer thread, link key). */
export interface LocalEnd {
  key: string;
  peerRank: number;
  peer: ThreadRef;
}

export function linkKey(l: Link): string {
  return `${l.aRank}.${l.a.role[0]}${l.a.index}-${l.bRank}.${l.b.role[0]}${l.b.index}`;
}

export function endsOf(all: Link[], rank: number, t: ThreadRef): LocalEnd[] {
  const same = (x: ThreadRef) => x.role === t.role && x.index === t.index;
  const out: LocalEnd[] = [];
  for (const l of all) {
    if (l.aRank === rank && same(l.a)) out.push({ key: linkKey(l), peerRank: l.bRank, peer: l.b });
    else if (l.bRank === rank && same(l.b)) out.push({ key: linkKey(l), peerRank: l.aRank, peer: l.a });
  }
  return out;
}
