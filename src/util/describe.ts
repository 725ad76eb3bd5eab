/** `Float32Array`, `string`, `null`: what a wrong argument was, for error messages. */
export function describeValue(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x !== 'object') return typeof x;
  return (x as object).constructor?.name ?? 'object';
}
