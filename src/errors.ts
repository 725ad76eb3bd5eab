/**
 * Errors weft throws or reports in completions. Every message names who (the local label,
 * usually "rank N"), what operation, toward which peer, and what to do about it.
 */

/** Machine-readable error codes shared by every layer. */
export type WeftErrorCode =
  | 'EINVAL' // bad argument from the caller
  | 'ETIMEDOUT' // a wait or an operation outlived its timeout
  | 'EABORTED' // the caller's AbortSignal fired
  | 'EPEERDEAD' // the peer process is gone
  | 'EREMOTEACCESS' // bad key or out-of-bounds remote access
  | 'EPROTO' // malformed bytes from a peer
  | 'ECLOSED' // the object was closed
  | 'EEXIST' // a write-once key already holds a value
  | 'ETRANSPORT' // the fabric reported an error
  | 'ENOTSUP'; // not available on this build or provider

const CODES: readonly WeftErrorCode[] = ['EINVAL', 'ETIMEDOUT', 'EABORTED', 'EPEERDEAD', 'EREMOTEACCESS', 'EPROTO', 'ECLOSED', 'EEXIST', 'ETRANSPORT', 'ENOTSUP'];

/**
 * An error as one line of text for another process (an ABORT message, a join failure in the
 * store): the code first, so the reader fails with the same kind of error.
 */
export function codedText(code: WeftErrorCode, message: string): string {
  return `${code} ${message}`;
}

/** Reads codedText; text without a known code becomes `fallback` with the whole text. */
export function fromCodedText(text: string, fallback: WeftErrorCode): { code: WeftErrorCode; message: string } {
  const space = text.indexOf(' ');
  const code = text.slice(0, space) as WeftErrorCode;
  return space > 0 && CODES.includes(code) ? { code, message: text.slice(space + 1) } : { code: fallback, message: text };
}

/** The one error class of weft; `code` says which kind, the message says what to do. */
export class WeftError extends Error {
  readonly code: WeftErrorCode;
  constructor(code: WeftErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WeftError';
    this.code = code;
  }
}

/** Throws EINVAL with a message naming `where`. */
export function invalid(where: string, what: string): never {
  throw new WeftError('EINVAL', `${where}: ${what}`);
}
