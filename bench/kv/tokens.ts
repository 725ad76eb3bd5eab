/**
 * What a daemon attaches to a call so the answer finds its way back, packed in one number
 * (kind * 2^32 + value): copyrpc's user data (the notes' DelegToken is kind DELEG) and
 * Flux's token. Numbers, not objects: no allocation per call.
 */
const TWO32 = 0x1_0000_0000;
/** An ipc client's call: value = client * 65536 + tag. */
export const T_IPC = 1;
/** A Flux call made to this daemon: value = Flux replyToken. */
export const T_FLUX = 2;
/** A delegationrpc call (DelegToken): value = client * 65536 + response slot. */
export const T_DELEG = 3;
/** A copyrpc request this daemon forwarded through Flux: value = index of its parked RecvHandle. */
export const T_HANDLE = 4;

export function token(kind: number, value: number): number {
  return kind * TWO32 + value;
}
export function kindOf(t: number): number {
  return Math.floor(t / TWO32);
}
export function valueOf(t: number): number {
  return t % TWO32;
}
