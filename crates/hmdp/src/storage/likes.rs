//! Likers (`hmdp_blog_like`: one row per note and user, with the time of the like in ms), the
//! record a lost `blog:liked:{id}` set is rebuilt from, and `tb_blog.liked`, their count.
//!
//! Every toggle and every rebuild of one note runs inside one write transaction that holds the
//! note's row lock (on SQLite the database's write lock, on MySQL `SELECT … FOR UPDATE` on the
//! `tb_blog` row), with the Redis step run before the commit: the changes of one note reach
//! Redis and the table in the same order, and a rebuild never interleaves with a toggle.
//! `social::likes` says what a failure between the two writes leaves behind.

use super::{BeginWrite, Db, Result, StorageError, lock_note};
use crate::domain::{BlogId, UserId};

/// One like: who, and when (ms since the epoch, the score of the like in Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Like {
    pub user: i64,
    pub at_ms: i64,
}

/// What the Redis side of a toggle answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Toggled {
    /// The toggle was applied: whether the user now likes the note, and how many users do.
    Applied { likes: bool, count: i64 },
    /// The note's set is not loaded (lost, evicted, never built): nothing was changed.
    NotLoaded,
}

/// How many rows one multi-row insert writes (3 parameters each).
const INSERT_CHUNK: usize = 300;

/// Reads the note's likers (inside `tx`).
macro_rules! read_likes {
    ($tx:expr, $blog:expr) => {{
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT CAST(user_id AS SIGNED), liked_at FROM hmdp_blog_like WHERE blog_id = ?",
        )
        .bind($blog.get())
        .fetch_all(&mut *$tx)
        .await
        .map_err(StorageError::from)?;
        rows.into_iter()
            .map(|(user, at_ms)| Like { user, at_ms })
            .collect::<Vec<Like>>()
    }};
}

/// Adds likes the table does not have yet (inside `tx`).
macro_rules! insert_likes {
    ($db:expr, $tx:expr, $blog:expr, $likes:expr) => {
        for chunk in $likes.chunks(INSERT_CHUNK) {
            let sql = insert_sql($db, chunk.len());
            let mut q = sqlx::query(&sql);
            for like in chunk {
                q = q.bind($blog.get()).bind(like.user).bind(like.at_ms);
            }
            q.execute(&mut *$tx).await.map_err(StorageError::from)?;
        }
    };
}

fn insert_sql(db: &Db, rows: usize) -> String {
    let verb = match db {
        Db::Sqlite(_) => "INSERT OR IGNORE",
        Db::MySql(_) => "INSERT IGNORE",
    };
    let values = vec!["(?, ?, ?)"; rows].join(", ");
    format!("{verb} INTO hmdp_blog_like (blog_id, user_id, liked_at) VALUES {values}")
}

/// Toggles `user`'s like of `blog` under the note's lock: `toggle` applies it to Redis; when
/// Redis says the set is not loaded, `rebuild` is handed the table's likers and answers the
/// likes Redis held that the table lacks (kept too), and the toggle is tried again. Then the
/// like row is written or deleted and `tb_blog.liked` set to the count Redis answered, and the
/// transaction commits.
///
/// `Ok(None)`: no such note (nothing is run). `Ok(Some(Toggled::NotLoaded))`: the set was lost
/// again after every rebuild (nothing is written).
pub(crate) async fn toggle_locked<E, T, TFut, R, RFut>(
    db: &Db,
    blog: BlogId,
    user: UserId,
    at_ms: i64,
    mut toggle: T,
    mut rebuild: R,
) -> Result<Option<Toggled>, E>
where
    T: FnMut() -> TFut,
    TFut: std::future::Future<Output = Result<Toggled, E>>,
    R: FnMut(Vec<Like>) -> RFut,
    RFut: std::future::Future<Output = Result<Option<Vec<Like>>, E>>,
    E: From<StorageError>,
{
    let insert = insert_sql(db, 1);
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await.map_err(StorageError::from)?;
        if !lock_note!(db, tx, blog) {
            return Ok(None);
        }
        let mut outcome = toggle().await?;
        for _ in 0..2 {
            if outcome != Toggled::NotLoaded {
                break;
            }
            let likes = read_likes!(tx, blog);
            if let Some(extra) = rebuild(likes).await? {
                insert_likes!(db, tx, blog, extra);
            }
            outcome = toggle().await?;
        }
        let Toggled::Applied { likes, count } = outcome else {
            // Keeps what the rebuilds recorded: likes Redis held that the table lacked.
            tx.commit().await.map_err(StorageError::from)?;
            return Ok(Some(Toggled::NotLoaded));
        };
        if likes {
            sqlx::query(&insert)
                .bind(blog.get())
                .bind(user.get())
                .bind(at_ms)
                .execute(&mut *tx)
                .await
                .map_err(StorageError::from)?;
        } else {
            sqlx::query("DELETE FROM hmdp_blog_like WHERE blog_id = ? AND user_id = ?")
                .bind(blog.get())
                .bind(user.get())
                .execute(&mut *tx)
                .await
                .map_err(StorageError::from)?;
        }
        sqlx::query("UPDATE tb_blog SET liked = ? WHERE id = ?")
            .bind(count.max(0))
            .bind(blog.get())
            .execute(&mut *tx)
            .await
            .map_err(StorageError::from)?;
        tx.commit().await.map_err(StorageError::from)?;
        Ok(Some(outcome))
    })
}

/// Rebuilds `blog`'s set under the note's lock: `rebuild` is handed the table's likers and
/// answers `None` when the set was loaded meanwhile, else the likes Redis held that the table
/// lacks, which are added to it. False when there is no such note (`rebuild` is not run).
pub(crate) async fn rebuild_locked<E, R, RFut>(db: &Db, blog: BlogId, rebuild: R) -> Result<bool, E>
where
    R: FnOnce(Vec<Like>) -> RFut,
    RFut: std::future::Future<Output = Result<Option<Vec<Like>>, E>>,
    E: From<StorageError>,
{
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await.map_err(StorageError::from)?;
        if !lock_note!(db, tx, blog) {
            return Ok(false);
        }
        let likes = read_likes!(tx, blog);
        if let Some(extra) = rebuild(likes).await? {
            insert_likes!(db, tx, blog, extra);
        }
        tx.commit().await.map_err(StorageError::from)?;
        Ok(true)
    })
}
