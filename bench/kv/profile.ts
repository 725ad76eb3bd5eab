/**
 * WEFT_KV_PROFILE=<dir>: each thread records a V8 CPU profile of its run and writes it to
 * <dir>/<rank>-<thread>.cpuprofile (open in Chrome DevTools). --cpu-prof cannot reach worker
 * threads launched through weft run, the inspector session can.
 */
import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';
import path from 'node:path';

export function startProfile(name: string): () => void {
  const dir = process.env.WEFT_KV_PROFILE;
  if (!dir) return () => {};
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 200 });
  session.post('Profiler.start');
  return () => {
    session.post('Profiler.stop', (err, r) => {
      if (!err) writeFileSync(path.join(dir, `${name.replace(/ /g, '-')}.cpuprofile`), JSON.stringify(r.profile));
      session.disconnect();
    });
  };
}
