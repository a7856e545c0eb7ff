//! The life of a voucher order, as the original's `tb_voucher_order.status` numbers it.

use serde::Serialize;
use utoipa::ToSchema;

/// `tb_voucher_order.status`: 1 未支付, 2 已支付, 3 已核销, 4 已取消, 5 退款中, 6 已退款.
///
/// The moves (`crate::order_life`): 1 → 2 pay, 1 → 4 cancel or close on timeout (stock comes back),
/// 2 → 3 use, 2 → 5 refund asked, 5 → 6 refund confirmed. Nothing else moves an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum VoucherOrderStatus {
    Unpaid = 1,
    Paid = 2,
    Used = 3,
    Cancelled = 4,
    Refunding = 5,
    Refunded = 6,
}

impl VoucherOrderStatus {
    pub(crate) const ALL: [Self; 6] = [
        Self::Unpaid,
        Self::Paid,
        Self::Used,
        Self::Cancelled,
        Self::Refunding,
        Self::Refunded,
    ];

    /// The number stored in the database.
    pub(crate) fn code(self) -> i64 {
        self as i64
    }

    /// The status of a stored number (`None` for a number the original never used).
    pub(crate) fn from_code(code: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == code)
    }

    /// `statusName` in answers and the `from`/`to` labels of `hmdp_order_transitions_total`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Unpaid => "unpaid",
            Self::Paid => "paid",
            Self::Used => "used",
            Self::Cancelled => "cancelled",
            Self::Refunding => "refunding",
            Self::Refunded => "refunded",
        }
    }
}

/// When an unpaid order closes, in ms since the epoch: the second its id was issued (ids carry
/// it, `hmdp_id::decode`) plus the pay timeout. Derived, never stored: the grab's deadline entry
/// and every answer's `payDeadlineMillis` agree by construction.
pub(crate) fn pay_deadline_ms(order_id: i64, timeout: std::time::Duration) -> i64 {
    let (issued_secs, _) = hmdp_id::decode(order_id);
    issued_secs * 1000 + timeout.as_millis() as i64
}

#[cfg(test)]
mod tests {
    use super::{VoucherOrderStatus, pay_deadline_ms};

    #[test]
    fn the_deadline_is_the_ids_second_plus_the_timeout() {
        let id = hmdp_id::compose(1_800_000_000, 7).unwrap();
        let deadline = pay_deadline_ms(id, std::time::Duration::from_secs(900));
        assert_eq!(deadline, 1_800_000_900_000);
    }

    #[test]
    fn codes_are_the_original_numbers_and_round_trip() {
        let codes: Vec<i64> = VoucherOrderStatus::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [1, 2, 3, 4, 5, 6]);
        for s in VoucherOrderStatus::ALL {
            assert_eq!(VoucherOrderStatus::from_code(s.code()), Some(s));
        }
        assert_eq!(VoucherOrderStatus::from_code(0), None);
        assert_eq!(VoucherOrderStatus::from_code(7), None);
    }
}
