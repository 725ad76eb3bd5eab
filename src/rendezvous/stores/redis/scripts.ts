/**
 * The Lua scripts of RedisStore. Each write is ONE script so that the write and its
 * notification (PUBLISH of the new value on the key's channel) happen atomically in one
 * command: a waiter subscribed to the channel gets the value pushed, with no polling and no
 * extra GET. Channel of key K: ARGV's channel prefix .. K (the prefix carries the db number,
 * because pub/sub channels are shared by every database of a server).
 */
import { createHash } from 'node:crypto';

export interface RedisScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, source: string): RedisScript {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

// Writes with an expiry (ttl 0 means none).
const PUT = `local function put(k, v, ttl) if ttl == '0' then redis.call('SET', k, v) else redis.call('SET', k, v, 'EX', ttl) end end\n`;

/**
 * KEYS: the keys; ARGV: ttl, once ('1'|'0'), channel prefix, then one value per key.
 * Returns {0} when written, {i, existing} when write-once key i (1-based) already exists
 * (nothing is written then: all or none).
 */
export const MSET = script(
  'mset',
  `${PUT}local ttl, once, cp = ARGV[1], ARGV[2], ARGV[3]
if once == '1' then
  for i = 1, #KEYS do
    local cur = redis.call('GET', KEYS[i])
    if cur then return {i, cur} end
  end
end
for i = 1, #KEYS do
  put(KEYS[i], ARGV[i + 3], ttl)
  redis.call('PUBLISH', cp .. KEYS[i], ARGV[i + 3])
end
return {0}`,
);

/** KEYS: counter; ARGV: delta, ttl, channel prefix. Returns the new value. */
export const ADD = script(
  'add',
  `local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if ARGV[2] ~= '0' then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
redis.call('PUBLISH', ARGV[3] .. KEYS[1], tostring(v))
return v`,
);

/**
 * KEYS: key; ARGV: expected ('' = absent), desired, ttl, channel prefix.
 * Returns the value now stored ('' when absent).
 */
export const CAS = script(
  'compareSet',
  `${PUT}local cur = redis.call('GET', KEYS[1])
if (not cur and ARGV[1] == '') or (cur and cur == ARGV[1]) then
  put(KEYS[1], ARGV[2], ARGV[3])
  redis.call('PUBLISH', ARGV[4] .. KEYS[1], ARGV[2])
  return ARGV[2]
end
if not cur then return '' end
return cur`,
);

/** KEYS: keys. Returns the 1-based indices of those that do not exist (values stay on the server). */
export const MISSING = script(
  'missing',
  `local out = {}
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then out[#out + 1] = i end
end
return out`,
);

export const ALL_SCRIPTS = [MSET, ADD, CAS, MISSING];
