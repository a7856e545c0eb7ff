//! The payment gateway's side of the contract: how its notices are signed and what they say.
//!
//! The gateway POSTs `/pay/notify` with a JSON body and `x-pay-signature`, the lower-case hex
//! HMAC-SHA256 of the raw body under `HMDP_PAY_SECRET`. The signature is checked on the bytes
//! as received, before the body is read: re-serialised JSON would not be what was signed.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::LifeError;
use crate::{config::Secret, storage::order_life::Notice};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-pay-signature";

/// Whether `signature` (hex) is the HMAC-SHA256 of `body` under `secret`, compared in
/// constant time.
pub(crate) fn signed(secret: &Secret, body: &[u8], signature: &str) -> bool {
    let Ok(given) = hex::decode(signature.trim()) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

/// The signature of `body` under `secret`, as the gateway computes it (for the tests).
#[cfg(any(test, feature = "test-util"))]
pub fn sign(secret: &Secret, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// A notice's body: `{"orderId": "<decimal>", "tradeNo", "amount", "status"}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct NoticeBody {
    /// The order's id as a decimal string (ids exceed JavaScript's exact integers).
    pub order_id: String,
    pub trade_no: String,
    /// In fen (分); must be the payment's amount.
    pub amount: i64,
    pub status: NoticeStatus,
}

/// What happened at the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NoticeStatus {
    Paid,
    Refunded,
}

/// A signed notice, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub order_id: i64,
    pub trade_no: String,
    pub amount: i64,
    pub notice: Notice,
}

/// Checks the signature, then reads the body.
pub(crate) fn read(
    secret: &Secret,
    body: &[u8],
    signature: Option<&str>,
) -> Result<Parsed, LifeError> {
    match signature {
        Some(s) if signed(secret, body, s) => {}
        _ => return Err(LifeError::BadSignature),
    }
    let b: NoticeBody = serde_json::from_slice(body).map_err(|e| {
        LifeError::InvalidNotice(format!("the notice is not the documented JSON: {e}"))
    })?;
    let order_id = b
        .order_id
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| LifeError::InvalidNotice("orderId is not a positive decimal".into()))?;
    if b.trade_no.is_empty() || b.trade_no.len() > 64 {
        return Err(LifeError::InvalidNotice(
            "tradeNo must have 1 to 64 characters".into(),
        ));
    }
    Ok(Parsed {
        order_id,
        trade_no: b.trade_no,
        amount: b.amount,
        notice: match b.status {
            NoticeStatus::Paid => Notice::Paid,
            NoticeStatus::Refunded => Notice::Refunded,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_secrets_signature_of_these_exact_bytes_is_accepted() {
        let secret = Secret::new("0123456789abcdef0123");
        let body = br#"{"orderId":"42","tradeNo":"t1","amount":100,"status":"paid"}"#;
        let good = sign(&secret, body);
        assert!(signed(&secret, body, &good));
        assert!(
            signed(&secret, body, &good.to_uppercase()),
            "hex case does not matter"
        );
        assert!(!signed(&Secret::new("another secret, longer"), body, &good));
        let mut other = body.to_vec();
        other[12] = b'3';
        assert!(!signed(&secret, &other, &good));
        assert!(!signed(&secret, body, "not hex"));
        assert!(!signed(&secret, body, ""));
    }

    #[test]
    fn a_notice_is_read_only_when_signed_and_well_formed() {
        let secret = Secret::new("0123456789abcdef0123");
        let body = br#"{"orderId":"42","tradeNo":"t1","amount":100,"status":"refunded"}"#;
        let parsed = read(&secret, body, Some(&sign(&secret, body))).unwrap();
        assert_eq!(parsed.order_id, 42);
        assert_eq!(parsed.notice, Notice::Refunded);
        assert!(matches!(
            read(&secret, body, None),
            Err(LifeError::BadSignature)
        ));
        let bad = br#"{"orderId":42,"tradeNo":"t1","amount":100,"status":"paid"}"#;
        assert!(matches!(
            read(&secret, bad, Some(&sign(&secret, bad))),
            Err(LifeError::InvalidNotice(_))
        ));
        let unknown = br#"{"orderId":"42","tradeNo":"t1","amount":100,"status":"lost"}"#;
        assert!(matches!(
            read(&secret, unknown, Some(&sign(&secret, unknown))),
            Err(LifeError::InvalidNotice(_))
        ));
    }
}
