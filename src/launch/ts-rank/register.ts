/** `--import`ed by each rank of `weft run app.ts` after tsx: see ./hooks.ts. */
import { register } from 'node:module';

register('./hooks.js', import.meta.url);
