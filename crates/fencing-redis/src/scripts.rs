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
"#;

/// KEYS: lease, counter. ARGV: owner, TTL in ms, `1` if a missing counter must be seeded.
/// Returns nil (held), `SEED` (counter missing), or the new token as a string.
const ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local v, problem = counter(KEYS[2])
if problem then return problem end
if v == false and ARGV[3] == '1' then return redis.status_reply('SEED') end
if v == MAX then return redis.error_reply('FENCE_EXHAUSTED ' .. KEYS[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('INCR', KEYS[2])
return redis.call('GET', KEYS[2])
"#;

/// KEYS: counter. ARGV: `1` if a missing counter must be seeded.
const NEXT: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
if v == false and ARGV[1] == '1' then return redis.status_reply('SEED') end
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

/// KEYS: counter. ARGV: floor. Compares decimal strings by length, then text.
const ADVANCE: &str = r#"
local v, problem = counter(KEYS[1])
if problem then return problem end
local floor = ARGV[1]
if v == false or #v < #floor or (#v == #floor and v < floor) then
  redis.call('SET', KEYS[1], floor)
  return floor
end
return v
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

/// Every script, compiled (hashed) once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) next: Script,
    pub(crate) current: Script,
    pub(crate) advance: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
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
        }
    }
}

/// The reply that asks the caller to seed a missing counter.
pub(crate) const SEED: &str = "SEED";
