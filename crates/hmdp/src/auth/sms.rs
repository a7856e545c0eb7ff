//! Delivering login codes: the [`SmsSender`] seam.
//!
//! The service does not talk to an SMS gateway itself; it hands each code to an `SmsSender`.
//! The default, [`LogSmsSender`], writes the code to the log at INFO level, as the original
//! does, so development, demos and the end-to-end tests need no gateway (tests plug in a
//! capturing sender instead). A deployment implements the trait for its provider and passes it
//! in `Dependencies`. When delivery fails, `POST /user/code` answers 503 and lifts the phone's
//! cooldown, so the user can ask again at once.

use futures_util::future::BoxFuture;

/// Where login codes go. The default, [`LogSmsSender`], writes them to the log as the original
/// does; a deployment plugs in its SMS gateway here.
pub trait SmsSender: Send + Sync + 'static {
    /// Delivers `code` to `phone` (the full number).
    fn send_code<'a>(
        &'a self,
        phone: &'a str,
        code: &'a str,
    ) -> BoxFuture<'a, Result<(), SmsError>>;
}

/// An SMS could not be delivered.
#[derive(Debug, thiserror::Error)]
#[error("SMS delivery failed: {0}")]
pub struct SmsError(pub String);

/// Logs the code at INFO level instead of sending an SMS (development and demos).
#[derive(Debug, Default, Clone, Copy)]
pub struct LogSmsSender;

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
