#!/usr/bin/env node
// Thin launcher: the CLI is compiled TypeScript in dist/ (built by `npm install`'s prepare step).
import('../dist/src/cli/weft.js').catch((err) => {
  if (err && err.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('dist/src/cli')) {
    console.error('weft: the TypeScript build is missing; run `npm install` (or `npm run build`) in the weft package first');
    process.exit(1);
  }
  throw err;
});
