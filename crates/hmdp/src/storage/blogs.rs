//! Notes (`tb_blog`): reads and writes, and deleting a note with what hangs on it.
//!
//! A note row comes with its author's `nick_name` and `icon` (a `LEFT JOIN tb_user`), which is
//! what every page that lists notes shows. `liked` is the number of the note's likers, written
//! under the row's lock by `storage::likes` (see `social::likes` for why).

use chrono::NaiveDateTime;

use super::{BeginWrite, Db, Result, StorageError, impl_from_row, last_id};
use crate::domain::{BlogId, ShopId, UserId};

/// A `tb_blog` row with its author's name and icon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlogRow {
    pub id: BlogId,
    pub shop_id: i64,
    pub user_id: UserId,
    pub title: String,
    pub images: String,
    pub content: String,
    pub liked: i64,
    pub comments: Option<i64>,
    pub create_time: Option<NaiveDateTime>,
    pub update_time: Option<NaiveDateTime>,
    /// The author's nickname (`None` when the author's row is gone).
    pub name: Option<String>,
    /// The author's icon.
    pub icon: Option<String>,
}

fn decode_err(e: impl std::error::Error + Send + Sync + 'static) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(e))
}

impl_from_row!(BlogRow, |row| {
    let id: i64 = row.try_get_unchecked("id")?;
    let user_id: i64 = row.try_get_unchecked("user_id")?;
    Ok(BlogRow {
        id: BlogId::new(id).map_err(decode_err)?,
        shop_id: row.try_get_unchecked("shop_id")?,
        user_id: UserId::new(user_id).map_err(decode_err)?,
        title: row.try_get_unchecked("title")?,
        images: row.try_get_unchecked("images")?,
        content: row.try_get_unchecked("content")?,
        liked: row
            .try_get_unchecked::<Option<i64>, _>("liked")?
            .unwrap_or(0),
        comments: row.try_get_unchecked("comments")?,
        create_time: row.try_get_unchecked("create_time")?,
        update_time: row.try_get_unchecked("update_time")?,
        name: row.try_get_unchecked("nick_name")?,
        icon: row.try_get_unchecked("icon")?,
    })
});

/// The columns of [`BlogRow`]; `b` is `tb_blog`, `u` its author.
const SELECT: &str = "SELECT b.id, b.shop_id, b.user_id, b.title, b.images, b.content, \
     b.liked, b.comments, b.create_time, b.update_time, u.nick_name, u.icon \
     FROM tb_blog b LEFT JOIN tb_user u ON u.id = b.user_id";

/// A new note, already checked and sanitised.
#[derive(Debug, Clone)]
pub(crate) struct NewBlog<'a> {
    pub shop_id: ShopId,
    pub user_id: UserId,
    pub title: &'a str,
    pub images: &'a str,
    pub content: &'a str,
    /// Server-local time (the original's `LocalDateTime.now()`).
    pub now: NaiveDateTime,
}

/// Inserts a note with no likes; its id.
pub(crate) async fn insert(db: &Db, blog: &NewBlog<'_>) -> Result<BlogId> {
    let id = crate::storage::on_pool!(db, pool => {
        let r = sqlx::query(
            "INSERT INTO tb_blog (shop_id, user_id, title, images, content, liked, create_time, \
             update_time) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
        )
        .bind(blog.shop_id.get())
        .bind(blog.user_id.get())
        .bind(blog.title)
        .bind(blog.images)
        .bind(blog.content)
        .bind(blog.now)
        .bind(blog.now)
        .execute(pool)
        .await?;
        last_id(&r)
    });
    BlogId::new(id).map_err(|e| StorageError::Query(decode_err(e)))
}

/// One note, if it exists.
pub(crate) async fn find(db: &Db, id: BlogId) -> Result<Option<BlogRow>> {
    let sql = format!("{SELECT} WHERE b.id = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, BlogRow>(&sql).bind(id.get()).fetch_optional(pool).await?
    }))
}

/// The notes with these ids, in the order of `ids` (missing ones left out).
pub(crate) async fn find_many(db: &Db, ids: &[BlogId]) -> Result<Vec<BlogRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("{SELECT} WHERE b.id IN ({marks})");
    let mut rows = crate::storage::on_pool!(db, pool => {
        let mut q = sqlx::query_as::<_, BlogRow>(&sql);
        for id in ids {
            q = q.bind(id.get());
        }
        q.fetch_all(pool).await?
    });
    let rank = |id: BlogId| ids.iter().position(|x| *x == id).unwrap_or(usize::MAX);
    rows.sort_by_key(|r| rank(r.id));
    Ok(rows)
}

/// Page `current` (from 1) of `size` notes, most liked first (newest first among equals).
pub(crate) async fn hot(db: &Db, current: i64, size: i64) -> Result<Vec<BlogRow>> {
    let sql = format!("{SELECT} ORDER BY b.liked DESC, b.id DESC LIMIT ? OFFSET ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, BlogRow>(&sql)
            .bind(size)
            .bind((current - 1) * size)
            .fetch_all(pool)
            .await?
    }))
}

/// Page `current` (from 1) of `size` notes of one author, in the order they were written
/// (the original's unordered page query, which the primary key orders).
pub(crate) async fn of_user(
    db: &Db,
    user: UserId,
    current: i64,
    size: i64,
) -> Result<Vec<BlogRow>> {
    let sql = format!("{SELECT} WHERE b.user_id = ? ORDER BY b.id LIMIT ? OFFSET ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, BlogRow>(&sql)
            .bind(user.get())
            .bind(size)
            .bind((current - 1) * size)
            .fetch_all(pool)
            .await?
    }))
}

/// Whether a note exists.
pub(crate) async fn exists(db: &Db, id: BlogId) -> Result<bool> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT 1 FROM tb_blog WHERE id = ?")
            .bind(id.get())
            .fetch_optional(pool)
            .await?
            .is_some()
    }))
}

/// What deleting a note did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// The note, its comments and its like rows are gone; its `images` as they were.
    Done {
        images: String,
    },
    NoNote,
    /// Someone else wrote the note: nothing was changed.
    NotAuthor,
}

/// Deletes `author`'s note with its comments and like rows under the note's lock; `redis` (the
/// note's Redis keys) runs after the rows are deleted and before the commit, so a toggle of a
/// like waiting for the lock finds no note, and a failed Redis step deletes nothing.
pub(crate) async fn delete_locked<E, F, Fut>(
    db: &Db,
    id: BlogId,
    author: UserId,
    redis: F,
) -> Result<Deleted, E>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: From<StorageError>,
{
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await.map_err(StorageError::from)?;
        if !super::lock_note!(db, tx, id) {
            return Ok(Deleted::NoNote);
        }
        let (user, images): (i64, String) =
            sqlx::query_as("SELECT CAST(user_id AS SIGNED), images FROM tb_blog WHERE id = ?")
                .bind(id.get())
                .fetch_one(&mut *tx)
                .await
                .map_err(StorageError::from)?;
        if user != author.get() {
            return Ok(Deleted::NotAuthor);
        }
        for sql in [
            "DELETE FROM tb_blog_comments WHERE blog_id = ?",
            "DELETE FROM hmdp_blog_like WHERE blog_id = ?",
            "DELETE FROM tb_blog WHERE id = ?",
        ] {
            sqlx::query(sql)
                .bind(id.get())
                .execute(&mut *tx)
                .await
                .map_err(StorageError::from)?;
        }
        redis().await?;
        tx.commit().await.map_err(StorageError::from)?;
        Ok(Deleted::Done { images })
    })
}
