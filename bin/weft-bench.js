#!/usr/bin/env node
// `weft bench ...`: the benchmark programs (bench/cli.ts, compiled to dist/bench/cli.js).
import('../dist/bench/cli.js').catch((err) => {
  if (err && err.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('dist/bench')) {
    console.error('weft bench: the TypeScript build is missing; run `npm install` (or `npm run build`) in the weft package first');
    process.exit(1);
  }
  throw err;
});
