//! Notes: writing one (checked and sanitised), deleting one, and the views the pages list.
//!
//! The original pages render `content` with `v-html`, so a note's HTML runs in every reader's
//! browser. It is cleaned on write ([`SafeHtml`]: formatting, links and images of this site
//! stay; scripts, event handlers, `javascript:` URLs, styles and images of other hosts go; its
//! photos are paths of this site too; the notes of an adopted database are
//! cleaned once, by a migration), and the length
//! limits of the original columns (`varchar(255)` title, `varchar(2048)` content and images)
//! are checked in characters after cleaning, so what is stored is exactly what was checked.

use chrono::{NaiveDateTime, Timelike};
use serde::{Deserialize, Serialize};

use super::{Social, SocialError};
use crate::{
    domain::{ApiDateTime, BlogId, SafeHtml, ShopId, UserId, is_site_path},
    storage::blogs::{self, BlogRow, NewBlog},
};

/// Notes per page of `/blog/hot`, `/blog/of/me` and `/blog/of/user` (the original's
/// `MAX_PAGE_SIZE`).
pub(crate) const PAGE_SIZE: i64 = 10;

/// The most photos one note may have.
pub(crate) const MAX_IMAGES: usize = 9;

const TITLE_MAX: usize = 255;
const CONTENT_MAX: usize = 2048;
const IMAGES_MAX: usize = 2048;

/// A new note, as the original's `Blog` JSON carries it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlogInput {
    /// The shop the note is about (it must exist).
    pub shop_id: ShopId,
    /// 1 to 255 characters.
    #[schema(min_length = 1, max_length = 255)]
    pub title: String,
    /// HTML; cleaned of anything that could run in a reader's browser, then 1 to 2048
    /// characters.
    #[schema(min_length = 1, max_length = 2048)]
    pub content: String,
    /// Up to 9 photo paths, comma-separated (as `/upload/blog` hands them out, under `/imgs`).
    #[serde(default)]
    #[schema(max_length = 2048, example = "/imgs/blogs/1/2/photo.jpg")]
    pub images: String,
}

/// A note, field for field the original's `Blog` JSON (null fields omitted).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Blog {
    pub id: BlogId,
    pub shop_id: i64,
    pub user_id: UserId,
    pub title: String,
    /// Photo paths, comma-separated.
    pub images: String,
    /// Sanitised HTML.
    pub content: String,
    /// How many users like the note.
    pub liked: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comments: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create_time: Option<ApiDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_time: Option<ApiDateTime>,
    /// The author's nickname.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The author's icon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// Whether the viewer likes the note (only for a logged-in viewer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_like: Option<bool>,
}

impl Blog {
    fn from_row(row: BlogRow, is_like: Option<bool>) -> Self {
        Blog {
            id: row.id,
            shop_id: row.shop_id,
            user_id: row.user_id,
            title: row.title,
            images: row.images,
            content: row.content,
            liked: row.liked,
            comments: row.comments,
            create_time: row.create_time.map(ApiDateTime),
            update_time: row.update_time.map(ApiDateTime),
            name: row.name,
            icon: row.icon,
            is_like,
        }
    }
}

/// A note's fields, checked and cleaned.
#[derive(Debug, PartialEq, Eq)]
struct Checked {
    title: String,
    content: String,
    images: String,
}

fn invalid(msg: impl Into<String>) -> SocialError {
    SocialError::InvalidBlog(msg.into())
}

/// Checks and cleans a note's text; the shop is checked by the caller.
fn check(input: &BlogInput) -> Result<Checked, SocialError> {
    let title = input.title.trim();
    if title.is_empty() {
        return Err(invalid("标题不能为空 (title must not be empty)"));
    }
    if title.chars().count() > TITLE_MAX {
        return Err(invalid(format!(
            "标题过长 (title must be at most {TITLE_MAX} characters)"
        )));
    }
    if title.chars().any(char::is_control) {
        return Err(invalid(
            "标题不能包含控制字符 (title must not contain control characters)",
        ));
    }
    let content = clean_content(&input.content, CONTENT_MAX).map_err(invalid)?;
    let images = input.images.trim();
    if images.chars().count() > IMAGES_MAX {
        return Err(invalid(format!(
            "图片过多 (images must be at most {IMAGES_MAX} characters)"
        )));
    }
    let paths: Vec<&str> = if images.is_empty() {
        Vec::new()
    } else {
        images.split(',').map(str::trim).collect()
    };
    if paths.len() > MAX_IMAGES {
        return Err(invalid(format!("图片过多 (at most {MAX_IMAGES} photos)")));
    }
    if !paths.iter().all(|p| is_image_path(p)) {
        return Err(invalid(
            "图片地址错误 (images must be paths of this site like /imgs/blogs/…, comma-separated)",
        ));
    }
    Ok(Checked {
        title: title.to_owned(),
        content,
        images: paths.join(","),
    })
}

/// Cleans user HTML (a note's or a comment's content) as [`SafeHtml`] does and checks that it
/// is 1 to `max` characters once cleaned; the refusal's message otherwise.
pub(super) fn clean_content(raw: &str, max: usize) -> Result<String, String> {
    if raw
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err("内容不能包含控制字符 (content must not contain control characters)".into());
    }
    let content = SafeHtml::clean(raw).into_string();
    if content.trim().is_empty() {
        return Err("内容不能为空 (content must not be empty)".into());
    }
    if content.chars().count() > max {
        return Err(format!(
            "内容过长 (content must be at most {max} characters after cleaning)"
        ));
    }
    Ok(content)
}

/// A photo reference the pages can put in `<img src>`: a path on this site (a photo on another
/// host would learn every reader's address), without characters that could leave the
/// attribute.
fn is_image_path(p: &str) -> bool {
    is_site_path(p) && !p.chars().any(|c| "\"'<>`".contains(c))
}

/// Now in server-local time, to the second (the original stores `LocalDateTime.now()`).
pub(super) fn now_local() -> (NaiveDateTime, i64) {
    let now = chrono::Local::now();
    let naive = now.naive_local();
    (
        naive.with_nanosecond(0).unwrap_or(naive),
        now.timestamp_millis(),
    )
}

impl Social {
    /// Publishes a note by `author` and hands it to the followers' feeds; its id.
    pub async fn publish(&self, author: UserId, input: &BlogInput) -> Result<BlogId, SocialError> {
        let checked = check(input)?;
        if !self.catalogue.shop_exists(input.shop_id).await? {
            return Err(invalid("店铺不存在 (shopId names no shop)"));
        }
        let (now, score) = now_local();
        let id = blogs::insert(
            &self.db,
            &NewBlog {
                shop_id: input.shop_id,
                user_id: author,
                title: &checked.title,
                images: &checked.images,
                content: &checked.content,
                now,
            },
        )
        .await?;
        self.distribute(author, id, score).await;
        Ok(id)
    }

    /// Deletes `author`'s note: its row, comments, likes (rows and set) and feed entries; the
    /// photos it listed (comma-separated, as stored), for the caller to hand back to the
    /// upload clean-up.
    ///
    /// The rows and the like set go under the note's row lock, so a like toggled at the same
    /// time either comes before (and goes with the note) or finds no note. The feeds are
    /// cleaned after the commit (the followers' inboxes and the author's outbox); an entry
    /// that stays behind (a follower who has unfollowed since, a failed clean-up) names a
    /// note that is no more, which a scroll leaves out.
    pub async fn delete_blog(&self, id: BlogId, author: UserId) -> Result<String, SocialError> {
        let key = self.keys.blog_liked(id.get());
        let del_likes = || async move {
            redis::AsyncCommands::del::<_, ()>(&mut self.conn(), key).await?;
            Ok::<_, SocialError>(())
        };
        match blogs::delete_locked(&self.db, id, author, del_likes).await? {
            blogs::Deleted::NoNote => Err(SocialError::BlogNotFound),
            blogs::Deleted::NotAuthor => Err(SocialError::NotYourBlog),
            blogs::Deleted::Done { images } => {
                self.withdraw(author, id).await;
                Ok(images)
            }
        }
    }

    /// One note with its author and whether `viewer` likes it.
    pub async fn blog(&self, id: BlogId, viewer: UserId) -> Result<Blog, SocialError> {
        let row = blogs::find(&self.db, id)
            .await?
            .ok_or(SocialError::BlogNotFound)?;
        Ok(self.views(vec![row], Some(viewer)).await?.remove(0))
    }

    /// Page `current` of the most liked notes; `isLike` only for a logged-in viewer.
    pub async fn hot(
        &self,
        current: i64,
        viewer: Option<UserId>,
    ) -> Result<Vec<Blog>, SocialError> {
        let rows = blogs::hot(&self.db, current, PAGE_SIZE).await?;
        self.views(rows, viewer).await
    }

    /// Page `current` of one author's notes.
    pub async fn of_user(
        &self,
        author: UserId,
        current: i64,
        viewer: UserId,
    ) -> Result<Vec<Blog>, SocialError> {
        let rows = blogs::of_user(&self.db, author, current, PAGE_SIZE).await?;
        self.views(rows, Some(viewer)).await
    }

    /// Rows as the pages show them: `isLike` from the like sets when there is a viewer.
    pub(super) async fn views(
        &self,
        rows: Vec<BlogRow>,
        viewer: Option<UserId>,
    ) -> Result<Vec<Blog>, SocialError> {
        let Some(viewer) = viewer else {
            return Ok(rows.into_iter().map(|r| Blog::from_row(r, None)).collect());
        };
        let liked = self
            .likes_of(viewer, &rows.iter().map(|r| r.id).collect::<Vec<_>>())
            .await?;
        Ok(rows
            .into_iter()
            .zip(liked)
            .map(|(r, l)| Blog::from_row(r, Some(l)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(title: &str, content: &str, images: &str) -> BlogInput {
        BlogInput {
            shop_id: ShopId::new(1).unwrap(),
            title: title.into(),
            content: content.into(),
            images: images.into(),
        }
    }

    #[test]
    fn scripts_and_handlers_are_removed_and_formatting_kept() {
        let c = check(&input(
            "t",
            "<p onclick=\"x()\">hi<br/><b>there</b></p><script>alert(1)</script>\
             <img src=x onerror=alert(1)><a href=\"javascript:alert(1)\">l</a>",
            "",
        ))
        .unwrap();
        for bad in ["<script", "onerror", "onclick", "javascript:", "alert"] {
            assert!(!c.content.contains(bad), "{bad} in {}", c.content);
        }
        assert!(c.content.contains("<br>") && c.content.contains("<b>there</b>"));
        assert!(c.content.contains("<img src=\"x\">"), "{}", c.content);
    }

    #[test]
    fn lengths_count_characters_after_cleaning() {
        assert!(check(&input(&"好".repeat(255), "x", "")).is_ok());
        assert!(check(&input(&"好".repeat(256), "x", "")).is_err());
        assert!(check(&input("t", &"好".repeat(2048), "")).is_ok());
        // `<` becomes `&lt;` (4 characters): 600 of them are 2400 characters once cleaned.
        assert!(check(&input("t", &"<".repeat(600), "")).is_err());
        assert!(check(&input("  ", "x", "")).is_err());
        assert!(check(&input("t", "<script>only</script>", "")).is_err());
    }

    #[test]
    fn images_are_site_paths_only() {
        assert_eq!(
            check(&input("t", "x", "/imgs/a.jpg, /imgs/b.png"))
                .unwrap()
                .images,
            "/imgs/a.jpg,/imgs/b.png"
        );
        for bad in [
            "https://example.com/a.jpg",
            "http://example.com/a.jpg",
            "/\\example.com/a.jpg",
            "javascript:alert(1)",
            "//evil.example/a.jpg",
            "/a.jpg\" onerror=\"x",
            "/a.jpg,,/b.jpg",
        ] {
            assert!(check(&input("t", "x", bad)).is_err(), "{bad}");
        }
        let ten = ["/imgs/a.jpg"; 10].join(",");
        assert!(check(&input("t", "x", &ten)).is_err());
    }
}
