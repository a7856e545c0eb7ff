//! Typed database ids ([`UserId`], [`ShopId`], [`VoucherId`], [`BlogId`], [`CommentId`],
//! [`OrderId`]): positive `i64`s that cannot be mixed up.
//!
//! A path or JSON id that is zero, negative or not a number is refused at the edge as
//! `invalid_request` instead of becoming a query for a row that cannot exist. Each type is a
//! plain `i64` on the wire and in the database (`serde(try_from, into)`), so the original
//! front-end sees the numbers it always saw.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("id must be a positive integer")]
pub struct IdError;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[derive(utoipa::ToSchema)]
        #[serde(try_from = "i64", into = "i64")]
        #[schema(minimum = 1)]
        pub struct $name(i64);

        impl $name {
            /// Wraps a positive database id.
            pub fn new(v: i64) -> Result<Self, IdError> {
                if v > 0 { Ok(Self(v)) } else { Err(IdError) }
            }

            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl TryFrom<i64> for $name {
            type Error = IdError;
            fn try_from(v: i64) -> Result<Self, IdError> {
                Self::new(v)
            }
        }

        impl From<$name> for i64 {
            fn from(v: $name) -> i64 {
                v.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                s.parse::<i64>().map_err(|_| IdError).and_then(Self::new)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        /// A plain `BIGINT` in the database.
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            i64: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <i64 as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <i64 as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            i64: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut DB::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                self.0.encode_by_ref(buf)
            }
        }

        /// A plain integer in Redis (a stream field, a script argument).
        impl redis::ToRedisArgs for $name {
            fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
                self.0.write_redis_args(out)
            }
        }
    };
}

id_type!(
    /// A `tb_user.id`.
    UserId
);
id_type!(
    /// A `tb_shop.id`.
    ShopId
);
id_type!(
    /// A `tb_voucher.id`.
    VoucherId
);
id_type!(
    /// A `tb_blog.id`: a note.
    BlogId
);
id_type!(
    /// A `tb_blog_comments.id`: a comment on a note.
    CommentId
);
id_type!(
    /// A `tb_voucher_order.id`: a flash-sale order, accepted or written.
    OrderId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_must_be_positive_integers() {
        assert_eq!("42".parse::<UserId>().unwrap().get(), 42);
        for bad in ["0", "-1", "", "1.5", "abc", "99999999999999999999"] {
            assert!(bad.parse::<UserId>().is_err(), "{bad:?}");
            assert!(bad.parse::<OrderId>().is_err(), "{bad:?}");
        }
        // Order ids are large (timestamp bits on top).
        let big = "662608699520450561".parse::<OrderId>().unwrap();
        assert_eq!(big.get(), 662_608_699_520_450_561);
    }

    #[test]
    fn ids_serialize_as_json_numbers() {
        let id = ShopId::new(7).unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "7");
        assert!(serde_json::from_str::<ShopId>("0").is_err());
    }
}
