//! Note content that is safe to put into a page as HTML.
//!
//! The original pages render a note's `content` with `v-html`, so whatever HTML it holds runs
//! in every reader's browser. A [`SafeHtml`] exists only as the output of `ammonia` (an
//! allow-list: formatting, links and images stay; scripts, event handlers, `javascript:` URLs
//! and styles go). Cleaning what it produced changes nothing, so cleaning a note twice (on
//! write, then again when adopting a database) leaves it as it was.

use std::sync::LazyLock;

/// The cleaner: ammonia's defaults (links get `rel="noopener noreferrer"`).
static CLEANER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(ammonia::Builder::default);

/// HTML cleaned of anything that could run in a reader's browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SafeHtml(String);

impl SafeHtml {
    /// Cleans `html`.
    pub(crate) fn clean(html: &str) -> Self {
        SafeHtml(CLEANER.clean(html).to_string())
    }

    /// Cleans `html` and cuts what is left to at most `max` characters (a column's width),
    /// cleaning again after each cut, since a cut can split a tag or an entity.
    pub(crate) fn clean_within(html: &str, max: usize) -> Self {
        let mut out = Self::clean(html);
        let mut room = max;
        for _ in 0..8 {
            let len = out.0.chars().count();
            if len <= max {
                return out;
            }
            room = room.saturating_sub(len - max + 16);
            let cut: String = out.0.chars().take(room).collect();
            out = Self::clean(&cut);
        }
        SafeHtml(String::new())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "<p onclick=\"x()\">hi<br/><b>there</b></p><script>alert(1)</script>\
        <img src=x onerror=alert(1)><a href=\"javascript:alert(1)\">l</a>\
        <a href=\"https://example.com/\">ok</a><style>p{}</style>";

    #[test]
    fn cleaning_what_was_cleaned_changes_nothing() {
        let once = SafeHtml::clean(HOSTILE);
        for bad in [
            "<script",
            "onerror",
            "onclick",
            "javascript:",
            "alert",
            "<style",
        ] {
            assert!(!once.as_str().contains(bad), "{bad} in {}", once.as_str());
        }
        assert_eq!(SafeHtml::clean(once.as_str()), once);
        for kept in [
            "line<br>next",
            "<p>a <b>b</b> <i>c</i> &amp; &lt;d&gt;</p>",
            "<a href=\"https://example.com/\" rel=\"noopener noreferrer\">x</a>",
            "<img src=\"/imgs/blogs/1/2/a.jpg\">",
        ] {
            assert_eq!(SafeHtml::clean(kept).as_str(), kept);
        }
    }

    #[test]
    fn a_cut_to_fit_is_cleaned_again() {
        // Every `<` becomes `&lt;` (4 characters): far too long once cleaned.
        let long = "<".repeat(3000);
        let fit = SafeHtml::clean_within(&long, 2048);
        assert!(fit.as_str().chars().count() <= 2048);
        assert!(!fit.as_str().contains('<'), "no bare `<` after the cut");
        let tag = format!(
            "{}<a href=\"https://example.com/\">link</a>",
            "好".repeat(2040)
        );
        let fit = SafeHtml::clean_within(&tag, 2048);
        assert!(fit.as_str().chars().count() <= 2048);
        assert_eq!(SafeHtml::clean(fit.as_str()), fit);
        assert_eq!(
            SafeHtml::clean_within("<b>x</b>", 2048).as_str(),
            "<b>x</b>"
        );
    }
}
