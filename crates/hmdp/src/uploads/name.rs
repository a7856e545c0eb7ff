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
//! PNG, GIF and WebP), before anything is written; the client's file name and content type say
//! nothing trustworthy. A signature is six bytes anyone can type, so the written file's header
//! is then read for its dimensions (`imagesize`, [`ImageKind::dimensions`]): a file whose header
//! does not parse as its kind, or an image of absurd size (a decompression bomb for every
//! reader's browser), is refused.

use std::{
    fmt,
    io::{self, BufReader},
    path::{Path, PathBuf},
};

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

    /// The widest or tallest image accepted, in pixels.
    pub const MAX_SIDE: u64 = 20_000;
    /// The most pixels an accepted image may have (50 megapixels).
    pub const MAX_PIXELS: u64 = 50_000_000;

    /// The width and height the header of the image file at `path` declares, when it parses as
    /// an image of this kind within [`Self::MAX_SIDE`] and [`Self::MAX_PIXELS`]; `None` for
    /// anything else. Reads only the header (blocking: call it off the async threads).
    pub fn dimensions(self, path: &Path) -> io::Result<Option<(u64, u64)>> {
        let mut file = BufReader::new(std::fs::File::open(path)?);
        let parsed = imagesize::reader_type(&mut file)
            .and_then(|kind| Ok((kind, kind.reader_size(&mut file)?)));
        let (kind, size) = match parsed {
            Ok(parsed) => parsed,
            Err(imagesize::ImageError::IoError(e)) if e.kind() != io::ErrorKind::UnexpectedEof => {
                return Err(e);
            }
            Err(_) => return Ok(None),
        };
        let (width, height) = (size.width as u64, size.height as u64);
        let fits = (1..=Self::MAX_SIDE).contains(&width)
            && (1..=Self::MAX_SIDE).contains(&height)
            && width * height <= Self::MAX_PIXELS;
        Ok((self.is(kind) && fits).then_some((width, height)))
    }

    fn is(self, kind: imagesize::ImageType) -> bool {
        use imagesize::ImageType as T;
        matches!(
            (self, kind),
            (Self::Jpeg, T::Jpeg)
                | (Self::Png, T::Png)
                | (Self::Gif, T::Gif)
                | (Self::Webp, T::Webp)
        )
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

    /// A JPEG: SOI, a JFIF APP0 segment, a baseline frame header of `width`×`height` (when
    /// given), EOI.
    fn jpeg(frame: Option<(u16, u16)>) -> Vec<u8> {
        let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
        jpeg.extend(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        if let Some((width, height)) = frame {
            jpeg.extend([0xFF, 0xC0, 0x00, 0x0B, 0x08]);
            jpeg.extend(height.to_be_bytes());
            jpeg.extend(width.to_be_bytes());
            jpeg.extend([0x01, 0x01, 0x11, 0x00]);
        }
        jpeg.extend([0xFF, 0xD9]);
        jpeg
    }

    /// A PNG signature and header chunk declaring `width`×`height` (nothing else is read).
    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend(width.to_be_bytes());
        png.extend(height.to_be_bytes());
        png.extend([8, 2, 0, 0, 0, 0, 0, 0, 0]);
        png
    }

    fn gif(width: u16, height: u16) -> Vec<u8> {
        let mut gif = b"GIF89a".to_vec();
        gif.extend(width.to_le_bytes());
        gif.extend(height.to_le_bytes());
        gif.extend([0; 4]);
        gif.push(0x3B);
        gif
    }

    /// A lossless WebP header of `width`×`height` (1 to 16,384).
    fn webp(width: u32, height: u32) -> Vec<u8> {
        let mut webp = b"RIFF\x1a\0\0\0WEBPVP8L\x0d\0\0\0\x2f".to_vec();
        webp.extend(((width - 1) | ((height - 1) << 14)).to_le_bytes());
        webp.extend([0; 9]);
        webp
    }

    #[test]
    fn dimensions_come_from_the_real_header() {
        let dir = tempfile::tempdir().unwrap();
        let check = |kind: ImageKind, data: &[u8]| {
            let path = dir.path().join("photo");
            std::fs::write(&path, data).unwrap();
            kind.dimensions(&path).unwrap()
        };
        use ImageKind::*;
        assert_eq!(check(Jpeg, &jpeg(Some((640, 480)))), Some((640, 480)));
        assert_eq!(check(Png, &png(1, 1)), Some((1, 1)));
        assert_eq!(check(Gif, &gif(3, 2)), Some((3, 2)));
        assert_eq!(check(Webp, &webp(3, 2)), Some((3, 2)));
        assert_eq!(check(Png, &png(20_000, 2_500)), Some((20_000, 2_500)));

        for (kind, data, what) in [
            (Gif, b"GIF89a".to_vec(), "a bare GIF signature"),
            (Png, b"\x89PNG\r\n\x1a\n".to_vec(), "a bare PNG signature"),
            (Jpeg, jpeg(None), "a JPEG without a frame"),
            (Jpeg, vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00], "a cut JPEG"),
            (Gif, gif(0, 5), "no pixels"),
            (Png, png(20_001, 1), "a side over 20,000 px"),
            (Png, png(1, 20_001), "a side over 20,000 px"),
            (Png, png(8_000, 8_000), "64 megapixels"),
            (Webp, webp(16_384, 16_384), "268 megapixels"),
            (Jpeg, png(1, 1), "another kind than the one sniffed"),
        ] {
            assert_eq!(check(kind, &data), None, "{what}");
        }
        assert!(Png.dimensions(&dir.path().join("missing")).is_err());
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
