//! Comments on notes (`tb_blog_comments`, the original's table) and `tb_blog.comments`, their
//! count.
//!
//! A comment is added or deleted inside one write transaction that holds the note's row lock
//! (as `storage::likes` takes it) and moves the count by the rows it changed, in SQL
//! (`comments = comments + 1`), never by a number read before: racing posts and deletes keep
//! the count equal to the rows. `parent_id` is the top-level comment a reply belongs to and
//! `answer_id` the comment it answers; 0 means none, as in the original.

use chrono::NaiveDateTime;

use super::{BeginWrite, Db, Result, StorageError, impl_from_row, last_id, lock_note};
use crate::domain::{BlogId, CommentId, UserId};

/// A comment with its author's name and icon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommentRow {
    pub id: CommentId,
    pub user_id: UserId,
    pub blog_id: BlogId,
    /// 0 for a top-level comment.
    pub parent_id: i64,
    /// 0 when the comment answers none.
    pub answer_id: i64,
    pub content: String,
    pub create_time: Option<NaiveDateTime>,
    /// The author's nickname (`None` when the author's row is gone).
    pub name: Option<String>,
    pub icon: Option<String>,
}

fn decode_err(e: impl std::error::Error + Send + Sync + 'static) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(e))
}

impl_from_row!(CommentRow, |row| {
    let id: i64 = row.try_get_unchecked("id")?;
    let user_id: i64 = row.try_get_unchecked("user_id")?;
    let blog_id: i64 = row.try_get_unchecked("blog_id")?;
    Ok(CommentRow {
        id: CommentId::new(id).map_err(decode_err)?,
        user_id: UserId::new(user_id).map_err(decode_err)?,
        blog_id: BlogId::new(blog_id).map_err(decode_err)?,
        parent_id: row.try_get_unchecked("parent_id")?,
        answer_id: row.try_get_unchecked("answer_id")?,
        content: row.try_get_unchecked("content")?,
        create_time: row.try_get_unchecked("create_time")?,
        name: row.try_get_unchecked("nick_name")?,
        icon: row.try_get_unchecked("icon")?,
    })
});

/// A new comment, its content already checked and cleaned.
#[derive(Debug, Clone)]
pub(crate) struct NewComment<'a> {
    pub blog: BlogId,
    pub user: UserId,
    pub parent: Option<CommentId>,
    pub answer: Option<CommentId>,
    pub content: &'a str,
    /// Server-local time.
    pub now: NaiveDateTime,
}

/// Why a comment was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotAdded {
    NoNote,
    /// `parentId` names no top-level comment of the note.
    BadParent,
    /// `answerId` names no comment of the note.
    BadAnswer,
    /// `answerId` names a comment outside the thread `parentId` names.
    AnswerOutsideParent,
}

/// Why a comment was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotDeleted {
    NoComment,
    /// The user wrote neither the comment nor its note.
    NotAuthor,
}

/// Deletes a thread's replies (found through `idx_blog_comments_parent`). Apart from the
/// comment itself, which goes by its primary key: one `id = ? OR parent_id = ?` may use
/// neither index and scan the table while it holds the write lock.
pub const DELETE_REPLIES: &str = "DELETE FROM tb_blog_comments WHERE parent_id = ?";

/// Reads (blog_id, parent_id, user_id) of a comment inside `tx`, locking it on MySQL.
macro_rules! comment_head {
    ($db:expr, $tx:expr, $id:expr) => {{
        let head: Option<(i64, i64, i64)> = sqlx::query_as(if matches!($db, Db::MySql(_)) {
            "SELECT CAST(blog_id AS SIGNED), CAST(parent_id AS SIGNED), CAST(user_id AS SIGNED) \
             FROM tb_blog_comments WHERE id = ? FOR UPDATE"
        } else {
            "SELECT blog_id, parent_id, user_id FROM tb_blog_comments WHERE id = ?"
        })
        .bind($id)
        .fetch_optional(&mut *$tx)
        .await
        .map_err(StorageError::from)?;
        head
    }};
}

/// Adds a comment and counts it on its note, under the note's lock; its id, or why not.
pub(crate) async fn insert(
    db: &Db,
    c: &NewComment<'_>,
) -> Result<std::result::Result<CommentId, NotAdded>> {
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        if !lock_note!(db, tx, c.blog) {
            return Ok(Err(NotAdded::NoNote));
        }
        let blog = c.blog.get();
        // The thread (top-level comment) the new one joins, 0 for none.
        let mut thread = 0;
        if let Some(answer) = c.answer {
            match comment_head!(db, tx, answer.get()) {
                Some((b, parent, _)) if b == blog => {
                    thread = if parent == 0 { answer.get() } else { parent };
                }
                _ => return Ok(Err(NotAdded::BadAnswer)),
            }
        }
        if let Some(parent) = c.parent {
            match comment_head!(db, tx, parent.get()) {
                Some((b, 0, _)) if b == blog => {}
                _ => return Ok(Err(NotAdded::BadParent)),
            }
            if c.answer.is_some() && thread != parent.get() {
                return Ok(Err(NotAdded::AnswerOutsideParent));
            }
            thread = parent.get();
        }
        let r = sqlx::query(
            "INSERT INTO tb_blog_comments (user_id, blog_id, parent_id, answer_id, content, \
             liked, status, create_time, update_time) VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?)",
        )
        .bind(c.user.get())
        .bind(blog)
        .bind(thread)
        .bind(c.answer.map_or(0, CommentId::get))
        .bind(c.content)
        .bind(c.now)
        .bind(c.now)
        .execute(&mut *tx)
        .await?;
        let id = last_id(&r);
        sqlx::query("UPDATE tb_blog SET comments = COALESCE(comments, 0) + 1 WHERE id = ?")
            .bind(blog)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        CommentId::new(id)
            .map(Ok)
            .map_err(|e| StorageError::Query(decode_err(e)))
    })
}

/// Deletes a comment (with the replies of its thread when it is a top-level one) that `user`
/// wrote, or that was written on `user`'s note, and takes them off its note's count, under the
/// note's lock; how many comments went, or why none did.
pub(crate) async fn delete(
    db: &Db,
    id: CommentId,
    user: UserId,
) -> Result<std::result::Result<u64, NotDeleted>> {
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        // The note is locked before the comment is, as an insert does; the comment is read
        // again under the lock.
        let blog: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(blog_id AS SIGNED) FROM tb_blog_comments WHERE id = ?",
        )
        .bind(id.get())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(blog) = blog.and_then(|b| BlogId::new(b).ok()) else {
            return Ok(Err(NotDeleted::NoComment));
        };
        if !lock_note!(db, tx, blog) {
            return Ok(Err(NotDeleted::NoComment));
        }
        let (parent, author) = match comment_head!(db, tx, id.get()) {
            Some((b, parent, author)) if b == blog.get() => (parent, author),
            _ => return Ok(Err(NotDeleted::NoComment)),
        };
        if author != user.get() {
            let note_author: Option<i64> =
                sqlx::query_scalar("SELECT CAST(user_id AS SIGNED) FROM tb_blog WHERE id = ?")
                    .bind(blog.get())
                    .fetch_optional(&mut *tx)
                    .await?;
            if note_author != Some(user.get()) {
                return Ok(Err(NotDeleted::NotAuthor));
            }
        }
        let mut gone = sqlx::query("DELETE FROM tb_blog_comments WHERE id = ?")
            .bind(id.get())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if parent == 0 {
            gone += sqlx::query(DELETE_REPLIES)
                .bind(id.get())
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        let n = i64::try_from(gone).unwrap_or(i64::MAX);
        sqlx::query(
            "UPDATE tb_blog SET comments = CASE WHEN COALESCE(comments, 0) > ? \
             THEN COALESCE(comments, 0) - ? ELSE 0 END WHERE id = ?",
        )
        .bind(n)
        .bind(n)
        .bind(blog.get())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(gone))
    })
}

/// Page `current` (from 1) of `size` comments on a note, newest first.
pub(crate) async fn of_blog(
    db: &Db,
    blog: BlogId,
    current: i64,
    size: i64,
) -> Result<Vec<CommentRow>> {
    let sql = "SELECT c.id, c.user_id, c.blog_id, c.parent_id, c.answer_id, c.content, \
               c.create_time, u.nick_name, u.icon \
               FROM tb_blog_comments c LEFT JOIN tb_user u ON u.id = c.user_id \
               WHERE c.blog_id = ? ORDER BY c.id DESC LIMIT ? OFFSET ?";
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, CommentRow>(sql)
            .bind(blog.get())
            .bind(size)
            .bind((current - 1) * size)
            .fetch_all(pool)
            .await?
    }))
}
