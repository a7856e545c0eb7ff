//! [`Phone`]: a mainland-China mobile number, checked against the original's phone rule.
//!
//! A phone is the login identity and part of Redis key names (`login:code:{phone}`), so only a
//! parsed one reaches Redis or the database: nothing else can inject into a key or a query.
//! `Display` and `Debug` mask the middle digits, because phones end up in logs; [`mask_phones`]
//! does the same to phones in any text, such as the URIs of the request log.

use std::{fmt, sync::LazyLock};

use regex::Regex;

use super::refusal::{Answer, Answered, ErrorCode, Refused};

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

impl Answered for PhoneError {
    fn answer(&self) -> Answer {
        Refused::new(ErrorCode::InvalidPhone, self.to_string()).into()
    }
}

static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^1(?:[38][0-9]|4[579]|5[0-35-9]|66|7[0135678]|9[89])[0-9]{8}$")
        .expect("static regex")
});

impl Phone {
    /// Parses a phone number; surrounding whitespace is not accepted.
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
        mask(&self.0)
    }
}

/// The first three and last four characters around `****`; only `****` for text shorter than a
/// phone, which would show too much of itself.
fn mask(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 11 {
        return "****".to_owned();
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}****{tail}")
}

/// `text` (a URI, say) with every phone masked as [`Phone::masked`] does: the value of each
/// `phone=` parameter, whatever it holds, and every run of exactly eleven digits that starts
/// with `1` (a mainland mobile number, wherever it is).
pub(crate) fn mask_phones(text: &str) -> std::borrow::Cow<'_, str> {
    static PARAM: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)((?:^|[?&;])phone=)([^&;#]*)").expect("static regex"));
    static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[0-9]+").expect("static regex"));
    let params = PARAM.replace_all(text, |c: &regex::Captures<'_>| {
        if c[2].is_empty() {
            c[0].to_owned()
        } else {
            format!("{}{}", &c[1], mask(&c[2]))
        }
    });
    let mobile = |run: &str| run.len() == 11 && run.starts_with('1');
    if !DIGITS.find_iter(&params).any(|m| mobile(m.as_str())) {
        return params;
    }
    let masked = DIGITS.replace_all(&params, |c: &regex::Captures<'_>| {
        if mobile(&c[0]) {
            mask(&c[0])
        } else {
            c[0].to_owned()
        }
    });
    std::borrow::Cow::Owned(masked.into_owned())
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
    fn a_mainland_mobile_parses_and_a_landline_shape_does_not() {
        assert!(Phone::parse("13812345678").is_ok());
        assert!(Phone::parse("12345678901").is_err());
    }

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
    fn phones_in_uris_are_masked() {
        for (uri, shown) in [
            (
                "/user/code?phone=13812345678",
                "/user/code?phone=138****5678",
            ),
            (
                "/api/user/code?x=1&PHONE=13812345678&y=2",
                "/api/user/code?x=1&PHONE=138****5678&y=2",
            ),
            // Not a valid phone, still a phone's worth of personal data.
            (
                "/user/code?phone=%2B8613812345678",
                "/user/code?phone=%2B****5678",
            ),
            ("/user/code?phone=1381234", "/user/code?phone=****"),
            ("/user/code?phone=", "/user/code?phone="),
            ("/somewhere/13812345678/x", "/somewhere/138****5678/x"),
            // Ids stay: other lengths, or not starting with 1.
            ("/shop/12345", "/shop/12345"),
            (
                "/voucher-order/123456789012345678",
                "/voucher-order/123456789012345678",
            ),
            ("/x/23812345678", "/x/23812345678"),
            ("/user/code?telephone=5", "/user/code?telephone=5"),
        ] {
            assert_eq!(mask_phones(uri), shown, "{uri}");
        }
        assert!(matches!(
            mask_phones("/shop/1"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn the_phone_is_masked_in_logs() {
        let p = Phone::parse("13812345678").unwrap();
        assert_eq!(p.to_string(), "138****5678");
        assert_eq!(format!("{p:?}"), "Phone(138****5678)");
        assert_eq!(p.as_str(), "13812345678");
    }
}
