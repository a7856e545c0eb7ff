//! Rules between settings, checked once each setting has parsed and passed its own check. Each
//! refusal names the setting to change.

use super::{Config, ConfigError, SmsSettings};
use crate::auth::SmsMode;

/// Every rule, in the order a refusal is reported.
pub(super) fn check(config: &Config) -> Result<(), ConfigError> {
    // A session trusted longer than it lives could outlast its expiry by more than a blink.
    if config.session_cache >= config.session_ttl.min(config.session_max_age) {
        return Err(ConfigError::Invalid {
            name: "HMDP_SESSION_CACHE_MS",
            message: "must be shorter than the session TTL and maximum age".to_owned(),
        });
    }
    // `WAIT` reaches one node; a cluster spreads the grabs over several.
    if config.seckill.wait_replicas > 0 && config.redis_url_or_default().contains(',') {
        return Err(ConfigError::Invalid {
            name: "HMDP_REDIS_WAIT_REPLICAS",
            message: "works with one Redis primary, not with a Redis Cluster (several \
                      HMDP_REDIS_URL addresses)"
                .to_owned(),
        });
    }
    sms_gateway(&config.sms, config.request_timeout)
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
