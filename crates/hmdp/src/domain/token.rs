//! [`SessionToken`]: the random token that names a login session (`login:token:{token}`).
//!
//! Tokens are 128 bits from the CSPRNG, so they cannot be guessed. The `authorization` header
//! is parsed into one before any Redis lookup: a header of the wrong shape is anonymous at once,
//! and cannot be used to probe or inject key names. `Debug` shows only a prefix.

use std::fmt;

use rand::RngCore;

/// A login session token: 128 random bits as 32 lower-case hex characters, the same shape as
/// the original's `UUID.toString(true)`, so the original front-end stores and sends it unchanged.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionToken(String);

impl SessionToken {
    /// A fresh token from the thread-local CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        Self(hex::encode(bytes))
    }

    /// Parses the `authorization` header value. Anything that is not a token's shape is
    /// `None` and never reaches Redis.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        (s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Enough to correlate log lines, too little to reuse the session.
        write!(f, "SessionToken({}…)", &self.0[..6])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_two_hex_digits_parse_and_other_shapes_do_not() {
        assert!(SessionToken::parse("0123456789abcdef0123456789abcdef").is_some());
        assert!(SessionToken::parse("Bearer x").is_none());
    }

    #[test]
    fn generated_tokens_parse_back_and_are_unique() {
        let a = SessionToken::generate();
        let b = SessionToken::generate();
        assert_ne!(a, b);
        assert_eq!(SessionToken::parse(a.as_str()), Some(a));
    }

    #[test]
    fn malformed_tokens_are_rejected() {
        for t in [
            "",
            "abc",
            "0123456789ABCDEF0123456789ABCDEF",
            "0123456789abcdef0123456789abcdeg",
            "0123456789abcdef0123456789abcdef0",
            "login:token:*",
        ] {
            assert!(SessionToken::parse(t).is_none(), "{t:?}");
        }
    }

    #[test]
    fn debug_output_shows_only_a_prefix() {
        let t = SessionToken::parse("0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(format!("{t:?}"), "SessionToken(012345…)");
    }
}
