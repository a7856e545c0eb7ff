//! The questions the photo clean-up asks `tb_blog` and `tb_user`.
//!
//! A note can only use a photo uploaded before it was posted, so the upload records the newest
//! note id of that moment and the clean-up looks only at notes after it: an index range on the
//! primary key, then a `LIKE` over the few notes posted since, instead of a scan of every
//! note's `images` for every photo.

use sqlx::Row as _;

use super::{Db, Result};

/// The newest note id (0 when there are none).
pub(crate) async fn newest_blog_id(db: &Db) -> Result<i64> {
    let sql = "SELECT MAX(id) FROM tb_blog";
    let id: Option<i64> = crate::storage::on_pool!(db, pool => {
        sqlx::query(sql).fetch_one(pool).await?.try_get_unchecked(0)?
    });
    Ok(id.unwrap_or(0))
}

/// True when a note newer than `after` lists `name` (`/blogs/…`) in its `images`.
///
/// `name` must hold no `LIKE` wildcard (`%`, `_`) nor backslash; photo names never do.
pub(crate) async fn is_referenced(db: &Db, name: &str, after: i64) -> Result<bool> {
    debug_assert!(!name.contains(['%', '_', '\\']), "{name}");
    let sql = "SELECT 1 FROM tb_blog WHERE id > ? AND images LIKE ? LIMIT 1";
    let pattern = format!("%{name}%");
    let found = crate::storage::on_pool!(db, pool => {
        sqlx::query(sql)
            .bind(after)
            .bind(&pattern)
            .fetch_optional(pool)
            .await?
            .is_some()
    });
    Ok(found)
}

/// True when some user has `name` (`/blogs/…`) as their icon (stored as `/imgs/blogs/…`).
pub(crate) async fn is_an_icon(db: &Db, name: &str) -> Result<bool> {
    let sql = "SELECT 1 FROM tb_user WHERE icon = ? LIMIT 1";
    let icon = format!("/imgs{name}");
    let found = crate::storage::on_pool!(db, pool => {
        sqlx::query(sql).bind(&icon).fetch_optional(pool).await?.is_some()
    });
    Ok(found)
}
