//! The fields of `tb_user_info` a user may set on their own profile: [`ProfileText`] (city,
//! introduce) and [`Birthday`].
//!
//! City and introduce are plain text, stored as typed: the pages show them as text (never as
//! HTML), as they do a note's title, so markup in them is harmless characters. Each is bounded
//! by its column (`varchar(64)`, `varchar(128)`, counted in characters as `utf8mb4` does) and
//! refuses control characters (a line break in the introduction is allowed).

use chrono::NaiveDate;

use super::refusal::{Answer, Answered, ErrorCode, Refused};

/// A profile field that breaks its rule; the message names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ProfileError(pub(crate) String);

impl Answered for ProfileError {
    fn answer(&self) -> Answer {
        Refused::new(ErrorCode::InvalidProfile, self.0.clone()).into()
    }
}

/// Which plain-text field: its name, its column's width and whether line breaks may be in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProfileText {
    City,
    Introduce,
}

impl ProfileText {
    /// The JSON name of the field.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::City => "city",
            Self::Introduce => "introduce",
        }
    }

    /// The longest value, in characters (the column's width).
    pub(crate) fn max(self) -> usize {
        match self {
            Self::City => 64,
            Self::Introduce => 128,
        }
    }

    /// `s` trimmed, when it fits the field (empty clears it).
    pub(crate) fn parse(self, s: &str) -> Result<String, ProfileError> {
        let s = s.trim();
        let (name, max) = (self.name(), self.max());
        if s.chars().count() > max {
            return Err(ProfileError(format!(
                "{name} 过长 ({name} must be at most {max} characters)"
            )));
        }
        let line_breaks = self == Self::Introduce;
        if s.chars()
            .any(|c| c.is_control() && !(line_breaks && matches!(c, '\n' | '\r')))
        {
            return Err(ProfileError(format!(
                "{name} 不能包含控制字符 ({name} must not contain control characters)"
            )));
        }
        Ok(s.to_owned())
    }
}

/// A birthday: `YYYY-MM-DD`, from [`Birthday::EARLIEST`] up to today.
pub(crate) struct Birthday;

impl Birthday {
    /// The earliest birthday accepted.
    pub(crate) const EARLIEST: NaiveDate = NaiveDate::from_ymd_opt(1900, 1, 1).expect("a date");

    /// Reads `s` as a birthday no later than `today`.
    pub(crate) fn parse(s: &str, today: NaiveDate) -> Result<NaiveDate, ProfileError> {
        let date = (s.len() == 10)
            .then(|| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())
            .flatten()
            .ok_or_else(|| {
                ProfileError("生日格式错误 (birthday must be a date YYYY-MM-DD)".to_owned())
            })?;
        if date < Self::EARLIEST || date > today {
            return Err(ProfileError(format!(
                "生日超出范围 (birthday must be between {} and today)",
                Self::EARLIEST
            )));
        }
        Ok(date)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_trimmed_and_bounded_by_their_column() {
        let hostile = "<script>alert(1)</script>";
        assert_eq!(ProfileText::City.parse(hostile).unwrap(), hostile);
        assert_eq!(ProfileText::City.parse("  杭州 ").unwrap(), "杭州");
        assert_eq!(ProfileText::City.parse("").unwrap(), "");
        assert!(ProfileText::City.parse(&"城".repeat(64)).is_ok());
        assert!(ProfileText::City.parse(&"城".repeat(65)).is_err());
        assert!(ProfileText::Introduce.parse(&"介".repeat(128)).is_ok());
        assert!(ProfileText::Introduce.parse(&"介".repeat(129)).is_err());
        assert!(ProfileText::Introduce.parse("two\nlines").is_ok());
        assert!(ProfileText::City.parse("two\nlines").is_err());
        assert!(ProfileText::Introduce.parse("nul\u{0}").is_err());
    }

    #[test]
    fn birthdays_are_dates_in_the_past() {
        let today = NaiveDate::from_ymd_opt(2026, 5, 1).unwrap();
        assert_eq!(
            Birthday::parse("2000-02-29", today).unwrap(),
            NaiveDate::from_ymd_opt(2000, 2, 29).unwrap()
        );
        assert!(Birthday::parse("2026-05-01", today).is_ok());
        assert!(Birthday::parse("1900-01-01", today).is_ok());
        for bad in [
            "2026-05-02",
            "1899-12-31",
            "2001-02-29",
            "2000-1-1",
            "2000/01/01",
            "01-01-2000",
            "",
            "2000-01-01T00:00:00",
        ] {
            assert!(Birthday::parse(bad, today).is_err(), "{bad}");
        }
    }
}
