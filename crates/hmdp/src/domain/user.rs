//! What a session knows about its user ([`UserDto`], the original's `UserDTO`) and the
//! nickname a new user gets ([`NickName`]).
//!
//! The DTO is exactly the three fields the original keeps in the session hash and returns from
//! `/user/me`, so its pages keep working; nothing private (phone, password) is ever in it.

use rand::{Rng, distr::Alphanumeric};
use serde::Serialize;

use super::UserId;

/// What the service knows about a logged-in user: the original's `UserDTO`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserDto {
    pub id: UserId,
    pub nick_name: String,
    pub icon: String,
}

/// The nickname given to a user created by their first login.
pub(crate) struct NickName;

impl NickName {
    /// `user_` followed by 10 random lower-case letters and digits (the original's scheme).
    pub(crate) fn random() -> String {
        let tail: String = rand::rng()
            .sample_iter(&Alphanumeric)
            .map(|b| (b as char).to_ascii_lowercase())
            .take(10)
            .collect();
        format!("user_{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_nicknames_follow_the_original_scheme() {
        let n = NickName::random();
        assert_eq!(n.len(), 15);
        assert!(n.starts_with("user_"));
        assert!(
            n[5..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
    }
}
