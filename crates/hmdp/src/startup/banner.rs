//! The few lines a process opens its log with: where to reach it, where its credentials and
//! the simulated login codes are, where its data lives and what a restart would lose. The whole
//! configuration is one command away (`hmdp config`); printed at start it buried these facts
//! under two thousand characters on one line.
//!
//! The banner is one event, logged once the facts are known (the address bound, the token
//! settled, Redis asked), so the steps before it say what they did at DEBUG level only. A fact
//! that is a risk is also said loudly, at WARN, right after it.

use std::{fmt, net::SocketAddr, path::Path};

use crate::{
    config::{Config, SmsMode, redact_url},
    http,
    kv::{self, managed::ManagedRedis},
    storage::{Db, MigrationReport},
};

use super::connect::Redis;

/// A title and labelled lines; shown as the title, then one indented line per fact.
pub(super) struct Banner {
    title: String,
    lines: Vec<(&'static str, String)>,
    /// Logged at WARN after the banner.
    warnings: Vec<&'static str>,
}

impl Banner {
    pub(super) fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            lines: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub(super) fn line(&mut self, label: &'static str, text: impl Into<String>) -> &mut Self {
        self.lines.push((label, text.into()));
        self
    }

    /// Where the service answers, and its web UI (served at `/app/` whatever
    /// `HMDP_STATIC_DIR` puts at `/`).
    pub(super) fn listening(&mut self, addr: SocketAddr) -> &mut Self {
        self.line(
            "listening",
            format!("http://{addr} (the API; its docs at /docs)"),
        )
        .line("web UI", format!("http://{addr}/app/"))
    }

    /// Where the admin token of `x-admin-token` is: `HMDP_ADMIN_TOKEN` (`None`), or a file,
    /// maybe generated now.
    pub(super) fn admin_token(&mut self, file: Option<(&Path, bool)>) -> &mut Self {
        let text = match file {
            None => "HMDP_ADMIN_TOKEN, as configured".to_owned(),
            Some((path, generated)) => format!(
                "in {}{}",
                path.display(),
                if generated { " (generated now)" } else { "" }
            ),
        };
        self.line("admin token", text)
    }

    /// A payment secret generated now, which the gateway must be given.
    pub(super) fn pay_secret(&mut self, generated: Option<&Path>) -> &mut Self {
        match generated {
            Some(path) => self.line(
                "pay secret",
                format!("generated into {}: give it to the gateway", path.display()),
            ),
            None => self,
        }
    }

    /// Where login codes go: with `HMDP_SMS=log` (or unset, on loopback), into this log.
    pub(super) fn login_codes(&mut self, config: &Config) -> &mut Self {
        let text = match (config.sms.mode, &config.sms.url) {
            (Some(SmsMode::Http), Some(url)) => format!("sent through {}", redact_url(url)),
            (Some(SmsMode::Http), None) => "sent through the SMS gateway".to_owned(),
            (Some(SmsMode::Log) | None, _) => {
                self.warnings.push(
                    "HMDP_SMS=log: login codes are written to this log instead of being sent; \
                     whoever reads the log can log in as anyone (set HMDP_SMS=http for real \
                     users)",
                );
                "written to this log (HMDP_SMS=log)".to_owned()
            }
        };
        self.line("login codes", text)
    }

    /// The database: a SQLite file (where), or the server's URL, password hidden; and what its
    /// migration did now.
    pub(super) fn database(
        &mut self,
        config: &Config,
        db: &Db,
        migrated: &MigrationReport,
    ) -> &mut Self {
        let at = match db.sqlite_pool() {
            Some(pool) => {
                let file = pool.connect_options().get_filename().to_path_buf();
                let file = std::fs::canonicalize(&file)
                    .or_else(|_| std::path::absolute(&file))
                    .unwrap_or(file);
                format!("SQLite file {}", file.display())
            }
            None => redact_url(&config.database_url),
        };
        let demo = migrated.seeded_demo || migrated.seeded_demo_people;
        let text = match (migrated.applied.len(), demo) {
            (0, _) => at,
            (n, false) => format!("{at} ({n} migrations applied now)"),
            (n, true) => format!("{at} (new: {n} migrations, demo data)"),
        };
        self.line("database", text)
    }

    /// Where Redis is, and what its restart would lose.
    pub(super) fn redis(&mut self, facts: RedisFacts) -> &mut Self {
        self.line("Redis", facts.at);
        if facts.orders_at_risk {
            self.line(
                "not durable",
                "Redis has no AOF: its restart loses accepted orders not yet written",
            );
            self.warnings.push(
                "Redis has no append-only file and HMDP_REDIS_WAIT_REPLICAS is 0: if Redis \
                 restarts, every accepted order not yet written to the database is lost and its \
                 stock sold again; set appendonly yes (appendfsync always loses none) or \
                 HMDP_REDIS_WAIT_REPLICAS",
            );
        }
        self
    }

    /// The command that lists every setting.
    pub(super) fn settings(&mut self) -> &mut Self {
        self.line("settings", "every one, with its source: hmdp config")
    }

    /// Logs the banner as one INFO event, then its warnings.
    pub(super) fn log(&self) {
        tracing::info!("{self}");
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
    }
}

/// Where a process's Redis is, and whether its restart would lose the accepted orders not yet
/// written (no AOF and no replica confirming each grab: `/health`'s `redis_not_durable`).
pub(super) struct RedisFacts {
    at: String,
    orders_at_risk: bool,
}

impl RedisFacts {
    pub(super) async fn ask(
        config: &Config,
        redis: &Redis,
        managed: Option<&ManagedRedis>,
    ) -> Self {
        let at = match managed {
            Some(m) => format!(
                "{}, managed (AOF, appendfsync {})",
                redact_url(m.url()),
                config.redis_appendfsync
            ),
            None => redis.target.describe(),
        };
        let orders_at_risk = match http::health::sale_redis(config) {
            Some(wait_replicas) => kv::orders_at_risk(&redis.conn, wait_replicas).await,
            None => false,
        };
        Self { at, orders_at_risk }
    }
}

impl fmt::Display for Banner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.title)?;
        for (label, text) in &self.lines {
            write!(f, "\n  {label:<12} {text}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_banner_is_its_title_then_one_indented_line_a_fact() {
        let mut banner = Banner::new("hmdp 1.0");
        banner
            .listening(SocketAddr::from(([127, 0, 0, 1], 8081)))
            .settings();
        assert_eq!(
            banner.to_string(),
            "hmdp 1.0\n  listening    http://127.0.0.1:8081 (the API; its docs at /docs)\n  \
             web UI       http://127.0.0.1:8081/app/\n  settings     every one, with its source: \
             hmdp config"
        );
    }
}
