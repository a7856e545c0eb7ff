//! `abuse`: cheap requests that cost the service a lot, each sent by an attacker (`--attackers`
//! connections) while buyers grab a voucher (`--connections`), against the grab alone.
//! For each pattern, run as fast as it is answered and at a fixed `--attack-rate`: the
//! requests/s the attacker gets, and the p99 of the grab and of a buyer's database read ("my
//! orders") beside it. Run it against two builds (`--url`, see `scripts/abuse.sh`) for
//! before/after.
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

use hmdp::testing::storage::Db;

use super::{
    baselines::pick_user,
    setup::{Target, User, create_users, create_voucher},
};
use crate::{
    Cli,
    load::{Outcome, Req, Stop, paced_request_phase, request_phase},
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
    /// Each attack also runs at this fixed rate (requests/s over its connections): the same
    /// pressure before and after, so the victims' p99 compares what one request costs.
    #[arg(long, default_value_t = 15.0)]
    pub attack_rate: f64,
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
    // Fresh statistics, as a database that grew to this size would have: right after a bulk
    // insert the optimizer still sees empty tables and picks plans (a backwards primary-key
    // scan for "my orders") that would make the first phase measure that instead.
    let analyze = match db {
        Db::Sqlite(_) => "ANALYZE",
        Db::MySql(_) => "ANALYZE TABLE tb_voucher_order, tb_shop",
    };
    match db {
        Db::Sqlite(p) => sqlx::query(analyze).execute(p).await.map(|_| ())?,
        Db::MySql(p) => sqlx::query(analyze).fetch_all(p).await.map(|_| ())?,
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

    let mine = users.clone();
    let my_orders: Arc<dyn Fn(u64) -> Req + Send + Sync> = Arc::new(move |i| {
        Req::get("/api/voucher-order/of/me")
            .header("authorization", &mine[pick_user(i, n) as usize].token)
    });
    let victims = Victims {
        addr: t.addr,
        seconds: Duration::from_secs(cli.seconds),
        connections: cli.connections,
        grab,
        my_orders,
    };
    let mut report = Report::new("abuse", cli.connections);
    let (alone, alone_reads, _) = victims.beside(None).await?;
    report
        .rows
        .push(Row::from_outcome("grab, no attack", &alone).note(format!(
            "{} buyers, {} connections",
            args.users, cli.connections
        )));
    report.rows.push(
        Row::from_outcome("  my orders (a database read), no attack", &alone_reads)
            .note(format!("{READERS} connections")),
    );
    for attack in attacks {
        for rate in [None, Some(args.attack_rate)] {
            let how = match rate {
                None => format!("{} connections, as fast as answered", args.attackers),
                Some(r) => format!("{r} req/s"),
            };
            let (buying, reading, attacking) = victims
                .beside(Some((&attack, args.attackers, rate)))
                .await?;
            let attacking = attacking.expect("an attack ran");
            let row = match rate {
                None => format!("attack: {}", attack.name),
                Some(r) => format!("attack at {r}/s: {}", attack.name),
            };
            report
                .rows
                .push(Row::from_outcome(&row, &attacking).note(&how));
            report
                .rows
                .push(Row::from_outcome("  grab beside it", &buying));
            report
                .rows
                .push(Row::from_outcome("  my orders beside it", &reading));
            report.summary.push(summary(
                &format!("{} ({how})", attack.name),
                (&alone, &alone_reads),
                (&buying, &reading),
                &attacking,
            ));
        }
    }
    if let Some(s) = t.server {
        s.stop().await;
    }
    Ok(report)
}

/// Connections of the buyers reading their orders.
const READERS: usize = 8;

/// What an attack is measured against: buyers grabbing, and buyers reading their orders (a
/// database read, which is what a costly request takes from others).
struct Victims {
    addr: std::net::SocketAddr,
    seconds: Duration,
    connections: usize,
    grab: Arc<dyn Fn(u64) -> Req + Send + Sync>,
    my_orders: Arc<dyn Fn(u64) -> Req + Send + Sync>,
}

impl Victims {
    /// Runs the victims for the phase, beside `attack` (its connections, and its rate or as
    /// fast as answered) when there is one: `(grabs, reads, attack)`.
    async fn beside(
        &self,
        attack: Option<(&Attack, usize, Option<f64>)>,
    ) -> anyhow::Result<(Outcome, Outcome, Option<Outcome>)> {
        let stop = Stop::After(self.seconds);
        let attacking = async {
            match attack {
                None => Ok(None),
                Some((a, connections, rate)) => paced_request_phase(
                    a.name,
                    self.addr,
                    connections,
                    stop,
                    false,
                    rate,
                    a.make.clone(),
                )
                .await
                .map(Some),
            }
        };
        let (buying, reading, attacking) = tokio::join!(
            request_phase(
                "grab",
                self.addr,
                self.connections,
                stop,
                false,
                self.grab.clone()
            ),
            request_phase(
                "my orders",
                self.addr,
                READERS,
                stop,
                false,
                self.my_orders.clone()
            ),
            attacking,
        );
        Ok((buying?, reading?, attacking?))
    }
}

/// One line per attack: what the attacker sustained and what it did to the victims.
fn summary(
    name: &str,
    (alone, alone_reads): (&Outcome, &Outcome),
    (buying, reading): (&Outcome, &Outcome),
    attacking: &Outcome,
) -> String {
    let p99 = |o: &Outcome| o.latency.value_at_quantile(0.99) as f64 / 1000.0;
    format!(
        "{name}: the attacker gets {:.0} req/s (p50 {:.2} ms); grab p99 {:.2} ms ({:.2}x alone), my-orders p99 {:.2} ms ({:.2}x alone)",
        attacking.rate(),
        attacking.latency.value_at_quantile(0.5) as f64 / 1000.0,
        p99(buying),
        p99(buying) / p99(alone).max(1e-9),
        p99(reading),
        p99(reading) / p99(alone_reads).max(1e-9),
    )
}
