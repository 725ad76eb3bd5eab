/** Runs simulation jobs on worker threads, one per core (each job is independent and seeded). */
import { Worker } from 'node:worker_threads';
import { cpus } from 'node:os';
import type { SimResult } from './model.js';
import type { SimJob } from './worker.js';

export async function runJobs(jobs: Omit<SimJob, 'id'>[], threads: number, onDone?: (done: number, total: number) => void): Promise<SimResult[]> {
  const n = Math.max(1, Math.min(threads || cpus().length, jobs.length));
  const results: SimResult[] = new Array(jobs.length);
  let next = 0;
  let done = 0;
  const workers = Array.from({ length: n }, () => new Worker(new URL('./worker.js', import.meta.url)));
  try {
    await Promise.all(
      workers.map(
        (w) =>
          new Promise<void>((resolve, reject) => {
            const feed = (): void => {
              if (next >= jobs.length) return resolve();
              const id = next++;
              w.postMessage({ ...jobs[id], id } satisfies SimJob);
            };
            w.on('message', (m: { id: number; result?: SimResult; error?: string }) => {
              if (m.error !== undefined) return reject(new Error(`weft sim daemon-loop: np ${jobs[m.id].params.np}, ${jobs[m.id].controller}: ${m.error}`));
              results[m.id] = m.result!;
              onDone?.(++done, jobs.length);
              feed();
            });
            w.on('error', reject);
            w.on('exit', (code) => (code !== 0 ? reject(new Error(`weft sim daemon-loop: a worker exited with code ${code}`)) : undefined));
            feed();
          }),
      ),
    );
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
  return results;
}
