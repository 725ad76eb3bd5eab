/**
 * One-sided operations beside the copyrpc protocol: an endpoint's QP also carries plain RDMA
 * WRITEs and READs of registered memory the peer described (rdmaWrite / rdmaRead). They use
 * their own work-request id, so the engine counts them in `rawPending` apart from the
 * protocol's batch writes and consumer READs, and a failed one fails only itself.
 */
import { Opcode, type MemoryRegion, type QueuePair, type RemoteRegion } from '../nic/types.js';

/** Work-request id of one-sided operations on an endpoint's QP. */
export const WR_RAW = 2;

/** Posts a signaled one-sided WRITE or READ (the engine counts its completion). */
export function postOneSided(qp: QueuePair, opcode: typeof Opcode.WRITE | typeof Opcode.READ, local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, len: number): void {
  if (opcode === Opcode.WRITE) qp.postWrite(local, localOffset, remote, remoteOffset, len, WR_RAW, true);
  else qp.postRead(local, localOffset, remote, remoteOffset, len, WR_RAW, true);
}
