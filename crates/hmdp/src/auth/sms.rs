//! Delivering login codes: the [`SmsSender`] seam, and the two senders `HMDP_SMS` chooses.
//!
//! A login code is a password for whoever receives it, so where codes go is an explicit choice
//! ([`sender_for`]): `http` posts each one to an SMS gateway ([`HttpSmsSender`]; any provider
//! can sit behind a small relay that speaks its JSON), `log` writes it to the service log
//! ([`LogSmsSender`], the original's simulation), where anyone who reads the log could log in
//! as anyone. So `log` is the default only on a loopback address (a developer's machine); on
//! any other address `hmdp serve` refuses to start unless `HMDP_SMS=log` is set on purpose, and
//! either way it warns at start-up. Tests and the bench plug a capturing sender into
//! `Dependencies`. When delivery fails, `POST /user/code` answers 503 and lifts the phone's
//! cooldown, so the user can ask again at once.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use reqwest::{
    StatusCode,
    header::{HeaderName, HeaderValue},
};
use serde::Serialize;

use crate::config::{SmsMode, SmsSettings};

/// The pause before retry `n` (0-based) of an SMS: 200 ms, doubling, at most 2 s.
fn sms_backoff(n: u32) -> Duration {
    Duration::from_millis(200 << n.min(10)).min(Duration::from_secs(2))
}

impl SmsSettings {
    /// The longest a code can take to go out: every try timing out, with the pauses between.
    pub fn worst_case(&self) -> Duration {
        let pauses: Duration = (0..self.retries).map(sms_backoff).sum();
        self.timeout * (self.retries + 1) + pauses
    }
}

/// Where login codes go. [`sender_for`] picks one from the configuration; tests and the bench
/// pass their own in `Dependencies`.
pub trait SmsSender: Send + Sync + 'static {
    /// Delivers `code` to `phone` (the full number).
    fn send_code<'a>(
        &'a self,
        phone: &'a str,
        code: &'a str,
    ) -> BoxFuture<'a, Result<(), SmsError>>;
}

/// An SMS could not be delivered. The message names neither the phone, nor the code, nor the
/// secret: it is logged.
#[derive(Debug, thiserror::Error)]
#[error("SMS delivery failed: {0}")]
pub struct SmsError(pub String);

/// The sender `HMDP_SMS` asks for, on `listen` (`HMDP_LISTEN`); `code_ttl` is passed along to
/// the gateway. Refuses codes in the log on a non-loopback address unless `HMDP_SMS=log` was
/// set explicitly.
pub(crate) fn sender_for(
    settings: &SmsSettings,
    listen: SocketAddr,
    code_ttl: Duration,
) -> Result<Arc<dyn SmsSender>, SmsError> {
    match settings.mode {
        Some(SmsMode::Http) => Ok(Arc::new(HttpSmsSender::new(settings, code_ttl)?)),
        None if !listen.ip().is_loopback() => Err(SmsError(format!(
            "HMDP_SMS is unset and HMDP_LISTEN ({listen}) is not a loopback address: login codes \
             would be written to the log, where whoever reads it can log in as anyone. Set \
             HMDP_SMS=http with HMDP_SMS_URL and HMDP_SMS_SECRET, or HMDP_SMS=log on purpose"
        ))),
        // The start-up banner says that codes go to the log, and who can read them there.
        Some(SmsMode::Log) | None => Ok(Arc::new(LogSmsSender)),
    }
}

/// Logs the code at INFO level instead of sending an SMS (development and demos).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LogSmsSender;

impl SmsSender for LogSmsSender {
    fn send_code<'a>(
        &'a self,
        phone: &'a str,
        code: &'a str,
    ) -> BoxFuture<'a, Result<(), SmsError>> {
        Box::pin(async move {
            // The full message on one line, so `grep 'login code'` finds it in the log.
            tracing::info!(
                "SMS (simulated, HMDP logs instead of sending): login code for {phone} is {code}"
            );
            Ok(())
        })
    }
}

/// What the gateway receives: `POST HMDP_SMS_URL` with this JSON and the secret header.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GatewayRequest<'a> {
    /// One per code, the same on every try: a gateway that saw it already can skip it.
    id: String,
    phone: &'a str,
    code: &'a str,
    /// `HMDP_SMS_TEMPLATE`, the gateway's template for the message.
    template: &'a str,
    /// How long the code is valid (`HMDP_CODE_TTL_SECS`), for the message text.
    ttl_secs: u64,
}

/// Posts each code to an SMS gateway (`HMDP_SMS=http`): `POST HMDP_SMS_URL` with the JSON
/// `{"id","phone","code","template","ttlSecs"}` and the header `HMDP_SMS_HEADER:
/// HMDP_SMS_SECRET`. Any 2xx is delivered. A try that cannot connect, times out
/// (`HMDP_SMS_TIMEOUT_MS`) or gets a 5xx or 429 is repeated up to `HMDP_SMS_RETRIES` times after
/// a growing pause (`sms_backoff`); another answer (a 4xx, a redirect, which is not followed so
/// the secret never travels elsewhere) fails at once.
pub(crate) struct HttpSmsSender {
    client: reqwest::Client,
    url: String,
    header: HeaderName,
    /// `HMDP_SMS_SECRET`, marked sensitive so that no `Debug` of a request shows it.
    secret: HeaderValue,
    template: String,
    retries: u32,
    ttl_secs: u64,
}

impl HttpSmsSender {
    /// A sender for `settings`, which must have a URL and a secret (the configuration checks).
    pub(crate) fn new(settings: &SmsSettings, code_ttl: Duration) -> Result<Self, SmsError> {
        let setup = |what: &str| SmsError(format!("cannot set up the SMS gateway client: {what}"));
        let url = settings
            .url
            .clone()
            .ok_or_else(|| setup("no HMDP_SMS_URL"))?;
        let secret = settings
            .secret
            .clone()
            .ok_or_else(|| setup("no HMDP_SMS_SECRET"))?;
        let header = HeaderName::from_bytes(settings.header.as_bytes())
            .map_err(|_| setup("HMDP_SMS_HEADER is not a header name"))?;
        let mut secret = HeaderValue::from_str(secret.expose())
            .map_err(|_| setup("HMDP_SMS_SECRET is not a valid header value"))?;
        secret.set_sensitive(true);
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| setup(&e.without_url().to_string()))?;
        Ok(Self {
            client,
            url,
            header,
            secret,
            template: settings.template.clone(),
            retries: settings.retries,
            ttl_secs: code_ttl.as_secs(),
        })
    }

    /// One try: `Ok` when delivered, else whether another try may help, and why not.
    async fn try_once(&self, body: &GatewayRequest<'_>) -> Result<(), (bool, String)> {
        let sent = self
            .client
            .post(&self.url)
            .header(self.header.clone(), self.secret.clone())
            .json(body)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => {
                let status = resp.status();
                let again = status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
                Err((again, format!("the gateway answered {status}")))
            }
            Err(e) => Err((true, describe(e))),
        }
    }
}

/// A failed try in one line, with its causes (`tcp connect error: Connection refused`), but
/// without the URL, which may carry a key of the gateway's.
fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        return "the gateway did not answer in time".to_owned();
    }
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

impl SmsSender for HttpSmsSender {
    fn send_code<'a>(
        &'a self,
        phone: &'a str,
        code: &'a str,
    ) -> BoxFuture<'a, Result<(), SmsError>> {
        Box::pin(async move {
            let body = GatewayRequest {
                id: uuid::Uuid::new_v4().to_string(),
                phone,
                code,
                template: &self.template,
                ttl_secs: self.ttl_secs,
            };
            let mut tries = 0;
            loop {
                tries += 1;
                match self.try_once(&body).await {
                    Ok(()) => return Ok(()),
                    Err((true, why)) if tries <= self.retries => {
                        tracing::debug!(tries, %why, "SMS gateway try failed; trying again");
                        tokio::time::sleep(sms_backoff(tries - 1)).await;
                    }
                    Err((_, why)) => {
                        return Err(SmsError(format!(
                            "{why} ({tries} {})",
                            if tries == 1 { "try" } else { "tries" }
                        )));
                    }
                }
            }
        })
    }
}

/// Keeps the codes "sent" in memory instead of delivering them, so tests and the bench can log
/// users in through the real API without a gateway (feature `test-util`).
#[cfg(feature = "test-util")]
#[derive(Debug, Default)]
pub struct CapturingSms {
    /// The last code per phone, and how many codes went out in all.
    sent: std::sync::Mutex<(std::collections::HashMap<String, String>, usize)>,
}

#[cfg(feature = "test-util")]
impl CapturingSms {
    /// The last code sent to `phone`.
    pub fn last_code_for(&self, phone: &str) -> Option<String> {
        self.sent.lock().unwrap().0.get(phone).cloned()
    }

    /// How many codes were sent, to any phone.
    pub fn count(&self) -> usize {
        self.sent.lock().unwrap().1
    }
}

#[cfg(feature = "test-util")]
impl SmsSender for CapturingSms {
    fn send_code<'a>(
        &'a self,
        phone: &'a str,
        code: &'a str,
    ) -> BoxFuture<'a, Result<(), SmsError>> {
        let mut sent = self.sent.lock().unwrap();
        sent.0.insert(phone.to_owned(), code.to_owned());
        sent.1 += 1;
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn settings(mode: Option<SmsMode>) -> SmsSettings {
        SmsSettings {
            mode,
            url: Some("http://127.0.0.1:9/sms".into()),
            secret: Some(Secret::new("s3cret")),
            ..SmsSettings::default()
        }
    }

    const TTL: Duration = Duration::from_secs(120);

    #[test]
    fn codes_go_to_the_log_by_default_only_on_loopback() {
        let loopback: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let v6_loopback: SocketAddr = "[::1]:8081".parse().unwrap();
        let public: SocketAddr = "0.0.0.0:8081".parse().unwrap();
        assert!(sender_for(&settings(None), loopback, TTL).is_ok());
        assert!(sender_for(&settings(None), v6_loopback, TTL).is_ok());
        let err = sender_for(&settings(None), public, TTL)
            .err()
            .expect("refused");
        assert!(err.to_string().contains("HMDP_SMS=log on purpose"), "{err}");
        // Chosen on purpose, or a gateway: any address.
        assert!(sender_for(&settings(Some(SmsMode::Log)), public, TTL).is_ok());
        assert!(sender_for(&settings(Some(SmsMode::Http)), public, TTL).is_ok());
    }

    #[test]
    fn a_secret_that_cannot_be_a_header_value_is_refused_without_showing_it() {
        let mut s = settings(Some(SmsMode::Http));
        s.secret = Some(Secret::new("line\nbreak"));
        let err = HttpSmsSender::new(&s, TTL).err().expect("refused");
        assert!(!err.to_string().contains("line"), "{err}");
    }
}
