//! Where a resource's lock and token live: two keys under prefixes of their own.

use fencing_core::{InputKind, InvalidInput, ResourceName};

/// The key layout: `<lock prefix><resource>` holds the lease (its value the owner, bound to
/// the etcd lease), `<token prefix><resource>` the last token issued (its `mod_revision`),
/// e.g. `fencing/lock/settle:m_4471` and `fencing/token/settle:m_4471`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdKeys {
    lock_prefix: String,
    token_prefix: String,
}

impl EtcdKeys {
    /// A layout with these prefixes. Neither may start the other (a resource's lock key
    /// would then be another resource's token key), and neither may be empty.
    pub fn new(
        lock_prefix: impl Into<String>,
        token_prefix: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        let (lock_prefix, token_prefix) = (lock_prefix.into(), token_prefix.into());
        let bad = |why: String| Err(InvalidInput::new(InputKind::Identifier, why));
        if lock_prefix.is_empty() || token_prefix.is_empty() {
            return bad("etcd key prefixes may not be empty".to_owned());
        }
        if lock_prefix.starts_with(&token_prefix) || token_prefix.starts_with(&lock_prefix) {
            return bad(format!(
                "the lock prefix {lock_prefix:?} and the token prefix {token_prefix:?} overlap: \
                 one resource's lock key could be another's token key"
            ));
        }
        Ok(EtcdKeys {
            lock_prefix,
            token_prefix,
        })
    }

    /// The lock key of `resource`.
    pub fn lock_key(&self, resource: &ResourceName) -> String {
        format!("{}{resource}", self.lock_prefix)
    }

    /// The token key of `resource`.
    pub fn token_key(&self, resource: &ResourceName) -> String {
        format!("{}{resource}", self.token_prefix)
    }
}

impl Default for EtcdKeys {
    /// `fencing/lock/…` and `fencing/token/…`.
    fn default() -> Self {
        EtcdKeys {
            lock_prefix: "fencing/lock/".into(),
            token_prefix: "fencing/token/".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_that_overlap_or_are_empty_are_refused() {
        assert!(EtcdKeys::new("a/", "a/b/").is_err());
        assert!(EtcdKeys::new("a/b/", "a/").is_err());
        assert!(EtcdKeys::new("same/", "same/").is_err());
        assert!(EtcdKeys::new("", "t/").is_err());
        let keys = EtcdKeys::new("l/", "t/").unwrap();
        let resource = ResourceName::new("settle:m_4471").unwrap();
        assert_eq!(keys.lock_key(&resource), "l/settle:m_4471");
        assert_eq!(keys.token_key(&resource), "t/settle:m_4471");
        let default = EtcdKeys::default();
        assert_ne!(default.lock_key(&resource), default.token_key(&resource));
    }
}
