//! [`LoginCode`]: the six-digit code a user receives by SMS and types back.
//!
//! Codes are drawn from the CSPRNG (the original used a non-cryptographic generator, so codes
//! could be predicted); what a user submits is parsed here before anything touches Redis, so a
//! malformed code costs no round trip and no wrong try. `Debug` hides the digits: a code in a
//! log line is a login for whoever reads the log.

use std::fmt;

use rand::Rng;

use super::refusal::{Answer, Answered, ErrorCode, Refused};

/// A six-digit login code, as sent by SMS.
#[derive(Clone, PartialEq, Eq)]
pub struct LoginCode(String);

/// Why a string is not a [`LoginCode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("验证码格式错误 (the code must be 6 digits)")]
pub struct LoginCodeError;

impl Answered for LoginCodeError {
    fn answer(&self) -> Answer {
        Refused::new(ErrorCode::InvalidCode, self.to_string()).into()
    }
}

impl LoginCode {
    /// A fresh random code from the thread-local CSPRNG.
    pub fn generate() -> Self {
        let n: u32 = rand::rng().random_range(0..1_000_000);
        Self(format!("{n:06}"))
    }

    /// Parses what a user typed: exactly six ASCII digits.
    pub fn parse(s: &str) -> Result<Self, LoginCodeError> {
        if s.len() == 6 && s.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Self(s.to_owned()))
        } else {
            Err(LoginCodeError)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LoginCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LoginCode(******)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_digits_parse_and_five_do_not() {
        assert!(LoginCode::parse("012345").is_ok());
        assert!(LoginCode::parse("12345").is_err());
    }

    #[test]
    fn generated_codes_are_six_digits_and_vary() {
        let codes: std::collections::HashSet<String> = (0..200)
            .map(|_| LoginCode::generate().as_str().to_owned())
            .collect();
        assert!(codes.iter().all(|c| LoginCode::parse(c).is_ok()));
        assert!(codes.len() > 190, "codes repeat too often: {}", codes.len());
    }

    #[test]
    fn non_digit_or_wrong_length_codes_are_rejected() {
        for c in ["", "12345", "1234567", "12345a", " 12345", "１２３４５６"] {
            assert!(LoginCode::parse(c).is_err(), "{c:?}");
        }
    }

    #[test]
    fn a_code_never_shows_in_debug_output() {
        assert!(!format!("{:?}", LoginCode::parse("123456").unwrap()).contains("123456"));
    }
}
