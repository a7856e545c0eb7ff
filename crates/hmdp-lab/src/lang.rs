//! The language of the lab's human output, and laying text out for a terminal. The lab's
//! readers are mostly Chinese engineers, so Chinese is the default; `--lang en` switches every
//! sentence (in tables and in JSON) to English, while names and JSON keys never change. A
//! Chinese character takes two terminal columns, so every width here is a display width, never
//! a count of characters.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The width the human output fits in: a common terminal.
pub const COLUMNS: usize = 100;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// 中文
    #[default]
    Zh,
    /// English
    En,
}

impl Lang {
    /// `zh` or `en`, whichever is this language.
    pub fn pick<T>(self, zh: T, en: T) -> T {
        match self {
            Lang::Zh => zh,
            Lang::En => en,
        }
    }
}

/// How many terminal columns `s` takes.
pub fn width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

/// `s` followed by spaces up to `w` display columns.
pub fn pad(s: &str, w: usize) -> String {
    format!("{s}{}", " ".repeat(w.saturating_sub(width(s))))
}

/// Punctuation that never starts a line.
const NO_LINE_START: &str = "，。、；：？！）」』》”’,.;:?!)]}%";

/// `text` broken into lines of at most `max` columns: the first starts with `first`, the others
/// with `rest`. Lines break at spaces, and between any two wide (CJK) characters; a word longer
/// than a whole line is cut.
pub fn wrap(text: &str, max: usize, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_owned();
    let mut used = width(first);
    let mut empty = true;
    for (spaced, token) in tokens(text) {
        let sep = usize::from(spaced && !empty);
        let w = width(token);
        if !empty && used + sep + w > max {
            lines.push(std::mem::replace(&mut line, rest.to_owned()));
            used = width(rest);
            empty = true;
        } else if sep == 1 {
            line.push(' ');
            used += 1;
        }
        if used + w <= max || !empty {
            line.push_str(token);
            used += w;
        } else {
            // A word wider than a whole line: as much as fits, then the rest on new lines.
            for c in token.chars() {
                let cw = c.width().unwrap_or(0);
                if used + cw > max && !empty {
                    lines.push(std::mem::replace(&mut line, rest.to_owned()));
                    used = width(rest);
                }
                line.push(c);
                used += cw;
                empty = false;
            }
        }
        empty = false;
    }
    lines.push(line);
    lines
}

/// The pieces a line may break between: `(whether a space came before, piece)`. A run of
/// narrow characters without spaces is one piece; each wide character is a piece of its own;
/// punctuation that never starts a line stays with the piece before it.
fn tokens(text: &str) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut spaced = false;
    let mut last_wide = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push((spaced, &text[s..i]));
            }
            spaced = true;
            last_wide = false;
            continue;
        }
        let wide = c.width().unwrap_or(0) > 1;
        let breaks_before = wide && !NO_LINE_START.contains(c)
            || (last_wide && !wide && !NO_LINE_START.contains(c));
        if breaks_before && let Some(s) = start.take() {
            out.push((spaced, &text[s..i]));
            spaced = false;
        }
        if start.is_none() {
            start = Some(i);
        }
        last_wide = wide;
    }
    if let Some(s) = start {
        out.push((spaced, &text[s..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_by_display_width() {
        let text = "判断库存和扣减库存要在同一条 UPDATE 里原子完成：WHERE stock > 0；写成 >= 0 就会多卖一张。";
        let lines = wrap(text, 30, "结论：", "      ");
        assert!(lines.len() > 1, "{lines:?}");
        for l in &lines {
            assert!(width(l) <= 30, "{l:?} is {} wide", width(l));
            assert!(!l.trim_start().starts_with('，') && !l.trim_start().starts_with('。'));
        }
        let joined: String = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
        assert!(joined.contains("WHERE stock > 0；"), "{joined}");
    }

    #[test]
    fn english_breaks_at_spaces_only() {
        let lines = wrap("one two three four five", 9, "", "");
        assert_eq!(lines, ["one two", "three", "four five"]);
    }

    #[test]
    fn a_word_wider_than_the_line_is_cut() {
        let lines = wrap("sqlite:///tmp/a-very-long-path/lab.db", 12, "", "  ");
        assert!(lines.iter().all(|l| width(l) <= 12), "{lines:?}");
        assert_eq!(
            lines.concat().replace(' ', ""),
            "sqlite:///tmp/a-very-long-path/lab.db"
        );
    }
}
