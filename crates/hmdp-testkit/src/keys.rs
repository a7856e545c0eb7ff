//! Keys a test writes on the shared Redis: a prefix of their own, removed afterwards.

/// A fresh key prefix, `t:<uuid>:`, so tests sharing a server never meet.
pub fn unique_prefix() -> String {
    format!("t:{}:", uuid::Uuid::new_v4().simple())
}

/// Deletes every key under `prefix` on the Redis at `url`, including slot mates whose keys
/// start with `{prefix`. Blocking and best effort (errors are ignored), so `Drop` can call it.
pub fn remove_keys(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_connection() else {
        return;
    };
    for pattern in [format!("{prefix}*"), format!("{{{prefix}*")] {
        let mut cursor: u64 = 0;
        loop {
            let Ok((next, keys)) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query::<(u64, Vec<String>)>(&mut conn)
            else {
                return;
            };
            if !keys.is_empty() {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&keys).query(&mut conn);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
}

/// A key prefix whose keys are removed from the shared test Redis when it is dropped, so they
/// go away even when a test fails half-way.
pub struct KeyPrefix(pub String);

impl KeyPrefix {
    /// A fresh prefix (see [`unique_prefix`]).
    pub fn new() -> Self {
        Self(unique_prefix())
    }
}

impl Default for KeyPrefix {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KeyPrefix {
    fn drop(&mut self) {
        remove_keys(&crate::redis_url(), &self.0);
    }
}
