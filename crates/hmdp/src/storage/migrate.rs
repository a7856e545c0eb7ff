//! Schema migrations, embedded in the binary and run at start (and by `hmdp migrate`).
//!
//! Why not `sqlx::migrate!`: hmdp must adopt a database that the original project created from
//! `hmdp.sql`, with no record of any migration. So every step here is idempotent on its own —
//! `CREATE TABLE IF NOT EXISTS`, and indexes created only after checking the catalogue (MySQL
//! has no `CREATE INDEX IF NOT EXISTS`) — and the `hmdp_schema_migrations` table only records
//! what ran, for operators. Running the migrations twice, or against the original database, is
//! harmless by construction.

use super::{Db, Result, StorageError, seed};
use crate::domain::{SafeHtml, site_images};

/// One schema change, with its SQL for each dialect.
struct Migration {
    version: i64,
    name: &'static str,
    steps: &'static [Step],
}

enum Step {
    /// Idempotent SQL for SQLite and for MySQL.
    Sql {
        sqlite: &'static str,
        mysql: &'static str,
    },
    /// A unique index, created only if no index of that name exists on the table.
    UniqueIndex {
        table: &'static str,
        name: &'static str,
        columns: &'static str,
    },
    /// An ordinary index, created only if missing.
    Index {
        table: &'static str,
        name: &'static str,
        columns: &'static str,
    },
    /// The demo catalogue, inserted only into an empty catalogue.
    SeedDemoCatalogue,
    /// Demo users, notes and follows, inserted only right after the demo catalogue (in the same
    /// run) and only where there are no notes, follows or demo users yet.
    SeedDemoPeople,
    /// Every note's `content` and `images` cleaned as a new note's are (rows hmdp wrote under
    /// the same rules stay as they are).
    SanitizeNotes,
    /// Every comment's `content` cleaned as a new comment's is.
    SanitizeComments,
}

/// What a migration run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versions applied by this run (empty when the schema was up to date).
    pub applied: Vec<i64>,
    /// True when the demo catalogue was inserted.
    pub seeded_demo: bool,
    /// True when the demo users, notes and follows were inserted.
    pub seeded_demo_people: bool,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "original hm-dianping tables",
        steps: &[
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_user (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    phone TEXT NOT NULL,
                    password TEXT DEFAULT '',
                    nick_name TEXT DEFAULT '',
                    icon TEXT DEFAULT '',
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_user (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    phone VARCHAR(11) NOT NULL,
                    password VARCHAR(128) NULL DEFAULT '',
                    nick_name VARCHAR(32) NULL DEFAULT '',
                    icon VARCHAR(255) NULL DEFAULT '',
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::UniqueIndex {
                table: "tb_user",
                name: "uniqe_key_phone",
                columns: "phone",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_user_info (
                    user_id INTEGER PRIMARY KEY,
                    city TEXT DEFAULT '',
                    introduce TEXT NULL,
                    fans INTEGER DEFAULT 0,
                    followee INTEGER DEFAULT 0,
                    gender INTEGER DEFAULT 0,
                    birthday TEXT NULL,
                    credits INTEGER DEFAULT 0,
                    level INTEGER DEFAULT 0,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_user_info (
                    user_id BIGINT UNSIGNED NOT NULL,
                    city VARCHAR(64) NULL DEFAULT '',
                    introduce VARCHAR(128) NULL,
                    fans INT UNSIGNED NULL DEFAULT 0,
                    followee INT UNSIGNED NULL DEFAULT 0,
                    gender TINYINT(1) UNSIGNED NULL DEFAULT 0,
                    birthday DATE NULL,
                    credits INT UNSIGNED NULL DEFAULT 0,
                    level TINYINT(1) UNSIGNED NULL DEFAULT 0,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (user_id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_shop_type (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    name TEXT NULL,
                    icon TEXT NULL,
                    sort INTEGER NULL,
                    create_time TEXT DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_shop_type (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    name VARCHAR(32) NULL,
                    icon VARCHAR(255) NULL,
                    sort INT UNSIGNED NULL,
                    create_time TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_shop (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    name TEXT NOT NULL,
                    type_id INTEGER NOT NULL,
                    images TEXT NOT NULL DEFAULT '',
                    area TEXT NULL,
                    address TEXT NOT NULL DEFAULT '',
                    x REAL NOT NULL,
                    y REAL NOT NULL,
                    avg_price INTEGER NULL,
                    sold INTEGER NOT NULL DEFAULT 0,
                    comments INTEGER NOT NULL DEFAULT 0,
                    score INTEGER NOT NULL DEFAULT 0,
                    open_hours TEXT NULL,
                    create_time TEXT DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_shop (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    name VARCHAR(128) NOT NULL,
                    type_id BIGINT UNSIGNED NOT NULL,
                    images VARCHAR(1024) NOT NULL,
                    area VARCHAR(128) NULL,
                    address VARCHAR(255) NOT NULL,
                    x DOUBLE UNSIGNED NOT NULL,
                    y DOUBLE UNSIGNED NOT NULL,
                    avg_price BIGINT UNSIGNED NULL,
                    sold INT UNSIGNED NOT NULL DEFAULT 0,
                    comments INT UNSIGNED NOT NULL DEFAULT 0,
                    score INT UNSIGNED NOT NULL DEFAULT 0,
                    open_hours VARCHAR(32) NULL,
                    create_time TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Index {
                table: "tb_shop",
                name: "foreign_key_type",
                columns: "type_id",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_voucher (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    shop_id INTEGER NULL,
                    title TEXT NOT NULL,
                    sub_title TEXT NULL,
                    rules TEXT NULL,
                    pay_value INTEGER NOT NULL,
                    actual_value INTEGER NOT NULL,
                    type INTEGER NOT NULL DEFAULT 0,
                    status INTEGER NOT NULL DEFAULT 1,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_voucher (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    shop_id BIGINT UNSIGNED NULL,
                    title VARCHAR(255) NOT NULL,
                    sub_title VARCHAR(255) NULL,
                    rules VARCHAR(1024) NULL,
                    pay_value BIGINT UNSIGNED NOT NULL,
                    actual_value BIGINT NOT NULL,
                    type TINYINT(1) UNSIGNED NOT NULL DEFAULT 0,
                    status TINYINT(1) UNSIGNED NOT NULL DEFAULT 1,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
                    voucher_id INTEGER PRIMARY KEY,
                    stock INTEGER NOT NULL,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    begin_time TEXT NOT NULL,
                    end_time TEXT NOT NULL,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                // No zero-date defaults (the original's '0000-00-00' breaks strict sql_mode):
                // both times are always written explicitly.
                mysql: "CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
                    voucher_id BIGINT UNSIGNED NOT NULL,
                    stock INT NOT NULL,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    begin_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    end_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (voucher_id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_voucher_order (
                    id INTEGER PRIMARY KEY,
                    user_id INTEGER NOT NULL,
                    voucher_id INTEGER NOT NULL,
                    pay_type INTEGER NOT NULL DEFAULT 1,
                    status INTEGER NOT NULL DEFAULT 1,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    pay_time TEXT NULL,
                    use_time TEXT NULL,
                    refund_time TEXT NULL,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_voucher_order (
                    id BIGINT NOT NULL,
                    user_id BIGINT UNSIGNED NOT NULL,
                    voucher_id BIGINT UNSIGNED NOT NULL,
                    pay_type TINYINT(1) UNSIGNED NOT NULL DEFAULT 1,
                    status TINYINT(1) UNSIGNED NOT NULL DEFAULT 1,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    pay_time TIMESTAMP NULL DEFAULT NULL,
                    use_time TIMESTAMP NULL DEFAULT NULL,
                    refund_time TIMESTAMP NULL DEFAULT NULL,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_blog (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    shop_id INTEGER NOT NULL,
                    user_id INTEGER NOT NULL,
                    title TEXT NOT NULL,
                    images TEXT NOT NULL,
                    content TEXT NOT NULL,
                    liked INTEGER DEFAULT 0,
                    comments INTEGER NULL,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_blog (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    shop_id BIGINT NOT NULL,
                    user_id BIGINT UNSIGNED NOT NULL,
                    title VARCHAR(255) NOT NULL,
                    images VARCHAR(2048) NOT NULL,
                    content VARCHAR(2048) NOT NULL,
                    liked INT UNSIGNED NULL DEFAULT 0,
                    comments INT UNSIGNED NULL,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_blog_comments (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    user_id INTEGER NOT NULL,
                    blog_id INTEGER NOT NULL,
                    parent_id INTEGER NOT NULL,
                    answer_id INTEGER NOT NULL,
                    content TEXT NOT NULL,
                    liked INTEGER NULL,
                    status INTEGER NULL,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_blog_comments (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    user_id BIGINT UNSIGNED NOT NULL,
                    blog_id BIGINT UNSIGNED NOT NULL,
                    parent_id BIGINT UNSIGNED NOT NULL,
                    answer_id BIGINT UNSIGNED NOT NULL,
                    content VARCHAR(255) NOT NULL,
                    liked INT UNSIGNED NULL,
                    status TINYINT(1) UNSIGNED NULL,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_follow (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    user_id INTEGER NOT NULL,
                    follow_user_id INTEGER NOT NULL,
                    create_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_follow (
                    id BIGINT NOT NULL AUTO_INCREMENT,
                    user_id BIGINT UNSIGNED NOT NULL,
                    follow_user_id BIGINT UNSIGNED NOT NULL,
                    create_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS tb_sign (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    user_id INTEGER NOT NULL,
                    year INTEGER NOT NULL,
                    month INTEGER NOT NULL,
                    date TEXT NOT NULL,
                    is_backup INTEGER NULL)",
                mysql: "CREATE TABLE IF NOT EXISTS tb_sign (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
                    user_id BIGINT UNSIGNED NOT NULL,
                    year YEAR NOT NULL,
                    month TINYINT NOT NULL,
                    date DATE NOT NULL,
                    is_backup TINYINT(1) UNSIGNED NULL,
                    PRIMARY KEY (id)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
        ],
    },
    Migration {
        version: 2,
        name: "one order per user and voucher, enforced by the database",
        // The original relies on a Redis set, a lock and a count() check; a unique key makes the
        // order writer idempotent however often a message is redelivered.
        steps: &[Step::UniqueIndex {
            table: "tb_voucher_order",
            name: "uk_voucher_order_user_voucher",
            columns: "user_id, voucher_id",
        }],
    },
    Migration {
        version: 3,
        name: "demo catalogue for an empty database",
        steps: &[Step::SeedDemoCatalogue],
    },
    Migration {
        version: 4,
        name: "social indexes: one follow per pair, followers, notes by author and by likes",
        // The original has no index on tb_follow or tb_blog: the unique pair makes a follow
        // idempotent; the others serve fan-out (followers of an author), `/blog/of/user` and
        // `/blog/hot`.
        steps: &[
            Step::UniqueIndex {
                table: "tb_follow",
                name: "uk_follow_user_follow",
                columns: "user_id, follow_user_id",
            },
            Step::Index {
                table: "tb_follow",
                name: "idx_follow_follow_user",
                columns: "follow_user_id",
            },
            Step::Index {
                table: "tb_blog",
                name: "idx_blog_user",
                columns: "user_id",
            },
            Step::Index {
                table: "tb_blog",
                name: "idx_blog_liked",
                columns: "liked",
            },
        ],
    },
    Migration {
        version: 5,
        name: "demo users, notes and follows for a new demo database",
        // Only where version 3 has just inserted the demo catalogue: a database that existed
        // before (the original's, or an older demo) is left as it is.
        steps: &[Step::SeedDemoPeople],
    },
    Migration {
        version: 6,
        name: "orders by voucher",
        // The unique key starts with user_id: counting a sale's orders (the public sale stats)
        // and the warm-up's snapshot scanned the whole table without this.
        steps: &[Step::Index {
            table: "tb_voucher_order",
            name: "idx_voucher_order_voucher",
            columns: "voucher_id",
        }],
    },
    Migration {
        version: 7,
        name: "likers kept in the database",
        // `blog:liked:{id}` was the only record of who likes a note: a Redis that lost it reset
        // every count. This table is what a lost set is rebuilt from (`social::likes`).
        steps: &[Step::Sql {
            sqlite: "CREATE TABLE IF NOT EXISTS hmdp_blog_like (
                blog_id INTEGER NOT NULL,
                user_id INTEGER NOT NULL,
                liked_at INTEGER NOT NULL,
                PRIMARY KEY (blog_id, user_id))",
            mysql: "CREATE TABLE IF NOT EXISTS hmdp_blog_like (
                blog_id BIGINT UNSIGNED NOT NULL,
                user_id BIGINT UNSIGNED NOT NULL,
                liked_at BIGINT NOT NULL,
                PRIMARY KEY (blog_id, user_id)
            ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        }],
    },
    Migration {
        version: 8,
        name: "notes adopted from the original database, sanitized",
        // The original never cleaned `content` and its pages render it as HTML; hmdp cleans on
        // write. Cleaning the rows once here, recorded like any migration, keeps reads free of
        // it; what hmdp wrote is clean already and is left as it is.
        steps: &[Step::SanitizeNotes],
    },
    Migration {
        version: 9,
        name: "comments found by note",
        // The original's table has only its primary key: listing a note's comments, and
        // deleting them with the note, would read every comment of every note.
        steps: &[Step::Index {
            table: "tb_blog_comments",
            name: "idx_blog_comments_blog",
            columns: "blog_id",
        }],
    },
    Migration {
        version: 10,
        name: "payments of orders, and each flash-sale voucher's initial stock",
        // The original's order row has a pay type and times but nothing of the payment itself:
        // the gateway's trade number, the amount, and whether a payment that came too late is
        // still owed back. The initial stock is what the order life cycle's invariant is
        // checked against (stock left + orders not cancelled); vouchers that exist already get
        // it from that same sum, as nothing has been cancelled before this version.
        steps: &[
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS hmdp_order_payment (
                    order_id INTEGER PRIMARY KEY,
                    trade_no TEXT NOT NULL UNIQUE,
                    amount INTEGER NOT NULL,
                    state TEXT NOT NULL,
                    created_at TEXT NOT NULL,
                    paid_at TEXT NULL,
                    refunded_at TEXT NULL)",
                mysql: "CREATE TABLE IF NOT EXISTS hmdp_order_payment (
                    order_id BIGINT NOT NULL PRIMARY KEY,
                    trade_no VARCHAR(64) NOT NULL,
                    amount BIGINT NOT NULL,
                    state VARCHAR(16) NOT NULL,
                    created_at DATETIME NOT NULL,
                    paid_at DATETIME NULL,
                    refunded_at DATETIME NULL,
                    UNIQUE KEY uk_order_payment_trade_no (trade_no)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "CREATE TABLE IF NOT EXISTS hmdp_voucher_initial_stock (
                    voucher_id INTEGER PRIMARY KEY,
                    initial_stock INTEGER NOT NULL)",
                mysql: "CREATE TABLE IF NOT EXISTS hmdp_voucher_initial_stock (
                    voucher_id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
                    initial_stock INT NOT NULL
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            },
            Step::Sql {
                sqlite: "INSERT OR IGNORE INTO hmdp_voucher_initial_stock (voucher_id, initial_stock)
                    SELECT sv.voucher_id, sv.stock + (SELECT COUNT(*) FROM tb_voucher_order o
                        WHERE o.voucher_id = sv.voucher_id AND o.status <> 4)
                    FROM tb_seckill_voucher sv",
                mysql: "INSERT IGNORE INTO hmdp_voucher_initial_stock (voucher_id, initial_stock)
                    SELECT sv.voucher_id, sv.stock + (SELECT COUNT(*) FROM tb_voucher_order o
                        WHERE o.voucher_id = sv.voucher_id AND o.status <> 4)
                    FROM tb_seckill_voucher sv",
            },
        ],
    },
    Migration {
        version: 11,
        name: "comment replies found by thread",
        // Deleting a top-level comment deletes its replies: without an index on `parent_id` that
        // read every comment of every note while holding the database's write lock.
        steps: &[Step::Index {
            table: "tb_blog_comments",
            name: "idx_blog_comments_parent",
            columns: "parent_id",
        }],
    },
    Migration {
        version: 12,
        name: "notes and comments load nothing from other hosts",
        // Images on other hosts were kept until now (in `content`, and as a note's photos),
        // and each told its host the address of every reader. The cleaning of version 8 runs
        // again under the narrower rule, and comments, stored as cleaned HTML too, get it as
        // well.
        steps: &[Step::SanitizeNotes, Step::SanitizeComments],
    },
    Migration {
        version: 13,
        name: "flash-sale stock split over buckets",
        // The original's sale row has one stock; a voucher whose stock Redis splits over
        // buckets says how many here. No row means one bucket, the original's layout.
        steps: &[Step::Sql {
            sqlite: "CREATE TABLE IF NOT EXISTS hmdp_voucher_stock_buckets (
                voucher_id INTEGER PRIMARY KEY,
                buckets INTEGER NOT NULL)",
            mysql: "CREATE TABLE IF NOT EXISTS hmdp_voucher_stock_buckets (
                voucher_id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
                buckets INT NOT NULL
            ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        }],
    },
];

/// Brings the schema up to date. Safe to run any number of times, on an empty database or on
/// one created from the original `hmdp.sql`.
pub async fn migrate(db: &Db) -> Result<MigrationReport> {
    let mut report = MigrationReport::default();
    run_sql(
        db,
        "CREATE TABLE IF NOT EXISTS hmdp_schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS hmdp_schema_migrations (
            version BIGINT NOT NULL PRIMARY KEY,
            name VARCHAR(255) NOT NULL,
            applied_at VARCHAR(32) NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    )
    .await?;
    let applied: Vec<i64> = crate::storage::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT version FROM hmdp_schema_migrations")
            .fetch_all(pool)
            .await?
    });
    for m in MIGRATIONS {
        if applied.contains(&m.version) {
            continue;
        }
        tracing::debug!(version = m.version, name = m.name, "applying migration");
        for step in m.steps {
            match step {
                Step::Sql { sqlite, mysql } => run_sql(db, sqlite, mysql).await?,
                Step::UniqueIndex {
                    table,
                    name,
                    columns,
                } => create_index(db, table, name, columns, true).await?,
                Step::Index {
                    table,
                    name,
                    columns,
                } => create_index(db, table, name, columns, false).await?,
                Step::SeedDemoCatalogue => report.seeded_demo = seed::seed_if_empty(db).await?,
                Step::SeedDemoPeople => {
                    report.seeded_demo_people =
                        seed::seed_people_if_fresh(db, report.seeded_demo).await?
                }
                Step::SanitizeNotes => {
                    let content = clean_column(db, "tb_blog", "content", |c| {
                        SafeHtml::clean_within(c, CONTENT_MAX).into_string()
                    })
                    .await?;
                    let images = clean_column(db, "tb_blog", "images", site_images).await?;
                    tracing::debug!(content, images, "notes sanitized");
                }
                Step::SanitizeComments => {
                    let n = clean_column(db, "tb_blog_comments", "content", |c| {
                        SafeHtml::clean_within(c, COMMENT_MAX).into_string()
                    })
                    .await?;
                    tracing::debug!(comments = n, "comments sanitized");
                }
            }
        }
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let insert = match db {
            Db::Sqlite(_) => {
                "INSERT OR IGNORE INTO hmdp_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
            }
            Db::MySql(_) => {
                "INSERT IGNORE INTO hmdp_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
            }
        };
        crate::storage::on_pool!(db, pool => {
            sqlx::query(insert).bind(m.version).bind(m.name).bind(&now).execute(pool).await?;
        });
        report.applied.push(m.version);
    }
    Ok(report)
}

/// The width of `tb_blog.content` in the original schema (`varchar(2048)`).
const CONTENT_MAX: usize = 2048;

/// The width of `tb_blog_comments.content` in the original schema (`varchar(255)`).
const COMMENT_MAX: usize = 255;

/// Cleans one text column of every row of `table` (keyed by `id`) with `clean`, a batch of
/// rows at a time; writes only the rows that change (keeping their `update_time`). How many
/// changed.
async fn clean_column(
    db: &Db,
    table: &'static str,
    column: &'static str,
    clean: fn(&str) -> String,
) -> Result<u64> {
    const BATCH: i64 = 200;
    let select = format!(
        "SELECT CAST(id AS SIGNED), {column} FROM {table} WHERE id > ? ORDER BY id LIMIT ?"
    );
    let update = format!("UPDATE {table} SET {column} = ?, update_time = update_time WHERE id = ?");
    let (mut after, mut changed) = (0_i64, 0_u64);
    loop {
        let rows: Vec<(i64, String)> = crate::storage::on_pool!(db, pool => {
            sqlx::query_as(&select).bind(after).bind(BATCH).fetch_all(pool).await?
        });
        let Some((last, _)) = rows.last() else {
            return Ok(changed);
        };
        after = *last;
        for (id, value) in rows {
            let cleaned = clean(&value);
            if cleaned == value {
                continue;
            }
            crate::storage::on_pool!(db, pool => {
                sqlx::query(&update).bind(&cleaned).bind(id).execute(pool).await?;
            });
            changed += 1;
        }
    }
}

async fn run_sql(db: &Db, sqlite: &str, mysql: &str) -> Result<()> {
    match db {
        Db::Sqlite(pool) => {
            sqlx::query(sqlite).execute(pool).await?;
        }
        Db::MySql(pool) => {
            sqlx::query(mysql).execute(pool).await?;
        }
    }
    Ok(())
}

async fn index_exists(db: &Db, table: &str, name: &str) -> Result<bool> {
    let n: i64 = match db {
        Db::Sqlite(pool) => sqlx::query_scalar(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name = ?",
        )
        .bind(table)
        .bind(name)
        .fetch_one(pool)
        .await?,
        Db::MySql(pool) => {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.statistics
                 WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?",
            )
            .bind(table)
            .bind(name)
            .fetch_one(pool)
            .await?
        }
    };
    Ok(n > 0)
}

async fn create_index(db: &Db, table: &str, name: &str, columns: &str, unique: bool) -> Result<()> {
    if index_exists(db, table, name).await? {
        return Ok(());
    }
    if unique {
        // Existing duplicates would make the index fail with an opaque error; name them instead.
        let dup_sql = format!(
            "SELECT COUNT(*) FROM (SELECT {columns} FROM {table} GROUP BY {columns} HAVING COUNT(*) > 1) d"
        );
        let dups: i64 = crate::storage::on_pool!(db, pool => {
            sqlx::query_scalar(&dup_sql).fetch_one(pool).await?
        });
        if dups > 0 {
            return Err(StorageError::Migration(format!(
                "cannot add unique index {name} on {table}({columns}): {dups} duplicate value(s) \
                 exist; remove the duplicates and start again"
            )));
        }
    }
    let sql = format!(
        "CREATE {}INDEX {name} ON {table} ({columns})",
        if unique { "UNIQUE " } else { "" }
    );
    crate::storage::on_pool!(db, pool => {
        sqlx::query(&sql).execute(pool).await?;
    });
    Ok(())
}
