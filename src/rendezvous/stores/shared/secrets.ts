/**
 * Store credentials come from options, the environment or a file, never from a URL given on a
 * command line (every local user can read command lines in `ps`; a process's environment is
 * readable only by its owner and root):
 *
 * | credential                  | variable              | or a file named by         |
 * |-----------------------------|-----------------------|----------------------------|
 * | TcpStore shared secret      | `WEFT_STORE_SECRET`   | `WEFT_STORE_SECRET_FILE`   |
 * | Redis password (no password in the URL) | `WEFT_STORE_PASSWORD` | `WEFT_STORE_PASSWORD_FILE` |
 *
 * A file's content is trimmed (a trailing newline is not part of the secret).
 */
import { readFileSync } from 'node:fs';
import { WeftError } from '../../../errors.js';

/** A credential and where it came from (for messages: never the value itself). */
export interface Credential {
  value: string;
  /** e.g. "WEFT_STORE_SECRET" or "WEFT_STORE_SECRET_FILE=/run/secrets/weft". */
  source: string;
}

/**
 * Reads the credential `name` (e.g. WEFT_STORE_SECRET) from `env`, else from the file that
 * `${name}_FILE` names; undefined when neither is set. An empty value, or a file that cannot
 * be read or holds nothing, is an EINVAL naming `where` and the variable.
 */
export function credentialFromEnv(name: string, where: string, env: NodeJS.ProcessEnv = process.env): Credential | undefined {
  const direct = env[name];
  if (direct !== undefined) {
    if (direct === '') throw new WeftError('EINVAL', `${where}: ${name} is set but empty; set it to the secret, or unset it`);
    return { value: direct, source: name };
  }
  const fileVar = `${name}_FILE`;
  const file = env[fileVar];
  if (file === undefined) return undefined;
  const source = `${fileVar}=${file}`;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new WeftError('EINVAL', `${where}: cannot read ${source} (${(e as Error).message}); point ${fileVar} at a readable file holding the secret (mode 0600)`, { cause: e });
  }
  const value = text.trim();
  if (!value) throw new WeftError('EINVAL', `${where}: ${source} is empty; write the secret into it`);
  return { value, source };
}
