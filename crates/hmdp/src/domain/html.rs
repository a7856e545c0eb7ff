//! Note content that is safe to put into a page as HTML.
//!
//! The original pages render a note's `content` with `v-html`, so whatever HTML it holds runs
//! in every reader's browser. A [`SafeHtml`] exists only as the output of `ammonia` (an
//! allow-list: formatting, links and images stay; scripts, event handlers, `javascript:` URLs
//! and styles go), narrowed so that nothing loads from another host while a page is viewed:
//! an image on another host would tell that host every reader's address, so an image (or
//! anything else fetched on view) keeps its URL only when it is a path of this site. Links to
//! other hosts stay: they need a click. Cleaning what it produced changes nothing, so cleaning
//! a note twice (on write, then again when adopting a database) leaves it as it was.

use std::{borrow::Cow, sync::LazyLock};

/// The cleaner: ammonia's defaults (links get `rel="noopener noreferrer"`), with every URL
/// fetched on view kept on this site.
static CLEANER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut builder = ammonia::Builder::default();
    builder.attribute_filter(|element, attribute, value| {
        // CSS can fetch too (`url(…)`); ammonia drops styles already.
        let off_site = attribute == "style" || !is_on_site(value);
        if loads_on_view(element, attribute) && off_site {
            None
        } else {
            Some(Cow::Borrowed(value))
        }
    });
    builder
});

/// True for an attribute whose URL the browser fetches while it shows the page (not on a
/// click). Broader than ammonia's allow-list, which drops most of these already, so that a
/// tag or attribute allowed later is covered too.
fn loads_on_view(element: &str, attribute: &str) -> bool {
    match attribute {
        "src" | "srcset" | "imagesrcset" | "poster" | "background" | "lowsrc" | "dynsrc"
        | "data" | "xlink:href" | "style" | "codebase" | "archive" | "manifest" => true,
        "href" => !matches!(element, "a" | "area"),
        _ => false,
    }
}

/// True for a URL that stays on this site: a path (`/imgs/…`) or a relative URL, with no
/// scheme, no host (`//host`, `/\host`) and nothing a browser strips or rewrites before it
/// resolves the URL (whitespace, control characters, backslashes).
fn is_on_site(url: &str) -> bool {
    if url.starts_with('/') {
        return is_site_path(url);
    }
    // A scheme is whatever comes before a `:` in the first segment.
    let first = url.split(['/', '?', '#']).next().unwrap_or_default();
    !url.is_empty() && !first.contains(':') && !has_rewritten_chars(url)
}

/// True for a path of this site (`/imgs/…`): one `/` first, never a host (`//host`,
/// `/\host`), and nothing a browser strips or rewrites before it resolves the URL.
pub(crate) fn is_site_path(url: &str) -> bool {
    url.starts_with('/') && !url[1..].starts_with('/') && !has_rewritten_chars(url)
}

/// Whitespace and control characters (browsers drop some of them anywhere in a URL, so
/// `/\t/host` is `//host`) and backslashes (read as `/`).
fn has_rewritten_chars(url: &str) -> bool {
    url.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
}

/// Keeps the entries of a note's `images` (comma-separated) that are paths of this site.
pub(crate) fn site_images(images: &str) -> String {
    images
        .split(',')
        .map(str::trim)
        .filter(|p| is_site_path(p))
        .collect::<Vec<_>>()
        .join(",")
}

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

    #[cfg(test)]
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
    fn nothing_loads_from_another_host() {
        for remote in [
            "https://evil.example/a.png",
            "HTTP://evil.example/a.png",
            "//evil.example/a.png",
            "/\\evil.example/a.png",
            "/&#9;/evil.example/a.png",
            " https://evil.example/a.png",
            "data:image/png;base64,AAAA",
            "javascript:alert(1)",
        ] {
            let html = format!("<img src=\"{remote}\" alt=\"a\">");
            assert_eq!(
                SafeHtml::clean(&html).as_str(),
                "<img alt=\"a\">",
                "{remote}"
            );
        }
        for (html, clean) in [
            ("<img srcset=\"https://evil.example/a.png 2x\">", "<img>"),
            (
                "<table background=\"https://evil.example/a.png\"></table>",
                "<table></table>",
            ),
            (
                "<p style=\"background:url(https://evil.example/a.png)\">x</p>",
                "<p>x</p>",
            ),
            ("<img src=\"imgs/a.jpg\">", "<img src=\"imgs/a.jpg\">"),
            (
                "<img src=\"/imgs/blogs/1/2/a.jpg\">",
                "<img src=\"/imgs/blogs/1/2/a.jpg\">",
            ),
        ] {
            assert_eq!(SafeHtml::clean(html).as_str(), clean, "{html}");
        }
        // Links to other hosts stay: they need a click.
        let link = "<a href=\"https://example.com/\" rel=\"noopener noreferrer\">x</a>";
        assert_eq!(SafeHtml::clean(link).as_str(), link);
    }

    #[test]
    fn a_note_s_photos_are_paths_of_this_site() {
        assert_eq!(
            site_images("/imgs/a.jpg, https://evil.example/b.jpg,//evil.example/c.jpg,/imgs/d.png"),
            "/imgs/a.jpg,/imgs/d.png"
        );
        assert_eq!(site_images("https://evil.example/b.jpg"), "");
        assert_eq!(
            site_images("/imgs/a.jpg,/imgs/b.jpg"),
            "/imgs/a.jpg,/imgs/b.jpg"
        );
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
