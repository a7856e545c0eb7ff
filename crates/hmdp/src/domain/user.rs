//! What a session knows about its user ([`UserDto`], the original's `UserDTO`) and a user's
//! nickname ([`NickName`]: the one a new user gets, or one the user chose).
//!
//! The DTO is exactly the three fields the original keeps in the session hash and returns from
//! `/user/me`, so its pages keep working; nothing private (phone, password) is ever in it.
//! A nickname is plain text: pages must show it as text, never as HTML.

use rand::{Rng, distr::Alphanumeric};
use serde::Serialize;

use super::{
    UserId,
    refusal::{Answer, Answered, ErrorCode, Refused},
};

/// What the service knows about a logged-in user: the original's `UserDTO`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserDto {
    pub id: UserId,
    pub nick_name: String,
    pub icon: String,
}

/// A user's nickname: 1 to [`NickName::MAX`] characters (the `tb_user.nick_name` column),
/// without surrounding spaces or control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NickName(String);

/// A nickname that breaks the rule; the message says which part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NickNameError(&'static str);

impl Answered for NickNameError {
    fn answer(&self) -> Answer {
        Refused::new(ErrorCode::InvalidNickName, self.0).into()
    }
}

impl NickName {
    /// The longest nickname, in characters (`varchar(32)`).
    pub(crate) const MAX: usize = 32;

    /// The nickname given to a user created by their first login: `user_` followed by 10
    /// random lower-case letters and digits (the original's scheme).
    pub(crate) fn random() -> Self {
        let tail: String = rand::rng()
            .sample_iter(&Alphanumeric)
            .map(|b| (b as char).to_ascii_lowercase())
            .take(10)
            .collect();
        NickName(format!("user_{tail}"))
    }

    /// A nickname a user chose, trimmed.
    pub(crate) fn parse(s: &str) -> Result<Self, NickNameError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(NickNameError("昵称不能为空 (nickName must not be empty)"));
        }
        if s.chars().count() > Self::MAX {
            return Err(NickNameError(
                "昵称过长 (nickName must be at most 32 characters)",
            ));
        }
        if s.chars().any(char::is_control) {
            return Err(NickNameError(
                "昵称不能包含控制字符 (nickName must not contain control characters)",
            ));
        }
        Ok(NickName(s.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_nicknames_follow_the_original_scheme() {
        let n = NickName::random().0;
        assert_eq!(n.len(), 15);
        assert!(n.starts_with("user_"));
        assert!(
            n[5..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
    }

    #[test]
    fn chosen_nicknames_are_trimmed_and_bounded() {
        assert_eq!(NickName::parse("  小明 <b> ").unwrap().as_str(), "小明 <b>");
        assert_eq!(
            NickName::parse(&"好".repeat(32)).unwrap().as_str(),
            "好".repeat(32)
        );
        for bad in ["", "   ", "a\u{0}b", "tab\there"] {
            assert!(NickName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(NickName::parse(&"好".repeat(33)).is_err());
        assert!(NickName::parse(&NickName::random().0).is_ok());
    }
}
