//! Storage: the relational database behind hmdp, SQLite (embedded default) or MySQL/MariaDB.
//!
//! The tables are the original's (`tb_user`, `tb_shop`, `tb_voucher_order`, …) so a database
//! loaded from the original `hmdp.sql` works unchanged; [`migrate`] creates only what is missing.
//!
//! One code path serves both back ends: [`Db`] is an enum over the two sqlx pools and
//! `on_pool!` expands a query once per pool type, so every query is written
//! once in the SQL both dialects share (`?` placeholders, no vendor functions). Where the
//! dialects differ (DDL, "insert or ignore"), the code says so with a plain `match`.
//!
//! Rows are read with `try_get_unchecked`: the original schema declares most integers
//! `UNSIGNED`, which sqlx refuses to decode into `i64` on MySQL although every id fits.
//!
//! The transactions of the order pipeline and of the order's life run inside a client span
//! each ([`traced`]), exported with the traces and free while traces are off.

pub(crate) mod blogs;
pub(crate) mod catalogue;
pub(crate) mod comments;
pub(crate) mod follows;
pub(crate) mod likes;
mod migrate;
pub(crate) mod order_life;
pub mod orders;
mod seed;
pub(crate) mod uploads;
pub(crate) mod users;

use std::{str::FromStr, time::Duration};

use sqlx::{
    ConnectOptions, MySql,
    migrate::MigrateDatabase,
    mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions},
};

use tracing::{Instrument as _, field};

use crate::domain::{Answer, Answered, SPAN_TARGET};

pub(crate) use migrate::MigrationReport;
pub use migrate::migrate;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The database is away or refusing every write for now (connection lost, pool timed out,
    /// deadlock, lock wait timeout, shutting down, read-only, disk or table full, I/O error,
    /// out of memory, access refused, too many connections, SQLite busy): nothing about the
    /// statement itself is wrong and it may well succeed later, so try again later.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A query failed for another reason (a bug, a schema mismatch).
    #[error("database query failed: {0}")]
    Query(#[source] sqlx::Error),
    /// The schema could not be brought up to date.
    #[error("migration failed: {0}")]
    Migration(String),
    /// The database URL is not usable.
    #[error("invalid database URL: {0}")]
    InvalidUrl(String),
}

impl StorageError {
    /// True when the failure is transient (the database away or refusing for now, see
    /// [`StorageError::Unavailable`]) rather than a bad query: retrying later is the cure.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StorageError::Unavailable(_))
    }
}

impl Answered for StorageError {
    fn answer(&self) -> Answer {
        if self.is_unavailable() {
            Answer::Unavailable("database")
        } else {
            Answer::Internal
        }
    }
}

/// True for a MySQL/MariaDB error number that says "not now" rather than "never": the server,
/// its disk or its configuration refuses, whatever the statement. Any such error would refuse
/// every order alike, so an order must never be given up on because of one.
///
/// - away or busy: 1040 too many connections, 1053 server shutdown in progress, 1205 lock wait
///   timeout, 1213 deadlock, 1927 connection killed;
/// - read-only: 1290 running with `--read-only` (a fail-over in progress), 1792 read-only
///   transaction, 1836 read-only mode, 1036 table is read only;
/// - full: 1021 disk full, 1114 table full;
/// - I/O and resources: 3 error writing a file, 1026 error writing a file, 1030 error from the
///   storage engine (e.g. no space, read-only file), 1180/1181 error during commit/rollback,
///   1037 out of memory, 1041 out of resources;
/// - access refused: 1044 database, 1045 login, 1142 table (a grant an operator changed).
fn mysql_is_transient(number: u16) -> bool {
    matches!(
        number,
        1040 | 1053
            | 1205
            | 1213
            | 1927
            | 1290
            | 1792
            | 1836
            | 1036
            | 1021
            | 1114
            | 3
            | 1026
            | 1030
            | 1180
            | 1181
            | 1037
            | 1041
            | 1044
            | 1045
            | 1142
    )
}

/// True for a SQLite result code that says "not now": 5 `SQLITE_BUSY`, 6 `SQLITE_LOCKED`,
/// 7 `SQLITE_NOMEM`, 8 `SQLITE_READONLY`, 10 `SQLITE_IOERR`, 13 `SQLITE_FULL`, 14
/// `SQLITE_CANTOPEN`, 15 `SQLITE_PROTOCOL`. The driver reports extended codes, whose low byte
/// is the primary code (`SQLITE_IOERR_WRITE` is 778, `SQLITE_READONLY_DBMOVED` 1032).
fn sqlite_is_transient(code: i64) -> bool {
    matches!(code & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14 | 15)
}

/// True when a database error is transient: retrying the same statement later can succeed.
fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        // A broken exchange (e.g. a connection cut mid-packet).
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => {
            if let Some(m) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                mysql_is_transient(m.number())
            } else if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                d.code()
                    .and_then(|c| c.parse::<i64>().ok())
                    .is_some_and(sqlite_is_transient)
            } else {
                false
            }
        }
        _ => false,
    }
}

impl From<sqlx::Error> for StorageError {
    fn from(e: sqlx::Error) -> Self {
        if is_transient(&e) {
            StorageError::Unavailable(e)
        } else {
            StorageError::Query(e)
        }
    }
}

/// Result alias of the storage layer.
pub(crate) type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Which database a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    MySql,
}

/// A connection pool to the configured database. Cloning is cheap (the pools are `Arc`s).
#[derive(Clone, Debug)]
pub enum Db {
    Sqlite(SqlitePool),
    MySql(MySqlPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool, once per back end. Exported (as
/// `hmdp::on_pool!`) only with feature `test-util`, for the tests' and the bench's own SQL.
#[cfg_attr(feature = "test-util", macro_export)]
macro_rules! on_pool {
    // Through the two accessors rather than the enum's variants, so that the expansion names no
    // path inside this crate and works in the tests and the bench as it does here.
    ($db:expr, $pool:ident => $body:expr) => {{
        let db = &$db;
        match (db.sqlite_pool(), db.mysql_pool()) {
            (Some($pool), _) => $body,
            (None, Some($pool)) => $body,
            (None, None) => unreachable!("a Db holds one of the two pools"),
        }
    }};
}
pub(crate) use on_pool;

/// Implements `sqlx::FromRow` for both row types with one body.
macro_rules! impl_from_row {
    ($ty:ty, |$row:ident| $body:block) => {
        impl<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> for $ty {
            fn from_row($row: &'r sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
                #[allow(unused_imports)]
                use sqlx::Row as _;
                $body
            }
        }
        impl<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow> for $ty {
            fn from_row($row: &'r sqlx::mysql::MySqlRow) -> Result<Self, sqlx::Error> {
                #[allow(unused_imports)]
                use sqlx::Row as _;
                $body
            }
        }
    };
}
pub(crate) use impl_from_row;

/// Takes a note's row lock inside the write transaction `tx` (on SQLite the transaction holds
/// the database's write lock already; on MySQL `SELECT … FOR UPDATE`); false when there is no
/// such note. Every write that must not interleave with another on the same note (likes,
/// comments, deleting the note) takes it first.
macro_rules! lock_note {
    ($db:expr, $tx:expr, $blog:expr) => {{
        let found: Option<i64> =
            sqlx::query_scalar(if matches!($db, $crate::storage::Db::MySql(_)) {
                "SELECT 1 FROM tb_blog WHERE id = ? FOR UPDATE"
            } else {
                "SELECT 1 FROM tb_blog WHERE id = ?"
            })
            .bind($blog.get())
            .fetch_optional(&mut *$tx)
            .await
            .map_err($crate::storage::StorageError::from)?;
        found.is_some()
    }};
}
pub(crate) use lock_note;

impl Db {
    /// The SQLite pool, if this is one (for `on_pool!`).
    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match self {
            Db::Sqlite(pool) => Some(pool),
            Db::MySql(_) => None,
        }
    }

    /// The MySQL/MariaDB pool, if this is one (for `on_pool!`).
    pub fn mysql_pool(&self) -> Option<&MySqlPool> {
        match self {
            Db::MySql(pool) => Some(pool),
            Db::Sqlite(_) => None,
        }
    }

    /// Connects to `url` (`sqlite://FILE` or `mysql://…`), creating the SQLite file (and its
    /// folder) or the MySQL database when missing.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(|e| StorageError::InvalidUrl(e.to_string()))?
                .create_if_missing(true)
                // WAL lets readers run beside the single writer; the busy timeout makes writers
                // queue instead of failing with SQLITE_BUSY.
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(5))
                .foreign_keys(false)
                .log_statements(tracing::log::LevelFilter::Trace);
            if let Some(parent) = opts.get_filename().parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent).map_err(|e| {
                    StorageError::InvalidUrl(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            let pool = SqlitePoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(opts)
                .await?;
            Ok(Db::Sqlite(pool))
        } else if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            let url = url.replacen("mariadb:", "mysql:", 1);
            let opts = MySqlConnectOptions::from_str(&url)
                .map_err(|e| StorageError::InvalidUrl(e.to_string()))?
                .charset("utf8mb4")
                .log_statements(tracing::log::LevelFilter::Trace);
            if !MySql::database_exists(&url).await? {
                tracing::info!("creating the MySQL database named in the URL");
                MySql::create_database(&url).await?;
            }
            let pool = MySqlPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(opts)
                .await?;
            Ok(Db::MySql(pool))
        } else {
            Err(StorageError::InvalidUrl(
                "expected sqlite://FILE or mysql://USER@HOST/DB".into(),
            ))
        }
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        match self {
            Db::Sqlite(_) => Backend::Sqlite,
            Db::MySql(_) => Backend::MySql,
        }
    }

    /// The database's `db.system.name`, as OpenTelemetry's conventions spell it.
    pub(crate) fn system_name(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::MySql(_) => "mysql",
        }
    }

    /// One round trip to the database (health checks).
    pub async fn ping(&self) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }

    /// Closes the pool, waiting for checked-out connections to return.
    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}

/// Runs `transaction` (one database transaction, named `operation`) inside a client span of its
/// own, a child of the caller's span, marked failed when it fails. The span is exported with the
/// traces only: while traces are off it is disabled at its call site and costs nothing.
pub(crate) async fn traced<T, E>(
    db: &Db,
    operation: &'static str,
    transaction: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "db transaction",
        otel.name = operation,
        otel.kind = "client",
        otel.status_code = field::Empty,
        db.system.name = db.system_name(),
        db.operation.name = operation,
    );
    let done = transaction.instrument(span.clone()).await;
    if done.is_err() {
        span.record("otel.status_code", "error");
    }
    done
}

/// The id generated by an `INSERT`, for either back end.
pub(crate) fn last_id<R: LastInsertId>(r: &R) -> i64 {
    r.last_id()
}

/// The auto-increment id of the row an `INSERT` created.
pub(crate) trait LastInsertId {
    fn last_id(&self) -> i64;
}

impl LastInsertId for sqlx::sqlite::SqliteQueryResult {
    fn last_id(&self) -> i64 {
        self.last_insert_rowid()
    }
}

impl LastInsertId for sqlx::mysql::MySqlQueryResult {
    fn last_id(&self) -> i64 {
        // Ids are far below 2^63; the column is UNSIGNED only because the original says so.
        self.last_insert_id() as i64
    }
}

/// Starts a transaction that will write.
///
/// On SQLite it is `BEGIN IMMEDIATE`: a plain (deferred) transaction that reads first and writes
/// later fails with `SQLITE_BUSY` when another writer got in between, while an immediate one
/// queues for the write lock under the busy timeout. MySQL needs nothing special.
pub(crate) trait BeginWrite {
    type Db: sqlx::Database;
    fn begin_write(
        &self,
    ) -> impl std::future::Future<Output = Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>>
    + Send;
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for MySqlPool {
    type Db = MySql;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, MySql>, sqlx::Error> {
        self.begin().await
    }
}

/// True when a database error is a unique-key violation.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_read_only_or_failing_database_is_unavailable_and_a_bad_statement_is_not() {
        // Disk or table full, read-only, I/O, resources, access, and the older transient ones.
        for n in [
            1114, 1021, 1290, 1792, 1836, 1036, 3, 1026, 1030, 1180, 1181, 1037, 1041, 1044, 1045,
            1142, 1040, 1053, 1205, 1213, 1927,
        ] {
            assert!(mysql_is_transient(n), "MySQL {n}");
        }
        // Duplicate key, syntax, unknown table or column, data too long, foreign key, bad value.
        for n in [1062, 1064, 1146, 1054, 1406, 1452, 1366, 1048] {
            assert!(!mysql_is_transient(n), "MySQL {n}");
        }
        // BUSY, LOCKED, NOMEM, READONLY and its extended codes (RECOVERY, CANTLOCK, ROLLBACK,
        // DBMOVED, CANTINIT, DIRECTORY), IOERR and some of its own (READ, WRITE, FSYNC,
        // SHORT_READ), FULL, CANTOPEN, PROTOCOL.
        for c in [
            5, 6, 7, 8, 264, 520, 776, 1032, 1288, 1544, 10, 266, 778, 1034, 522, 13, 14, 15,
        ] {
            assert!(sqlite_is_transient(c), "SQLite {c}");
        }
        // ERROR, CONSTRAINT (UNIQUE, PRIMARYKEY, NOTNULL), CORRUPT, MISMATCH, TOOBIG.
        for c in [1, 19, 2067, 1555, 1299, 11, 20, 18] {
            assert!(!sqlite_is_transient(c), "SQLite {c}");
        }
    }

    /// The real errors of a read-only and of a full SQLite database, from SQLite itself.
    #[tokio::test]
    async fn sqlite_read_only_and_full_are_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/t.db", dir.path().display());
        let opts = SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (x TEXT)")
            .execute(&pool)
            .await
            .unwrap();
        let code = |e: &sqlx::Error| match e {
            sqlx::Error::Database(d) => d.code().unwrap().parse::<i64>().unwrap() & 0xff,
            other => panic!("not a database error: {other:?}"),
        };

        // The file opened read-only.
        let read_only = SqlitePool::connect_with(
            SqliteConnectOptions::from_str(&format!("{url}?mode=ro")).unwrap(),
        )
        .await
        .unwrap();
        let e = sqlx::query("INSERT INTO t VALUES ('a')")
            .execute(&read_only)
            .await
            .unwrap_err();
        assert_eq!(code(&e), 8, "SQLITE_READONLY: {e}");
        assert!(StorageError::from(e).is_unavailable());

        // No page left to grow into.
        sqlx::query("PRAGMA max_page_count = 2")
            .execute(&pool)
            .await
            .unwrap();
        let e = loop {
            match sqlx::query("INSERT INTO t VALUES (?)")
                .bind("x".repeat(1000))
                .execute(&pool)
                .await
            {
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        assert_eq!(code(&e), 13, "SQLITE_FULL: {e}");
        assert!(StorageError::from(e).is_unavailable());
    }

    /// A writer that meets another's write lock without waiting gets `SQLITE_BUSY`: transient.
    #[tokio::test]
    async fn sqlite_busy_is_unavailable_and_a_bad_query_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let opts =
            SqliteConnectOptions::from_str(&format!("sqlite://{}/t.db", dir.path().display()))
                .unwrap()
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::ZERO);
        let a = SqlitePool::connect_with(opts.clone()).await.unwrap();
        let b = SqlitePool::connect_with(opts).await.unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(&a)
            .await
            .unwrap();
        let holder = a.begin_write().await.unwrap();
        let busy = sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&b)
            .await
            .unwrap_err();
        assert!(StorageError::from(busy).is_unavailable());
        drop(holder);
        let bad = sqlx::query("INSERT INTO no_such_table VALUES (1)")
            .execute(&b)
            .await
            .unwrap_err();
        assert!(!StorageError::from(bad).is_unavailable());
    }
}
