//! Login: SMS codes, sessions, and the rules around them.
//!
//! The flow is the original's (§2–3 of its contract), made safe:
//! 1. `POST /user/code` — a six-digit code is stored at `login:code:{phone}` for two minutes and
//!    handed to an [`SmsSender`] (`HMDP_SMS`: an SMS gateway over HTTP, or the log as the
//!    original does, see [`sender_for`]). A per-phone cooldown and daily cap stop SMS flooding.
//! 2. `POST /user/login` — the code is checked, counts wrong tries (five void it), and is
//!    single-use. An unknown phone becomes a new user. The answer is a random session token.
//! 3. Every request with a valid `authorization` header refreshes the session's sliding TTL.

mod codes;
mod session;
mod sms;

pub use codes::{CodeError, CodeIssuer, CodeVerdict};
pub use session::{SessionStore, SessionUser};
#[cfg(feature = "test-util")]
pub use sms::CapturingSms;
pub use sms::{HttpSmsSender, LogSmsSender, SmsError, SmsSender, sender_for};
