/** A worker thread of `weft sim daemon-loop`: runs the (params, controller) pairs it is sent. */
import { parentPort } from 'node:worker_threads';
import { simulate } from './model.js';
import type { DaemonLoopParams } from './params.js';

export interface SimJob {
  id: number;
  params: DaemonLoopParams;
  controller: string;
}

parentPort!.on('message', (job: SimJob) => {
  try {
    parentPort!.postMessage({ id: job.id, result: simulate(job.params, job.controller) });
  } catch (err) {
    parentPort!.postMessage({ id: job.id, error: err instanceof Error ? err.message : String(err) });
  }
});
