/**
 * `NODE_DEBUG=weft`: one line per decision a user may need to see when a job misbehaves (the
 * store, the bind address, the device each rank opened, how long connecting took, aborts and
 * their reasons, closes), on stderr, through Node's own switch. Never on a per-message path.
 *
 * @example
 * // NODE_DEBUG=weft weft run -n 2 app.mjs
 * // [rank 0] WEFT 4242: rank 0 of 2: device shm+ofi:tcp;ofi_rxm, bind 10.0.0.7
 */
import { debuglog } from 'node:util';

export const debugLog = debuglog('weft');
