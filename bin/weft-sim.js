#!/usr/bin/env node
// `weft sim ...`: the models (bench/sim/cli.ts, compiled to dist/bench/sim/cli.js).
import('../dist/bench/sim/cli.js').catch((err) => {
  if (err && err.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('dist/bench')) {
    console.error('weft sim: the TypeScript build is missing; run `npm install` (or `npm run build`) in the weft package first');
    process.exit(1);
  }
  throw err;
});
