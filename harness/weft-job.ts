/**
 * Runs `weft <args>` (usually `run -n N --provider P worker scenario`) as a child process and
 * collects its output (stdout and stderr together, as a test failure shows it). The job is
 * SIGKILLed after `timeoutMs`, so a hung job fails its test instead of hanging the suite.
 */
import { spawn } from 'node:child_process';
import { WEFT } from './host-jobs.js';

export function runWeft(args: string[], timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [WEFT, ...args], { env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}
