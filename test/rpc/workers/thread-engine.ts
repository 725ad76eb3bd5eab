/** A worker thread with its own copyrpc engine: serves echo, or makes 200 requests. */
import { parentPort, workerData } from 'node:worker_threads';
import { createRpcEngine } from '../../../src/rpc/index.js';

const port = parentPort!;
const rpc = await createRpcEngine({ provider: 'shm', label: `thread ${workerData.role}` });
const ep = rpc.createEndpoint({ sendRingSize: 1 << 14, recvRingSize: 1 << 14, peerLabel: 'the other thread' });
port.postMessage(ep.localInfo());
const peer = await new Promise<Uint8Array>((resolve) => port.once('message', resolve));
ep.connect(new Uint8Array(peer));
if (workerData.role === 'serve') {
  rpc.serve((payload) => payload);
} else {
  let n = 0;
  for (let i = 0; i < 200; i++) {
    const r = await ep.request(new Uint8Array([i]), { timeoutMs: 10_000 });
    if (r[0] === i) n++;
  }
  port.postMessage(n);
}
