//! [`Phone`]: a mainland-China mobile number, checked against the original's phone rule.
//!
//! A phone is the login identity and part of Redis key names (`login:code:{phone}`), so only a
//! parsed one reaches Redis or the database: nothing else can inject into a key or a query.
//! `Display` and `Debug` mask the middle digits, because phones end up in logs.

use std::{fmt, sync::LazyLock};

use regex::Regex;

/// A mainland-China mobile number in the form the original accepts.
///
/// The rule is the original's `PHONE_REGEX` prefix set (`13x`, `14[579]`, `15[0-35-9]`, `166`,
/// `17[0135678]`, `18x`, `19[89]`) followed by eight digits. The original's pattern also let a literal
/// comma through (`5[0-3,5-9]`); that is a slip in the character class, not a rule, so it is
/// not reproduced here.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Phone(String);

/// Why a string is not a [`Phone`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("手机号格式错误")]
pub struct PhoneError;

static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^1(?:[38][0-9]|4[579]|5[0-35-9]|66|7[0135678]|9[89])[0-9]{8}$")
        .expect("static regex")
});

impl Phone {
    /// Parses a phone number; surrounding whitespace is not accepted.
    ///
    /// ```
    /// use hmdp::domain::Phone;
    /// assert!(Phone::parse("13812345678").is_ok());
    /// assert!(Phone::parse("12345678901").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Self, PhoneError> {
        if PHONE.is_match(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(PhoneError)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `138****5678`: what logs show instead of the full number.
    pub fn masked(&self) -> String {
        format!("{}****{}", &self.0[..3], &self.0[7..])
    }
}

impl fmt::Debug for Phone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Phone({})", self.masked())
    }
}

impl fmt::Display for Phone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_each_allowed_prefix_are_accepted() {
        for p in [
            "13000000000",
            "13912345678",
            "14512345678",
            "14712345678",
            "14912345678",
            "15012345678",
            "15312345678",
            "15512345678",
            "15912345678",
            "16612345678",
            "17012345678",
            "17812345678",
            "18012345678",
            "18912345678",
            "19812345678",
            "19912345678",
        ] {
            assert!(Phone::parse(p).is_ok(), "{p} should be accepted");
        }
    }

    #[test]
    fn numbers_outside_the_rule_are_rejected() {
        for p in [
            "",
            "1381234567",
            "138123456789",
            "12012345678",
            "14012345678",
            "15412345678",
            "16012345678",
            "17212345678",
            "19012345678",
            "23812345678",
            " 13812345678",
            "13812345678 ",
            "1381234567a",
            "15,12345678",
            "１３８１２３４５６７８",
        ] {
            assert_eq!(Phone::parse(p), Err(PhoneError), "{p:?} should be rejected");
        }
    }

    #[test]
    fn the_phone_is_masked_in_logs() {
        let p = Phone::parse("13812345678").unwrap();
        assert_eq!(p.to_string(), "138****5678");
        assert_eq!(format!("{p:?}"), "Phone(138****5678)");
        assert_eq!(p.as_str(), "13812345678");
    }
}
