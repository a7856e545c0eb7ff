//! Domain newtypes: values that are checked once, at the edge, and trusted everywhere after.
//!
//! "Parse, don't validate": a [`Phone`] can only exist if it passed the phone rule, a
//! [`SessionToken`] only if it has the token shape, so the rest of the code never re-checks.

mod buckets;
mod code;
mod datetime;
mod html;
mod ids;
mod order_status;
mod phone;
mod profile;
mod refusal;
mod token;
mod trace;
mod user;

pub use buckets::StockBuckets;
pub(crate) use code::LoginCode;
pub use datetime::ApiDateTime;
pub(crate) use datetime::parse_flexible as parse_datetime;
pub(crate) use html::{SafeHtml, is_site_path, site_images};
pub(crate) use ids::{BlogId, CommentId};
pub use ids::{OrderId, ShopId, UserId, VoucherId};
pub(crate) use order_status::{VoucherOrderStatus, pay_deadline_ms};
pub(crate) use phone::{Phone, mask_phones};
pub(crate) use profile::{Birthday, ProfileError, ProfileText};
pub(crate) use refusal::{Answer, Answered, ErrorCode, Operations, Refused, ceil_secs, order_data};
pub use token::SessionToken;
pub(crate) use trace::{SPAN_TARGET, TRACEPARENT, TraceParent, fan_out, traces_exported};
pub(crate) use user::{NickName, UserDto};
