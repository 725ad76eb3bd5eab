/**
 * Module hooks for the ranks of `weft run app.ts`: a .ts file loads as an ES module even in a
 * project whose package.json says (or defaults to) CommonJS, so a rank's top-level `await`
 * (`const ctx = await init()`) works in a fresh `npm init -y` project. tsx picks the format
 * from the package type, as Node does for .js; .cts files stay CommonJS, .mts are ESM anyway.
 * Runs in Node's loader thread, registered by ./register.ts before tsx's hooks see the file.
 */
import type { ResolveHookContext, ResolveFnOutput } from 'node:module';

type NextResolve = (specifier: string, context: ResolveHookContext) => ResolveFnOutput | Promise<ResolveFnOutput>;

export async function resolve(specifier: string, context: ResolveHookContext, next: NextResolve): Promise<ResolveFnOutput> {
  const r = await next(specifier, context);
  if (r.url.startsWith('file:') && /\.tsx?$/.test(new URL(r.url).pathname) && r.format !== 'module') return { ...r, format: 'module' };
  return r;
}
