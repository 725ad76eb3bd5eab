/**
 * The subgroups a job that spans hosts runs its hierarchical collectives on, built from the
 * host map every rank has (rendezvous/hosts.ts) without a message: their group ids are
 * reserved (above the ids split/newGroup hand out), and groups sharing an id never share a
 * rank (each host's local group is disjoint from the others'; so are the per-local-rank ones).
 */
import type { Group, Hierarchy } from '../collectives/index.js';
import { GroupView, MAX_GROUP_ID } from '../transport/group-view.js';
import type { HostMap } from '../rendezvous/hosts.js';
import { Subgroup } from './communicator.js';

/** Group ids of the hierarchy (split/newGroup stay below FIRST_RESERVED_GROUP_ID). */
export const LOCAL_GROUP_ID = MAX_GROUP_ID;
export const LEADERS_GROUP_ID = MAX_GROUP_ID - 1;
export const PEERS_GROUP_ID = MAX_GROUP_ID - 2;
export const FIRST_RESERVED_GROUP_ID = PEERS_GROUP_ID;

/** The hierarchy of `job` (rank `job.rank`) over the hosts in `hosts`. */
export function hierarchyOf(job: Group, hosts: HostMap): Hierarchy {
  const me = job.rank;
  const device = job.transport.device;
  const host = hosts.hostIndex[me];
  const byHost: number[][] = hosts.hostIds.map(() => []);
  for (let r = 0; r < job.size; r++) byHost[hosts.hostIndex[r]].push(r);
  const mine = byHost[host];
  const local = new Subgroup(job, new GroupView(device, mine, LOCAL_GROUP_ID, { hostBoard: true }), mine.indexOf(me), "this host's ranks");
  const leaderRanks = byHost.map((ranks) => ranks[0]);
  const leaders = leaderRanks[host] === me ? new Subgroup(job, new GroupView(device, leaderRanks, LEADERS_GROUP_ID), host, "the hosts' leaders") : undefined;
  const hostSizes = byHost.map((ranks) => ranks.length);
  const uniform = hostSizes.every((n) => n === hostSizes[0]);
  const lr = hosts.localRank[me];
  const peers = uniform ? new Subgroup(job, new GroupView(device, byHost.map((ranks) => ranks[lr]), PEERS_GROUP_ID), host, 'the same local rank on every host') : undefined;
  let contiguous = true;
  for (let r = 1; r < job.size; r++) if (hosts.hostIndex[r] < hosts.hostIndex[r - 1]) contiguous = false;
  const oversubscribed = hosts.oversubscribed.some((o) => o);
  return { local, leaders, peers, hostOf: hosts.hostIndex, localRankOf: hosts.localRank, host, hostSizes, contiguous, oversubscribed, hostOversubscribed: hosts.oversubscribed[host] };
}
