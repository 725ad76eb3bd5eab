/**
 * The directory of a FileStore must be its user's alone: whoever else can write there can
 * forge a rank's address (a write-once key set first), change or delete the job's keys, and
 * whoever owns it can do all that and more. So a missing directory is created with mode 0700,
 * and an existing one must belong to this process's user and be writable by nobody else (it
 * may be readable: the files in it are 0600). A symbolic link is followed only when it belongs
 * to this user or root (anyone else could re-point it at a directory of theirs at any time).
 */
import { chmodSync, lstatSync, mkdirSync, statSync } from 'node:fs';
import { WeftError } from '../../../errors.js';

function refuse(dir: string, why: string, fix: string): never {
  throw new WeftError('EINVAL', `FileStore ${dir}: refusing the directory: it ${why}. ${fix}`);
}

/** Creates `dir` (mode 0700) if missing and checks that it is this user's alone; EINVAL otherwise. */
export function prepareDirectory(dir: string): void {
  let created: string | undefined;
  try {
    created = mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    throw new WeftError('EINVAL', `FileStore ${dir}: cannot create the directory (${(e as Error).message}); give a writable path every rank can see`, { cause: e });
  }
  if (typeof process.getuid !== 'function') return; // Windows: no POSIX owners and modes
  const uid = process.getuid();
  const fix = 'Give the store a directory of your own that nobody else can write (a missing one is created with mode 0700), or set WEFT_STORE to another store (e.g. file:///home/you/weft-jobs/<job>, or the tcp:// or redis:// store of your launcher).';
  try {
    // The umask may have taken bits off the mode we asked for; set exactly 0700.
    if (created !== undefined) chmodSync(dir, 0o700);
    const link = lstatSync(dir);
    if (link.isSymbolicLink() && link.uid !== uid && link.uid !== 0) refuse(dir, `is a symbolic link owned by uid ${link.uid}, which can point it at another directory at any time`, fix);
    const st = statSync(dir);
    if (!st.isDirectory()) refuse(dir, 'is not a directory', fix);
    if (st.uid !== uid) refuse(dir, `belongs to uid ${st.uid}, not to this process's user (uid ${uid}); its owner can forge, change or delete the job's keys`, fix);
    if (st.mode & 0o022) {
      const who = st.mode & 0o002 ? (st.mode & 0o020 ? 'its group and every user' : 'every user') : 'its group';
      const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
      const hint = st.mode & 0o1000 ? `It is a shared directory (like /tmp): use a subdirectory of it, e.g. ${dir.replace(/\/$/, '')}/weft-<job> (created with mode 0700).` : `Run \`chmod go-w ${dir}\` if it is yours to change.`;
      refuse(dir, `is writable by ${who} (mode ${mode}), who can forge, change or delete the job's keys`, `${hint} Or: ${fix}`);
    }
  } catch (e) {
    if (e instanceof WeftError) throw e;
    throw new WeftError('EINVAL', `FileStore ${dir}: cannot check the directory (${(e as Error).message}); give a path every rank can see`, { cause: e });
  }
}
