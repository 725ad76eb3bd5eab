/**
 * The ipc segment (docs/wire-format.md): a 128-byte header ("WEFTIPC1"), the server's line,
 * then one block per client: its line (state, owner thread, doorbell, where a new owner of
 * the id resumes) followed by its request ring and its response ring (stamped-ring.ts),
 * `depth` slots each.
 */
import { WeftError } from '../errors.js';
import { checkMagic, checkRange, checkSegmentBytes, writeMagic } from './header.js';
import { stampedSlotBytes } from './stamped-ring.js';

export const IPC_MAGIC = 'WEFTIPC1';
/** 2: the fences word (a weft of version 1 would sleep without the fence plain stores need). */
export const IPC_VERSION = 2;

/** Byte offsets of the header. */
export const IH = { MAX_CLIENTS: 12, DEPTH: 16, REQ_BYTES: 20, RESP_BYTES: 24, NEXT_CLIENT_ID: 28, SERVER_ALIVE: 32, TOTAL: 36, FENCES: 40, SERVER: 128, CLIENTS: 192 } as const;
/** Int32 words of the server's line and of a client's line (owner words 1-4). */
export const ISRV = { STATE: 0, SLEEPING: 5, BELL: 6 } as const;
export const ICLI = { STATE: 0, SLEEPING: 5, BELL: 6, RESUME_REQ: 7, RESUME_RESP: 8 } as const;

export const IPC_FREE = 0;
export const IPC_ATTACHED = 1;
export const IPC_DEAD = 2;
export const IPC_RELEASED = 3;
export const IPC_CLOSING = 4;
export const IPC_CLAIMING = 5;

export interface IpcGeometry {
  maxClients: number;
  depth: number;
  requestBytes: number;
  responseBytes: number;
}

export interface IpcLayout extends IpcGeometry {
  reqSlot: number;
  respSlot: number;
  block: number;
  total: number;
}

export function checkIpcGeometry(g: IpcGeometry, where: string, code: 'EINVAL' | 'EPROTO' = 'EINVAL'): void {
  checkRange(g.maxClients, 1, 1024, 'maxClients', where, false, code);
  checkRange(g.depth, 1, 1 << 16, 'depth', where, true, code);
  checkRange(g.requestBytes, 0, 1 << 16, 'requestBytes', where, false, code);
  checkRange(g.responseBytes, 0, 1 << 16, 'responseBytes', where, false, code);
  const l = ipcLayoutOf(g);
  checkSegmentBytes(l.total, `maxClients ${g.maxClients} x (64 + depth ${g.depth} x (${l.reqSlot} + ${l.respSlot}) bytes of slots for requestBytes ${g.requestBytes} and responseBytes ${g.responseBytes})`, where, code);
}

export function ipcLayoutOf(g: IpcGeometry): IpcLayout {
  const reqSlot = stampedSlotBytes(g.requestBytes);
  const respSlot = stampedSlotBytes(g.responseBytes);
  const block = 64 + g.depth * (reqSlot + respSlot);
  return { ...g, reqSlot, respSlot, block, total: IH.CLIENTS + g.maxClients * block };
}

/** Byte offset of client c's block (its line; the request ring follows, then the response ring). */
export function clientBlock(l: IpcLayout, c: number): number {
  return IH.CLIENTS + c * l.block;
}

/** `fences`: every sleeper on the segment fences with membarrier (host/remote-fence.ts), so publishers may use plain stores. */
export function writeIpcHeader(dv: DataView, l: IpcLayout, fences: boolean): void {
  writeMagic(dv, IPC_MAGIC, IPC_VERSION);
  dv.setUint32(IH.MAX_CLIENTS, l.maxClients, true);
  dv.setUint32(IH.DEPTH, l.depth, true);
  dv.setUint32(IH.REQ_BYTES, l.requestBytes, true);
  dv.setUint32(IH.RESP_BYTES, l.responseBytes, true);
  dv.setUint32(IH.TOTAL, l.total, true);
  dv.setUint32(IH.FENCES, fences ? 1 : 0, true);
}

export function readIpcHeader(sab: SharedArrayBuffer, name: string): IpcLayout {
  const where = `ipc: segment ${name}`;
  const dv = checkMagic(sab, name, 'ipc', IPC_MAGIC, IPC_VERSION, IH.CLIENTS);
  const g: IpcGeometry = { maxClients: dv.getUint32(IH.MAX_CLIENTS, true), depth: dv.getUint32(IH.DEPTH, true), requestBytes: dv.getUint32(IH.REQ_BYTES, true), responseBytes: dv.getUint32(IH.RESP_BYTES, true) };
  checkIpcGeometry(g, where, 'EPROTO');
  const l = ipcLayoutOf(g);
  if (dv.getUint32(IH.TOTAL, true) !== l.total || sab.byteLength < l.total) {
    throw new WeftError('EPROTO', `${where}: header says ${dv.getUint32(IH.TOTAL, true)} bytes, its geometry needs ${l.total} and the segment has ${sab.byteLength}`);
  }
  return l;
}
