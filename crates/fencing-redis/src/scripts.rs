//! The Lua scripts: each runs atomically on the server, and is sent by its SHA1, with the
//! source sent only when the server's script cache does not have it (`Script::invoke_async`).

use redis::Script;

/// Reads a counter, refusing anything but a token-shaped decimal (`0` or `1..=i64::MAX`
/// without leading zeros), since `INCR` on it must not fail after the lease key is set.
/// Returns the value (or `false` when missing) and an error reply, if any. Numbers stay
/// strings throughout: Lua numbers are doubles and would round tokens above 2^53.
const COUNTER: &str = r#"
local MAX = '9223372036854775807'
local function counter(key)
  local v = redis.call('GET', key)
  if v == false then return false, nil end
  if v ~= '0' and (not string.match(v, '^[1-9]%d*$') or #v > 19 or (#v == 19 and v > MAX)) then
    return nil, redis.error_reply('FENCE_NOT_INTEGER ' .. key .. ' does not hold a token')
  end
  return v, nil
end
-- True when the low 32 bits of v are all ones: the counter has used up its epoch. Exact: each
-- step stays below 2^36, far inside a double's 2^53.
local function used_up(v)
  local low = 0
  for i = 1, #v do low = (low * 10 + string.byte(v, i) - 48) % 4294967296 end
  return low == 4294967295
end
-- Whether the client must re-establish the counter before it issues: mode '1' when it is
-- missing (seeding from floors), mode '2' also when its epoch is used up (epoch tokens).
local function must_reestablish(v, mode)
  if v == false then return mode ~= '0' end
  return mode == '2' and v ~= MAX and used_up(v)
end
-- Raises the counter at key (now v) to floor, a token-shaped decimal; never lowers it.
-- Compares decimal strings by length, then text. Returns the counter's value.
local function raise(key, v, floor)
  if v == false or #v < #floor or (#v == #floor and v < floor) then
    redis.call('SET', key, floor)
    return floor
  end
  return v
end
"#;

/// KEYS: lease, counter. ARGV: owner, TTL in ms, the re-establish mode (`0`, `1`, `2`), and
/// a floor to raise the counter to first (empty for none). Returns nil (held), `SEED` (the
/// client must re-establish the counter: send again with a floor), or the new token.
const ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local v, problem = counter(KEYS[2])
if problem then return problem end
if ARGV[4] ~= '' then v = raise(KEYS[2], v, ARGV[4]) end
if must_reestablish(v, ARGV[3]) then return redis.status_reply('SEED') end
if v == MAX then return redis.error_reply('FENCE_EXHAUSTED ' .. KEYS[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('INCR', KEYS[2])
return redis.call('GET', KEYS[2])
"#;

/// KEYS: counter. ARGV: the re-establish mode (`0`, `1`, `2`), and a floor to raise the
/// counter to first (empty for none).
const NEXT: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
if ARGV[2] ~= '' then v = raise(KEYS[1], v, ARGV[2]) end
if must_reestablish(v, ARGV[1]) then return redis.status_reply('SEED') end
if v == MAX then return redis.error_reply('FENCE_EXHAUSTED ' .. KEYS[1]) end
redis.call('INCR', KEYS[1])
return redis.call('GET', KEYS[1])
"#;

/// KEYS: counter.
const CURRENT: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
return v
"#;

/// KEYS: counter. ARGV: floor.
const ADVANCE: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
return raise(KEYS[1], v, ARGV[1])
"#;

/// KEYS: lease. ARGV: owner, TTL in ms. 1 if extended, 0 if the owner does not hold it.
const EXTEND: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// KEYS: lease. ARGV: owner. 1 if released, 0 if the owner does not hold it.
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// KEYS: lease. The holder and the milliseconds left, in one read (nil and a negative number
/// when nobody holds it).
const STATUS: &str = r#"
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
"#;

/// Every script, compiled (hashed) once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) next: Script,
    pub(crate) current: Script,
    pub(crate) advance: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
    pub(crate) status: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with_counter = |body: &str| Script::new(&format!("{COUNTER}{body}"));
        Scripts {
            acquire: with_counter(ACQUIRE),
            next: with_counter(NEXT),
            current: with_counter(CURRENT),
            advance: with_counter(ADVANCE),
            extend: Script::new(EXTEND),
            release: Script::new(RELEASE),
            status: Script::new(STATUS),
        }
    }
}

/// The reply that asks the caller to re-establish the counter (seed it, or open an epoch).
pub(crate) const SEED: &str = "SEED";
