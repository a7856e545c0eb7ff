//! Follows (`tb_follow`, the source of truth of `follows:{userId}`), and the users they name.
//!
//! Every change of whom a user follows, and every rebuild of that user's Redis set from this
//! table, runs inside one write transaction that holds a per-user lock (on SQLite the
//! database's write lock, on MySQL `SELECT … FOR UPDATE` on the follower's `tb_user` row), with
//! the Redis step run before the commit. So the changes of one user reach the database and
//! Redis in the same order, and a rebuild never interleaves with a change: the set cannot
//! drift from the table (`social::follows` explains the set's "loaded" marker).

use std::collections::HashMap;

use super::{BeginWrite, Db, Result, StorageError, impl_from_row};
use crate::domain::{UserDto, UserId};

/// Takes the per-user lock inside `tx` (MySQL); SQLite's `BEGIN IMMEDIATE` already holds one.
macro_rules! lock_user {
    ($db:expr, $tx:expr, $user:expr) => {
        if matches!($db, Db::MySql(_)) {
            sqlx::query("SELECT 1 FROM tb_user WHERE id = ? FOR UPDATE")
                .bind($user.get())
                .fetch_optional(&mut *$tx)
                .await
                .map_err(StorageError::from)?;
        }
    };
}

/// Whether `user` follows `target` (the original's `/follow/or/not`).
pub(crate) async fn is_following(db: &Db, user: UserId, target: UserId) -> Result<bool> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>(
            "SELECT 1 FROM tb_follow WHERE user_id = ? AND follow_user_id = ? LIMIT 1",
        )
        .bind(user.get())
        .bind(target.get())
        .fetch_optional(pool)
        .await?
        .is_some()
    }))
}

/// Makes `user` follow (`follow`) or stop following `target`, then runs `redis` before the
/// commit, all under `user`'s lock. Idempotent: one row per pair. A new follow is refused
/// (`Ok(false)`, nothing written, `redis` not run) when `user` already follows `max` users;
/// following someone again and unfollowing never are. If `redis` fails, nothing is written.
pub(crate) async fn set_locked<E, F, Fut>(
    db: &Db,
    user: UserId,
    target: UserId,
    follow: bool,
    max: u64,
    redis: F,
) -> Result<bool, E>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: From<StorageError>,
{
    let insert = match db {
        Db::Sqlite(_) => "INSERT OR IGNORE INTO tb_follow (user_id, follow_user_id) VALUES (?, ?)",
        Db::MySql(_) => "INSERT IGNORE INTO tb_follow (user_id, follow_user_id) VALUES (?, ?)",
    };
    let sql = if follow {
        insert
    } else {
        "DELETE FROM tb_follow WHERE user_id = ? AND follow_user_id = ?"
    };
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await.map_err(StorageError::from)?;
        lock_user!(db, tx, user);
        if follow {
            // Under the lock, so racing follows of one user cannot pass the cap together.
            let already: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM tb_follow WHERE user_id = ? AND follow_user_id = ? LIMIT 1",
            )
            .bind(user.get())
            .bind(target.get())
            .fetch_optional(&mut *tx)
            .await
            .map_err(StorageError::from)?;
            if already.is_none() {
                let count: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM tb_follow WHERE user_id = ?")
                        .bind(user.get())
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(StorageError::from)?;
                if count >= max {
                    return Ok(false);
                }
            }
        }
        sqlx::query(sql)
            .bind(user.get())
            .bind(target.get())
            .execute(&mut *tx)
            .await
            .map_err(StorageError::from)?;
        redis().await?;
        tx.commit().await.map_err(StorageError::from)?;
    });
    Ok(true)
}

/// Reads whom `user` follows and hands the ids to `redis`, under `user`'s lock (so no change
/// of the user's follows can slip in between the read and the write to Redis).
pub(crate) async fn rebuild_locked<T, E, F, Fut>(db: &Db, user: UserId, redis: F) -> Result<T, E>
where
    F: FnOnce(Vec<i64>) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: From<StorageError>,
{
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await.map_err(StorageError::from)?;
        lock_user!(db, tx, user);
        let ids: Vec<i64> = sqlx::query_scalar::<_, i64>(
            "SELECT CAST(follow_user_id AS SIGNED) FROM tb_follow WHERE user_id = ?",
        )
        .bind(user.get())
        .fetch_all(&mut *tx)
        .await
        .map_err(StorageError::from)?;
        let out = redis(ids).await?;
        tx.commit().await.map_err(StorageError::from)?;
        Ok(out)
    })
}

/// Up to `limit` followers of `author` (the fan-out's recipients).
pub(crate) async fn followers(db: &Db, author: UserId, limit: u64) -> Result<Vec<i64>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(user_id AS SIGNED) FROM tb_follow WHERE follow_user_id = ? LIMIT ?",
        )
        .bind(author.get())
        .bind(limit)
        .fetch_all(pool)
        .await?
    }))
}

/// The users both `a` and `b` follow, straight from the table (when Redis cannot say).
pub(crate) async fn common(db: &Db, a: UserId, b: UserId) -> Result<Vec<i64>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(x.follow_user_id AS SIGNED) FROM tb_follow x \
             JOIN tb_follow y ON y.follow_user_id = x.follow_user_id \
             WHERE x.user_id = ? AND y.user_id = ? ORDER BY x.follow_user_id",
        )
        .bind(a.get())
        .bind(b.get())
        .fetch_all(pool)
        .await?
    }))
}

struct UserDtoRow(UserDto);

impl_from_row!(UserDtoRow, |row| {
    let id: i64 = row.try_get_unchecked("id")?;
    Ok(UserDtoRow(UserDto {
        id: UserId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        nick_name: row
            .try_get_unchecked::<Option<String>, _>("nick_name")?
            .unwrap_or_default(),
        icon: row
            .try_get_unchecked::<Option<String>, _>("icon")?
            .unwrap_or_default(),
    }))
});

/// How many ids one `IN (…)` list binds at most (SQLite refuses more than 32,766 parameters,
/// MySQL more than 65,535).
const IN_CHUNK: usize = 500;

/// The public fields of these users, in the order of `ids` (unknown ids left out).
pub async fn users_by_ids(db: &Db, ids: &[i64]) -> Result<Vec<UserDto>> {
    // Each id's first position: the rows are put in place in linear time.
    let mut rank: HashMap<i64, usize> = HashMap::with_capacity(ids.len());
    for (at, id) in ids.iter().enumerate() {
        rank.entry(*id).or_insert(at);
    }
    let mut slots: Vec<Option<UserDto>> = vec![None; ids.len()];
    for chunk in ids.chunks(IN_CHUNK) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql = format!("SELECT id, nick_name, icon FROM tb_user WHERE id IN ({marks})");
        let rows: Vec<UserDtoRow> = crate::storage::on_pool!(db, pool => {
            let mut q = sqlx::query_as::<_, UserDtoRow>(&sql);
            for id in chunk {
                q = q.bind(id);
            }
            q.fetch_all(pool).await?
        });
        for UserDtoRow(user) in rows {
            if let Some(at) = rank.get(&user.id.get()) {
                slots[*at] = Some(user);
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}
