//! Where a resource's lease and counter live: two keys sharing one Redis Cluster hash tag.

use fencing_core::{InputKind, InvalidInput, ResourceName};

/// The key layout: `<lock prefix>{<resource>}`, `<token prefix>{<resource>}`, the
/// counter's history `<token prefix>{<resource>}:history` and the opening of its loss
/// `<token prefix>{<resource>}:opening`, e.g. `lock:{settle:m_4471}`,
/// `fence:{settle:m_4471}`, `fence:{settle:m_4471}:history` and
/// `fence:{settle:m_4471}:opening`.
///
/// The braces are a Redis Cluster hash tag: the keys hash to the same slot, so one script can
/// touch them all on a cluster. A resource name containing `{` or `}` would move or split the tag,
/// so it is refused; so is a prefix containing one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisKeys {
    lock_prefix: String,
    token_prefix: String,
}

impl RedisKeys {
    /// A layout with these prefixes, which must differ and contain no brace.
    pub fn new(
        lock_prefix: impl Into<String>,
        token_prefix: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        let (lock_prefix, token_prefix) = (lock_prefix.into(), token_prefix.into());
        for prefix in [&lock_prefix, &token_prefix] {
            if prefix.contains(['{', '}']) || prefix.chars().any(char::is_control) {
                return Err(InvalidInput::new(
                    InputKind::Identifier,
                    format!("key prefix {prefix:?} may not contain braces or control characters"),
                ));
            }
        }
        if lock_prefix == token_prefix {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!("the lock and token prefixes are both {lock_prefix:?}"),
            ));
        }
        Ok(RedisKeys {
            lock_prefix,
            token_prefix,
        })
    }

    /// The lease key of `resource`.
    pub fn lock_key(&self, resource: &ResourceName) -> Result<String, InvalidInput> {
        Ok(format!("{}{{{}}}", self.lock_prefix, tag(resource)?))
    }

    /// The counter key of `resource`.
    pub fn token_key(&self, resource: &ResourceName) -> Result<String, InvalidInput> {
        Ok(format!("{}{{{}}}", self.token_prefix, tag(resource)?))
    }

    /// [`Self::token_key`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `RedisKeys::token_key`")]
    #[doc(hidden)]
    pub fn counter_key(&self, resource: &ResourceName) -> Result<String, InvalidInput> {
        self.token_key(resource)
    }

    /// The key that binds the counter of `resource` to the server history that last
    /// established it (`<counter key>:history`, same hash tag): a counter read on another
    /// history may be behind the tokens issued (a failover to a lagging replica, a restart
    /// from an older snapshot), and epoch-prefixed tokens then open a new epoch.
    pub fn history_key(&self, resource: &ResourceName) -> Result<String, InvalidInput> {
        Ok(format!("{}:history", self.token_key(resource)?))
    }

    /// The key that names the loss of the counter of `resource` while it is lost and not yet
    /// re-established (`<counter key>:opening`, same hash tag): every client that finds the
    /// loss opens the same epoch for it.
    pub fn opening_key(&self, resource: &ResourceName) -> Result<String, InvalidInput> {
        Ok(format!("{}:opening", self.token_key(resource)?))
    }
}

impl Default for RedisKeys {
    /// `lock:{…}` and `fence:{…}`.
    fn default() -> Self {
        RedisKeys {
            lock_prefix: "lock:".into(),
            token_prefix: "fence:".into(),
        }
    }
}

fn tag(resource: &ResourceName) -> Result<&str, InvalidInput> {
    if resource.contains(['{', '}']) {
        return Err(InvalidInput::new(
            InputKind::ResourceName,
            format!("{resource:?} contains a brace, which would break the Redis Cluster hash tag"),
        ));
    }
    Ok(resource.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_counter_share_the_hash_tag() {
        let keys = RedisKeys::default();
        let r = ResourceName::new("settle:m_4471").unwrap();
        assert_eq!(keys.lock_key(&r).unwrap(), "lock:{settle:m_4471}");
        assert_eq!(keys.token_key(&r).unwrap(), "fence:{settle:m_4471}");
        assert_eq!(
            keys.history_key(&r).unwrap(),
            "fence:{settle:m_4471}:history"
        );
        assert_eq!(
            keys.opening_key(&r).unwrap(),
            "fence:{settle:m_4471}:opening"
        );
    }

    #[test]
    fn braces_are_refused() {
        let keys = RedisKeys::default();
        for name in ["{x}", "a}b", "a{b", "}{"] {
            let r = ResourceName::new(name).unwrap();
            assert_eq!(
                keys.lock_key(&r).unwrap_err().kind(),
                InputKind::ResourceName
            );
        }
        assert!(RedisKeys::new("lock:{", "fence:").is_err());
        assert!(RedisKeys::new("same:", "same:").is_err());
        assert!(RedisKeys::new("l:", "f:").is_ok());
    }
}
