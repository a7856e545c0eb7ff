//! Set-up through the real API: users (send a code, log in, read `/user/me`) and flash-sale
//! vouchers (the admin route). Going through the API rather than the database keeps the bench
//! honest against a running server, and exercises the same paths a client does.

use std::{
    collections::HashSet,
    net::SocketAddr,
    sync::{Arc, atomic::AtomicUsize, atomic::Ordering},
};

use hmdp::{
    Config,
    testing::{FlashSale, auth::CapturingSms, kv::Keys, storage::Db},
};

use crate::{
    Cli,
    load::{Conn, Req, call_once},
    server::{self, BenchServer, Database},
};

/// Where a scenario runs: a server started in-process on embedded defaults, or the running
/// one of `--url` (with its database, Redis prefix and admin token from the flags).
pub struct Target {
    pub addr: SocketAddr,
    /// The in-process server, if this is one.
    pub server: Option<BenchServer>,
    pub db: Db,
    pub keys: Keys,
    pub shards: u32,
    pub admin_token: String,
    pub codes: CodeSource,
}

impl Target {
    /// Starts the in-process server with `adjust` applied to its configuration, or connects to
    /// `--url`'s.
    pub async fn connect(cli: &Cli, adjust: impl FnOnce(&mut Config)) -> anyhow::Result<Self> {
        let Some(url) = &cli.url else {
            let server = server::start_on(
                &cli.redis_url,
                &Database::from_flag(cli.database_url.as_deref()),
                adjust,
            )
            .await?;
            return Ok(Target {
                addr: server.addr,
                db: server.state.db.clone(),
                keys: server.state.keys.clone(),
                shards: server.state.config.seckill.shards,
                admin_token: server.admin_token.clone(),
                codes: CodeSource::Sms(server.sms.clone()),
                server: Some(server),
            });
        };
        let database_url = cli
            .database_url
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("--url needs --database-url (the server's database)"))?;
        Ok(Target {
            addr: super::shop::target(url)?,
            server: None,
            db: Db::connect(database_url, 4).await?,
            keys: Keys::new(cli.redis_prefix.clone()),
            shards: cli.seckill_shards,
            admin_token: admin_token(cli)?,
            codes: CodeSource::of_running_server(cli).await?,
        })
    }
}

/// A running server's admin token: `--admin-token`, else `$HMDP_ADMIN_TOKEN`.
pub fn admin_token(cli: &Cli) -> anyhow::Result<String> {
    cli.admin_token
        .clone()
        .or_else(|| std::env::var("HMDP_ADMIN_TOKEN").ok())
        .ok_or_else(|| anyhow::anyhow!("--url needs --admin-token (or HMDP_ADMIN_TOKEN)"))
}

/// Where login codes come from.
#[derive(Clone)]
pub enum CodeSource {
    /// The in-process server's capturing SMS sender.
    Sms(Arc<CapturingSms>),
    /// A running server: the code is read from Redis at `{prefix}login:code:{phone}`.
    Redis {
        conn: redis::aio::MultiplexedConnection,
        prefix: String,
    },
}

impl CodeSource {
    /// Codes of the running server of `--url`: read from `--redis-url` under `--redis-prefix`.
    pub async fn of_running_server(cli: &Cli) -> anyhow::Result<Self> {
        Ok(CodeSource::Redis {
            conn: redis::Client::open(cli.redis_url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
            prefix: cli.redis_prefix.clone(),
        })
    }

    async fn code(&self, phone: &str) -> anyhow::Result<String> {
        match self {
            CodeSource::Sms(sms) => sms
                .last_code_for(phone)
                .ok_or_else(|| anyhow::anyhow!("no code was sent to {phone}")),
            CodeSource::Redis { conn, prefix } => {
                let mut conn = conn.clone();
                let code: Option<String> = redis::cmd("GET")
                    .arg(format!("{prefix}login:code:{phone}"))
                    .query_async(&mut conn)
                    .await?;
                code.ok_or_else(|| {
                    anyhow::anyhow!(
                        "no login code in Redis for {phone}: is --redis-prefix the server's HMDP_REDIS_PREFIX?"
                    )
                })
            }
        }
    }
}

/// A logged-in user.
#[derive(Debug, Clone)]
pub struct User {
    pub phone: String,
    pub token: String,
    pub id: i64,
}

/// `n` distinct random mobile numbers (`138` + 8 digits: valid for the phone rule, and a
/// fresh run against a long-lived server almost never meets a number it used before, which
/// would hit the per-phone code cooldown).
pub fn phones(n: usize) -> Vec<String> {
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let p = format!("138{:08}", rand::random_range(0..100_000_000u32));
        if seen.insert(p.clone()) {
            out.push(p);
        }
    }
    out
}

/// Logs one phone in over `conn`: code, login, `/user/me`.
pub async fn login(conn: &mut Conn, codes: &CodeSource, phone: &str) -> anyhow::Result<User> {
    let a = conn
        .call(&Req::post(format!("/api/user/code?phone={phone}")))
        .await?;
    anyhow::ensure!(a.success(), "sending a code to {phone}: {}", a.code());
    let code = codes.code(phone).await?;
    let a = conn
        .call(
            &Req::post("/api/user/login").json(&serde_json::json!({"phone": phone, "code": code})),
        )
        .await?;
    anyhow::ensure!(a.success(), "login of {phone}: {}", a.code());
    let token = a
        .data()
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("login answered no token"))?
        .to_owned();
    let a = conn
        .call(&Req::get("/api/user/me").header("authorization", &token))
        .await?;
    anyhow::ensure!(a.success(), "/user/me of {phone}: {}", a.code());
    let id = a.data()["id"]
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("/user/me answered no id"))?;
    Ok(User {
        phone: phone.to_owned(),
        token,
        id,
    })
}

/// Creates `n` users through the login API over `parallel` connections.
pub async fn create_users(
    addr: SocketAddr,
    codes: &CodeSource,
    n: usize,
    parallel: usize,
) -> anyhow::Result<Vec<User>> {
    let phones = Arc::new(phones(n));
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..parallel.clamp(1, n.max(1)) {
        let (phones, next, codes) = (phones.clone(), next.clone(), codes.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect(addr).await?;
            let mut users = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(phone) = phones.get(i) else { break };
                users.push((i, login(&mut conn, &codes, phone).await?));
            }
            anyhow::Ok(users)
        }));
    }
    let mut users = Vec::with_capacity(n);
    for t in tasks {
        users.extend(t.await??);
    }
    users.sort_by_key(|(i, _)| *i);
    Ok(users.into_iter().map(|(_, u)| u).collect())
}

/// Creates a flash-sale voucher through the admin route; its id.
pub async fn create_voucher(
    addr: SocketAddr,
    admin_token: &str,
    stock: i64,
) -> anyhow::Result<i64> {
    let sale = FlashSale::new(stock).title(format!("hmdp-bench flash sale of {stock}"));
    create_sale(addr, admin_token, sale).await
}

/// Creates `sale` through the admin route; the voucher's id.
pub async fn create_sale(
    addr: SocketAddr,
    admin_token: &str,
    sale: FlashSale,
) -> anyhow::Result<i64> {
    let a = call_once(
        addr,
        &Req::post(FlashSale::PATH)
            .header("x-admin-token", admin_token)
            .json(&sale.body()),
    )
    .await?;
    anyhow::ensure!(
        a.success(),
        "creating the voucher: {} ({})",
        a.code(),
        String::from_utf8_lossy(&a.body)
    );
    a.data()
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("the voucher route answered no id"))
}

/// `tb_seckill_voucher.stock` of `voucher`.
pub(super) async fn db_stock(db: &Db, voucher: i64) -> anyhow::Result<i64> {
    Ok(hmdp::on_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_one(pool)
            .await?
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phones_are_distinct_and_valid() {
        let p = phones(1000);
        assert_eq!(p.iter().collect::<HashSet<_>>().len(), 1000);
        assert!(p.iter().all(|p| p.len() == 11
            && p.starts_with("138")
            && p.bytes().all(|b| b.is_ascii_digit())));
    }
}
