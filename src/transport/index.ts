/** Gloo's transport vocabulary over the NIC layer: Device, Pair, bound Buffer, UnboundBuffer. */
export { Device, type TransportOptions } from './device.js';
export { Pair } from './pair.js';
export { SendBuffer, RecvBuffer, createSendBuffer, createRecvBuffer } from './buffer.js';
export { UnboundBuffer } from './unbound-buffer.js';
