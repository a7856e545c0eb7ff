//! Login: SMS codes, sessions, and the rules around them.
//!
//! The flow is the original's (§2–3 of its contract), made safe:
//! 1. `POST /user/code` — a six-digit code is stored at `login:code:{phone}` for two minutes and
//!    handed to an [`SmsSender`] (`HMDP_SMS`: an SMS gateway over HTTP, or the log as the
//!    original does, see [`sender_for`]). A per-phone cooldown, daily caps per phone and client
//!    address, and an hourly budget for the whole service stop SMS flooding; earlier codes stay
//!    valid.
//! 2. `POST /user/login` — any live code of the phone is accepted once; wrong tries are counted
//!    per client address (five, and that address must ask for a new code), per phone, and per
//!    address across all phones. An unknown phone becomes a new user. The answer is a random
//!    session token.
//! 3. Every request with a valid `authorization` header refreshes the session's sliding TTL, up
//!    to the session's maximum age; `POST /user/logout/all` ends all of a user's sessions.

mod codes;
mod session;
mod sms;

pub(crate) use codes::{CodeIssuer, LoginRefusal};
pub(crate) use session::{SessionStore, SessionUser};
#[cfg(feature = "test-util")]
pub use sms::CapturingSms;
pub(crate) use sms::sender_for;
pub use sms::{SmsError, SmsSender};
