//! What an uploaded photo is called, and what it is.
//!
//! [`PhotoName`] is the original's name, `/blogs/{d1}/{d2}/{uuid}.{ext}`, where `d1` and `d2`
//! (decimal 0–15) are the low two nibbles of Java's `String.hashCode` of the UUID string — the
//! original's own rule, so its sample photos' names follow it too. Parsing accepts only that
//! exact shape (a lowercase hyphenated UUID, one of our four extensions, the matching folders),
//! so a name taken from a client can never reach outside the upload folder: no `..`, no
//! absolute path, no separator, no percent sign, nothing a `LIKE` pattern would treat specially.
//!
//! [`ImageKind`] is judged by the first bytes of the content (the four fixed signatures of JPEG,
//! PNG, GIF and WebP): a dozen bytes compared by hand need no dependency, and the client's file
//! name and content type say nothing trustworthy.

use std::{fmt, path::PathBuf};

/// The image formats accepted for note photos.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    Jpeg,
    Png,
    Gif,
    Webp,
}

impl ImageKind {
    /// Bytes needed to tell the kinds apart (WebP's `RIFF....WEBP`).
    pub const SNIFF_LEN: usize = 12;

    /// The kind whose signature `head` starts with, if any.
    pub fn sniff(head: &[u8]) -> Option<Self> {
        if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Self::Jpeg)
        } else if head.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Self::Png)
        } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
            Some(Self::Gif)
        } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
            Some(Self::Webp)
        } else {
            None
        }
    }

    /// The file extension (the original's sample photos are `.jpg`).
    pub fn ext(self) -> &'static str {
        match self {
            Self::Jpeg => "jpg",
            Self::Png => "png",
            Self::Gif => "gif",
            Self::Webp => "webp",
        }
    }

    /// The media type a file of this kind is served with.
    pub fn mime(self) -> &'static str {
        match self {
            Self::Jpeg => "image/jpeg",
            Self::Png => "image/png",
            Self::Gif => "image/gif",
            Self::Webp => "image/webp",
        }
    }

    fn from_ext(ext: &str) -> Option<Self> {
        [Self::Jpeg, Self::Png, Self::Gif, Self::Webp]
            .into_iter()
            .find(|k| k.ext() == ext)
    }
}

/// A string that is not the name of a photo this service hands out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a photo name of the form /blogs/<0-15>/<0-15>/<uuid>.<jpg|png|gif|webp>")]
pub struct InvalidName;

/// The name of an uploaded photo: `/blogs/{d1}/{d2}/{uuid}.{ext}` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PhotoName {
    /// The whole name, `/blogs/…`.
    name: String,
    d1: u8,
    d2: u8,
    kind: ImageKind,
}

/// The prefix the pages put in front of a name (they show `/imgs` + name).
const IMGS: &str = "/imgs";
const BLOGS: &str = "/blogs/";

impl PhotoName {
    /// A new random name for a photo of `kind`.
    pub fn generate(kind: ImageKind) -> Self {
        let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
        let (d1, d2) = folders(&uuid);
        Self {
            name: format!("{BLOGS}{d1}/{d2}/{uuid}.{}", kind.ext()),
            d1,
            d2,
            kind,
        }
    }

    /// Reads a name as handed out, with or without the pages' `/imgs` prefix.
    pub fn parse(s: &str) -> Result<Self, InvalidName> {
        let s = s.strip_prefix(IMGS).unwrap_or(s);
        let rest = s.strip_prefix(BLOGS).ok_or(InvalidName)?;
        let mut parts = rest.split('/');
        let (Some(d1), Some(d2), Some(file), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(InvalidName);
        };
        let (d1, d2) = (folder(d1)?, folder(d2)?);
        let (uuid, ext) = file.split_once('.').ok_or(InvalidName)?;
        let kind = ImageKind::from_ext(ext).ok_or(InvalidName)?;
        if !is_lower_hyphenated_uuid(uuid) || folders(uuid) != (d1, d2) {
            return Err(InvalidName);
        }
        Ok(Self {
            name: s.to_owned(),
            d1,
            d2,
            kind,
        })
    }

    /// `/blogs/…`, as answered by the upload and stored (behind `/imgs`) in `tb_blog.images`.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> ImageKind {
        self.kind
    }

    /// The folders below the upload folder: `blogs`, `d1`, `d2`.
    pub fn folders(&self) -> [String; 3] {
        ["blogs".to_owned(), self.d1.to_string(), self.d2.to_string()]
    }

    /// `{uuid}.{ext}`.
    pub fn file_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or_default()
    }

    /// The file being written before it is renamed into place: `.{uuid}.{ext}.part`, a name
    /// [`PhotoName::parse`] refuses, so it is never served.
    pub fn part_file_name(&self) -> String {
        format!(".{}.part", self.file_name())
    }

    /// `blogs/d1/d2/{uuid}.{ext}`, relative to the upload folder.
    pub fn relative_path(&self) -> PathBuf {
        let mut p: PathBuf = self.folders().iter().collect();
        p.push(self.file_name());
        p
    }
}

impl fmt::Display for PhotoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// `0`–`15` in decimal, without leading zeros.
fn folder(s: &str) -> Result<u8, InvalidName> {
    let ok = matches!(s.len(), 1 | 2)
        && s.bytes().all(|b| b.is_ascii_digit())
        && !(s.len() == 2 && s.starts_with('0'));
    match s.parse::<u8>() {
        Ok(n) if ok && n < 16 => Ok(n),
        _ => Err(InvalidName),
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase hex digits.
fn is_lower_hyphenated_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// The original's folders of a UUID string: the low and the next nibble of its Java
/// `String.hashCode`.
fn folders(uuid: &str) -> (u8, u8) {
    let hash = java_string_hash(uuid);
    ((hash & 0xF) as u8, ((hash >> 4) & 0xF) as u8)
}

/// Java's `String.hashCode` (`s[0]·31^(n-1) + … + s[n-1]`, wrapping, over UTF-16 units).
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_follow_the_original_for_its_sample_photos() {
        // Names from the original's `tb_blog.images`.
        for name in [
            "/imgs/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/imgs/blogs/4/10/2f07e3c9-ddce-482d-9ea7-c21450f8d7cd.jpg",
            "/imgs/blogs/15/9/cea51d9b-ac15-49f6-b9f1-9cf81e9b9c85.jpg",
            "/imgs/blogs/4/0/26a7cd7e-6320-432c-a0b4-1b7418f45ec7.jpg",
        ] {
            let parsed = PhotoName::parse(name).unwrap();
            assert_eq!(format!("/imgs{parsed}"), name);
        }
    }

    #[test]
    fn generated_names_parse_back_with_and_without_imgs() {
        for kind in [
            ImageKind::Jpeg,
            ImageKind::Png,
            ImageKind::Gif,
            ImageKind::Webp,
        ] {
            let name = PhotoName::generate(kind);
            assert_eq!(PhotoName::parse(name.as_str()).unwrap(), name);
            assert_eq!(PhotoName::parse(&format!("/imgs{name}")).unwrap(), name);
            assert!(name.as_str().ends_with(kind.ext()));
            assert_eq!(
                name.relative_path(),
                PathBuf::from(&name.as_str()[1..]),
                "{name}"
            );
            assert!(PhotoName::parse(&name.part_file_name()).is_err());
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let good = "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg";
        assert!(PhotoName::parse(good).is_ok());
        for bad in [
            "",
            "/",
            "/blogs",
            "/blogs/",
            "blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/7/14",
            "/blogs/7/14/",
            "/blogs/07/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/7/e/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/8/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/7/16/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/7/14/4771FEFB-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.JPG",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpeg",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.html",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg.part",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a",
            "/blogs/7/14/4771fefb1a874252816c9f7ec41ffa4a.jpg",
            "/blogs/7/14/../../../etc/passwd",
            "/blogs/../blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg/",
            "/blogs/7/14/x/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs//7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "//blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/imgs/imgs/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/etc/passwd",
            "/blogs/7/14/%2e%2e",
            "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg\0",
            "/blogs/7/14\\4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
            "/blogs/+7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
        ] {
            assert_eq!(PhotoName::parse(bad), Err(InvalidName), "{bad:?}");
        }
    }

    #[test]
    fn images_are_told_by_their_first_bytes() {
        assert_eq!(
            ImageKind::sniff(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10]),
            Some(ImageKind::Jpeg)
        );
        assert_eq!(
            ImageKind::sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
            Some(ImageKind::Png)
        );
        assert_eq!(ImageKind::sniff(b"GIF89a\x01\0"), Some(ImageKind::Gif));
        assert_eq!(ImageKind::sniff(b"GIF87a"), Some(ImageKind::Gif));
        assert_eq!(
            ImageKind::sniff(b"RIFF\x24\0\0\0WEBPVP8 "),
            Some(ImageKind::Webp)
        );
        for not in [
            &b""[..],
            b"\xFF\xD8",
            b"\x89PNG",
            b"GIF88a",
            b"RIFF\x24\0\0\0WAVEfmt ",
            b"RIFF\x24\0\0\0WEB",
            b"<svg xmlns='http://www.w3.org/2000/svg'/>",
            b"hello, world",
        ] {
            assert_eq!(ImageKind::sniff(not), None, "{not:?}");
        }
    }
}
