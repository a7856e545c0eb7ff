//! Key and channel naming.
//!
//! Every Redis name that belongs to one lock shares the hash tag `{name}`, so
//! in Redis Cluster the lock key, the fencing counter and the unlock channel
//! all live in the same slot and a script may touch them together.

use crate::{Error, Result};

/// The Redis names used by one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    pub name: String,
    /// `{prefix}lock:{name}` — the lock itself (string or hash).
    pub lock: String,
    /// `{prefix}lock:{name}:fence` — the fencing-token counter.
    pub fence: String,
    /// `{prefix}lock:{name}:ch` — the unlock notification channel.
    pub channel: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::invalid("lock name must not be empty"));
        }
        let lock = format!("{prefix}lock:{{{name}}}");
        if hash_tag(&lock).is_none() {
            return Err(Error::invalid(format!(
                "key {lock:?} has an empty hash tag; avoid `{{}}` in the key prefix"
            )));
        }
        Ok(LockKeys {
            name: name.to_owned(),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:ch"),
            lock,
        })
    }
}

/// The part of a key Redis Cluster hashes, following the cluster spec: the
/// text between the first `{` and the next `}`, if non-empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    let tag = &key[open + 1..close];
    (!tag.is_empty()).then_some(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_share_one_hash_tag() {
        let k = LockKeys::new("t123:", "voucher:7").unwrap();
        assert_eq!(k.lock, "t123:lock:{voucher:7}");
        assert_eq!(k.fence, "t123:lock:{voucher:7}:fence");
        assert_eq!(k.channel, "t123:lock:{voucher:7}:ch");
        for key in [&k.lock, &k.fence, &k.channel] {
            assert_eq!(hash_tag(key), Some("voucher:7"));
        }
    }

    #[test]
    fn empty_prefix_is_fine() {
        let k = LockKeys::new("", "a").unwrap();
        assert_eq!(k.lock, "lock:{a}");
    }

    #[test]
    fn braces_in_prefix_still_share_a_slot() {
        let k = LockKeys::new("{svc}:", "a").unwrap();
        assert_eq!(hash_tag(&k.lock), hash_tag(&k.fence));
        assert_eq!(hash_tag(&k.lock), hash_tag(&k.channel));
    }

    #[test]
    fn rejects_empty_name_and_empty_tag() {
        assert!(LockKeys::new("p:", "").unwrap_err().is_invalid_argument());
        assert!(LockKeys::new("x{}", "a").unwrap_err().is_invalid_argument());
    }

    #[test]
    fn hash_tag_rules() {
        assert_eq!(hash_tag("foo"), None);
        assert_eq!(hash_tag("{}x"), None);
        assert_eq!(hash_tag("a{b}c{d}"), Some("b"));
        assert_eq!(hash_tag("a{b"), None);
    }
}
