//! The lab's tables: the original project's `tb_voucher`, `tb_seckill_voucher`,
//! `tb_voucher_order`, `tb_shop` and `tb_blog`, with the original's columns, written once in the SQL that
//! SQLite and MySQL/MariaDB both read. What matters is what is *not* here: hmdp's migrations
//! add a unique key on `(user_id, voucher_id)`; the original has none, and its absence is what
//! lets the course's one-order-per-user races show.

/// `CREATE TABLE IF NOT EXISTS` for each table, in order.
pub(crate) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS tb_voucher (
        id BIGINT NOT NULL PRIMARY KEY,
        shop_id BIGINT NULL,
        title VARCHAR(255) NOT NULL,
        sub_title VARCHAR(255) NULL,
        rules VARCHAR(1024) NULL,
        pay_value BIGINT NOT NULL,
        actual_value BIGINT NOT NULL,
        type INT NOT NULL DEFAULT 0,
        status INT NOT NULL DEFAULT 1,
        create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
        update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
    )",
    "CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
        voucher_id BIGINT NOT NULL PRIMARY KEY,
        stock INT NOT NULL,
        create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
        begin_time DATETIME NOT NULL,
        end_time DATETIME NOT NULL,
        update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
    )",
    "CREATE TABLE IF NOT EXISTS tb_voucher_order (
        id BIGINT NOT NULL PRIMARY KEY,
        user_id BIGINT NOT NULL,
        voucher_id BIGINT NOT NULL,
        pay_type INT NOT NULL DEFAULT 1,
        status INT NOT NULL DEFAULT 1,
        create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
        pay_time DATETIME NULL,
        use_time DATETIME NULL,
        refund_time DATETIME NULL,
        update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
    )",
    "CREATE TABLE IF NOT EXISTS tb_shop (
        id BIGINT NOT NULL PRIMARY KEY,
        name VARCHAR(128) NOT NULL,
        type_id BIGINT NOT NULL,
        images VARCHAR(1024) NOT NULL DEFAULT '',
        area VARCHAR(128) NULL,
        address VARCHAR(255) NOT NULL DEFAULT '',
        x DOUBLE NOT NULL DEFAULT 0,
        y DOUBLE NOT NULL DEFAULT 0,
        avg_price BIGINT NULL,
        sold INT NOT NULL DEFAULT 0,
        comments INT NOT NULL DEFAULT 0,
        score INT NOT NULL DEFAULT 0,
        open_hours VARCHAR(32) NULL,
        create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
        update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
    )",
    "CREATE TABLE IF NOT EXISTS tb_blog (
        id BIGINT NOT NULL PRIMARY KEY,
        shop_id BIGINT NOT NULL,
        user_id BIGINT NOT NULL,
        title VARCHAR(255) NOT NULL,
        images VARCHAR(2048) NOT NULL DEFAULT '',
        content VARCHAR(2048) NOT NULL DEFAULT '',
        liked INT NOT NULL DEFAULT 0,
        comments INT NOT NULL DEFAULT 0,
        create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
        update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
    )",
];
