//! `abuse`: cheap requests that cost the service a lot, each sent by an attacker (`--attackers`
//! connections) while buyers grab a voucher (`--connections`), against the grab alone.
//! For each pattern: the requests/s the attacker sustains, and the grab's rate and p99 beside
//! it. Run it against two builds (`--url`, see `scripts/abuse.sh`) for before/after.
//!
//! The patterns (issue "Safe to expose", item 4):
//! - the public sale stats of a voucher, in a table of `--orders` orders of other vouchers
//!   (counted with a full scan without an index starting with `voucher_id`);
//! - grabs of random unknown voucher ids by a logged-in attacker (each one a warm-up with a
//!   lock and stream scans before the database was asked);
//! - a name search's deepest allowed page among `--shops` matching shops (an unindexable
//!   `LIKE` with a deep `OFFSET`).
//!
//! Rate limits are off on the in-process server (one address sends everything); the script
//! turns them off on the servers it starts. They are what stops one address; these numbers are
//! what a request costs when the attacker has many.

use std::{sync::Arc, time::Duration};

use hmdp::storage::Db;

use super::{
    baselines::pick_user,
    setup::{Target, User, create_users, create_voucher},
};
use crate::{
    Cli,
    load::{Outcome, Req, Stop, request_phase},
    report::{Report, Row},
};

/// The scenario's knobs.
#[derive(Debug, Clone, clap::Args)]
pub struct AbuseArgs {
    /// Attacker connections (closed loop), beside the buyers' `--connections`.
    #[arg(long, default_value_t = 32)]
    pub attackers: usize,
    /// Buyers logged in through the API.
    #[arg(long, default_value_t = 1000)]
    pub users: usize,
    /// Orders of other vouchers put in `tb_voucher_order` first.
    #[arg(long, default_value_t = 200_000)]
    pub orders: u64,
    /// Shops whose name matches the attacker's search, put in `tb_shop` first.
    #[arg(long, default_value_t = 20_000)]
    pub shops: u64,
}

/// Rows per multi-row `INSERT` of the set-up.
const INSERT_CHUNK: u64 = 1000;
/// Voucher ids of the filler orders: far above any real voucher.
const FILLER_VOUCHERS: i64 = 1_000_000_000;
/// The deepest page `/shop/of/name` allowed before the cap (`current` ≤ 1000).
const DEEP_PAGE: i64 = 1000;

async fn execute(db: &Db, sql: &str) -> anyhow::Result<()> {
    match db {
        Db::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ())?,
        Db::MySql(p) => sqlx::query(sql).execute(p).await.map(|_| ())?,
    }
    Ok(())
}

/// Fills the tables the attacks make the database read: orders of other vouchers (ids far
/// from the service's own) and shops named `abuse shop …`.
async fn fill(db: &Db, args: &AbuseArgs) -> anyhow::Result<()> {
    let base = 9_000_000_000_000_000_000i64;
    for start in (0..args.orders).step_by(INSERT_CHUNK as usize) {
        let values = (start..(start + INSERT_CHUNK).min(args.orders))
            .map(|i| {
                let i = i as i64;
                format!(
                    "({}, {}, {}, 1, 1)",
                    base + i,
                    i + 1,
                    FILLER_VOUCHERS + i % 1000
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        execute(
            db,
            &format!(
                "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status) VALUES {values}"
            ),
        )
        .await?;
    }
    for start in (0..args.shops).step_by(INSERT_CHUNK as usize) {
        let values = (start..(start + INSERT_CHUNK).min(args.shops))
            .map(|i| format!("('abuse shop {i}', 1, '', '', 120.1, 30.2)"))
            .collect::<Vec<_>>()
            .join(", ");
        execute(
            db,
            &format!("INSERT INTO tb_shop (name, type_id, images, address, x, y) VALUES {values}"),
        )
        .await?;
    }
    Ok(())
}

/// An attack pattern: its name and the request its `i`-th call sends.
struct Attack {
    name: &'static str,
    make: Arc<dyn Fn(u64) -> Req + Send + Sync>,
}

pub async fn run(cli: &Cli, args: &AbuseArgs) -> anyhow::Result<Report> {
    let t = Target::connect(cli, |c| {
        c.db_max_connections = c.db_max_connections.max(16);
    })
    .await?;
    eprintln!(
        "abuse: {} filler orders and {} shops into the database…",
        args.orders, args.shops
    );
    fill(&t.db, args).await?;
    eprintln!("abuse: logging in {} users…", args.users);
    let users: Arc<Vec<User>> = Arc::new(create_users(t.addr, &t.codes, args.users, 32).await?);
    let sale = create_voucher(t.addr, &t.admin_token, args.users as i64).await?;
    let watched = create_voucher(t.addr, &t.admin_token, 1).await?;
    let attacker = users[0].token.clone();

    let n = users.len() as u64;
    let buyers = users.clone();
    let grab: Arc<dyn Fn(u64) -> Req + Send + Sync> = Arc::new(move |i| {
        Req::post(format!("/api/voucher-order/seckill/{sale}"))
            .header("authorization", &buyers[pick_user(i, n) as usize].token)
    });
    let attacks = [
        Attack {
            name: "sale stats of a voucher",
            make: Arc::new(move |_| Req::get(format!("/api/voucher/seckill/{watched}/stats"))),
        },
        Attack {
            name: "grabs of unknown voucher ids",
            make: Arc::new(move |i| {
                Req::post(format!(
                    "/api/voucher-order/seckill/{}",
                    2_000_000_000 + i * 7919 % 1_000_000_000
                ))
                .header("authorization", &attacker)
            }),
        },
        Attack {
            name: "deep name-search page",
            make: Arc::new(|_| {
                Req::get(format!(
                    "/api/shop/of/name?name=abuse%20shop&current={DEEP_PAGE}"
                ))
            }),
        },
    ];

    let seconds = Duration::from_secs(cli.seconds);
    let mut report = Report::new("abuse", cli.connections);
    let alone = request_phase(
        "grab, no attack",
        t.addr,
        cli.connections,
        Stop::After(seconds),
        false,
        grab.clone(),
    )
    .await?;
    report
        .rows
        .push(Row::from_outcome("grab, no attack", &alone).note(format!(
            "{} buyers, {} connections",
            args.users, cli.connections
        )));
    let mut lines = Vec::new();
    for attack in attacks {
        let (buying, attacking) = tokio::join!(
            request_phase(
                "grab under attack",
                t.addr,
                cli.connections,
                Stop::After(seconds),
                false,
                grab.clone(),
            ),
            request_phase(
                attack.name,
                t.addr,
                args.attackers,
                Stop::After(seconds),
                false,
                attack.make.clone(),
            ),
        );
        let (buying, attacking) = (buying?, attacking?);
        report.rows.push(
            Row::from_outcome(&format!("attack: {}", attack.name), &attacking)
                .note(format!("{} connections", args.attackers)),
        );
        report
            .rows
            .push(Row::from_outcome("  grab beside it", &buying));
        lines.push(summary(attack.name, &alone, &buying, &attacking));
    }
    report.summary.extend(lines);
    if let Some(s) = t.server {
        s.stop().await;
    }
    Ok(report)
}

/// One line per attack: what the attacker sustained and what it did to the grab.
fn summary(name: &str, alone: &Outcome, buying: &Outcome, attacking: &Outcome) -> String {
    let p99 = |o: &Outcome| o.latency.value_at_quantile(0.99) as f64 / 1000.0;
    format!(
        "{name}: the attacker sustains {:.0} req/s; the grab runs at {:.0} req/s ({:.2}x alone), p99 {:.2} ms ({:.2}x alone)",
        attacking.rate(),
        buying.rate(),
        buying.rate() / alone.rate().max(1e-9),
        p99(buying),
        p99(buying) / p99(alone).max(1e-9),
    )
}
