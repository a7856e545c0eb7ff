//! Rules between settings, checked once each setting has parsed and passed its own check. Each
//! refusal names the setting to change.

use super::{Config, ConfigError, ManagedMode, SmsMode, SmsSettings};

/// Every rule, in the order a refusal is reported.
pub(super) fn check(config: &Config) -> Result<(), ConfigError> {
    // A session trusted longer than it lives could outlast its expiry by more than a blink.
    if config.session_cache >= config.session_ttl.min(config.session_max_age) {
        return Err(ConfigError::Invalid {
            name: "HMDP_SESSION_CACHE_MS",
            message: "must be shorter than the session TTL and maximum age".to_owned(),
        });
    }
    redis_sentinel(config)?;
    // `WAIT` reaches one node; a cluster spreads the grabs over several.
    if config.seckill.wait_replicas > 0
        && config.redis_sentinels.is_none()
        && config.redis_url_or_default().contains(',')
    {
        return Err(ConfigError::Invalid {
            name: "HMDP_REDIS_WAIT_REPLICAS",
            message: "works with one Redis primary (one HMDP_REDIS_URL, or \
                      HMDP_REDIS_SENTINELS), not with a Redis Cluster (several HMDP_REDIS_URL \
                      addresses)"
                .to_owned(),
        });
    }
    // Behind a reverse proxy the listen address is loopback by design, yet clients are public:
    // a loopback address proves no developer's machine, so where codes go must be said.
    if !config.trusted_proxies.is_empty() && config.sms.mode.is_none() {
        return Err(ConfigError::Invalid {
            name: "HMDP_SMS",
            message: "must be set with HMDP_TRUSTED_PROXIES (behind a proxy a loopback \
                      HMDP_LISTEN still serves the public): HMDP_SMS=http with HMDP_SMS_URL and \
                      HMDP_SMS_SECRET, or HMDP_SMS=log on purpose"
                .to_owned(),
        });
    }
    sms_gateway(&config.sms, config.request_timeout)
}

/// Sentinel replaces the URL and the managed server, needs the master's name, and its
/// passwords mean nothing without it.
fn redis_sentinel(config: &Config) -> Result<(), ConfigError> {
    let invalid = |name, message: &str| ConfigError::Invalid {
        name,
        message: message.to_owned(),
    };
    if config.redis_sentinels.is_none() {
        for (name, set) in [
            (
                "HMDP_REDIS_SENTINEL_MASTER",
                config.redis_sentinel_master.is_some(),
            ),
            (
                "HMDP_REDIS_SENTINEL_PASSWORD",
                config.redis_sentinel_password.is_some(),
            ),
            ("HMDP_REDIS_PASSWORD", config.redis_password.is_some()),
        ] {
            if set {
                return Err(invalid(
                    name,
                    "is used only with HMDP_REDIS_SENTINELS (with HMDP_REDIS_URL, put the \
                     password in the URL: redis://:PASSWORD@host:port)",
                ));
            }
        }
        return Ok(());
    }
    if config.redis_url.is_some() {
        return Err(invalid(
            "HMDP_REDIS_SENTINELS",
            "cannot be set together with HMDP_REDIS_URL: the Sentinels name the primary; \
             unset one of them",
        ));
    }
    if config.redis_sentinel_master.is_none() {
        return Err(invalid(
            "HMDP_REDIS_SENTINEL_MASTER",
            "must be set with HMDP_REDIS_SENTINELS (the name in `sentinel monitor <name> …`)",
        ));
    }
    if config.redis_managed == ManagedMode::Always {
        return Err(invalid(
            "HMDP_REDIS_MANAGED",
            "cannot be `always` with HMDP_REDIS_SENTINELS: the Sentinels' primary is the Redis",
        ));
    }
    sentinel_password_off_loopback(config)
}

/// Whoever talks to a Sentinel can fail the primary over or point the Sentinel at a server of
/// their own, and the service follows the primary the Sentinels name: a Sentinel reachable from
/// other machines must ask for a password, and the service must have it.
fn sentinel_password_off_loopback(config: &Config) -> Result<(), ConfigError> {
    let Some(sentinels) = &config.redis_sentinels else {
        return Ok(());
    };
    if config.redis_sentinel_password.is_some() {
        return Ok(());
    }
    let loopback = |host: &str| {
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    match sentinels.addrs().iter().find(|(host, _)| !loopback(host)) {
        None => Ok(()),
        Some((host, _)) => Err(ConfigError::Invalid {
            name: "HMDP_REDIS_SENTINEL_PASSWORD",
            message: format!(
                "must be set when a Sentinel is not on loopback ({host} in \
                 HMDP_REDIS_SENTINELS): Sentinel access is Redis admin (it names the primary \
                 this service writes to), so give the Sentinels a `requirepass` and this setting \
                 its value"
            ),
        }),
    }
}

/// `http` needs a URL and a secret, and all its tries must fit in a request's time: a request
/// that times out first leaves the cooldown on a code that never went out.
fn sms_gateway(sms: &SmsSettings, request_timeout: std::time::Duration) -> Result<(), ConfigError> {
    if sms.mode != Some(SmsMode::Http) {
        return Ok(());
    }
    let missing = |name| ConfigError::Invalid {
        name,
        message: "must be set with HMDP_SMS=http".to_owned(),
    };
    if sms.url.is_none() {
        return Err(missing("HMDP_SMS_URL"));
    }
    if sms.secret.is_none() {
        return Err(missing("HMDP_SMS_SECRET"));
    }
    if sms.worst_case() >= request_timeout {
        return Err(ConfigError::Invalid {
            name: "HMDP_SMS_TIMEOUT_MS",
            message: format!(
                "{} tries of {} ms with their pauses ({} ms) must be shorter than \
                 HMDP_REQUEST_TIMEOUT_MS ({} ms): lower HMDP_SMS_TIMEOUT_MS or HMDP_SMS_RETRIES",
                sms.retries + 1,
                sms.timeout.as_millis(),
                sms.worst_case().as_millis(),
                request_timeout.as_millis()
            ),
        });
    }
    Ok(())
}
