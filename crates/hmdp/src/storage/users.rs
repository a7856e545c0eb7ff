//! `tb_user` and `tb_user_info`.
//!
//! A user's own profile joins the two; a profile change writes both in one transaction, after
//! creating the `tb_user_info` row when there is none (on its own, so that concurrent first
//! changes of one user cannot deadlock each other on MySQL).

use chrono::NaiveDate;
use serde::Serialize;

use super::{BeginWrite, Db, Result, impl_from_row, is_unique_violation, last_id};
use crate::domain::{Phone, UserDto, UserId};

/// A `tb_user` row as the service needs it (the password column is never read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserRow {
    pub id: UserId,
    pub phone: String,
    pub nick_name: String,
    pub icon: String,
}

impl UserRow {
    pub(crate) fn dto(&self) -> UserDto {
        UserDto {
            id: self.id,
            nick_name: self.nick_name.clone(),
            icon: self.icon.clone(),
        }
    }
}

impl_from_row!(UserRow, |row| {
    let id: i64 = row.try_get_unchecked("id")?;
    Ok(UserRow {
        id: UserId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        phone: row.try_get_unchecked("phone")?,
        nick_name: row
            .try_get_unchecked::<Option<String>, _>("nick_name")?
            .unwrap_or_default(),
        icon: row
            .try_get_unchecked::<Option<String>, _>("icon")?
            .unwrap_or_default(),
    })
});

/// What anyone logged in may see of another user's `tb_user_info` row: the original's
/// `UserInfo` without the owner's private fields (city, gender, birthday), which only the
/// owner's own profile shows ([`UserInfo`] adds them).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PublicUserInfo {
    pub user_id: UserId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub introduce: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fans: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub followee: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits: Option<i64>,
    /// Serialised as a Boolean, as the original does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<bool>,
}

impl_from_row!(PublicUserInfo, |row| {
    let id: i64 = row.try_get_unchecked("user_id")?;
    Ok(PublicUserInfo {
        user_id: UserId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        introduce: row.try_get_unchecked("introduce")?,
        fans: row.try_get_unchecked("fans")?,
        followee: row.try_get_unchecked("followee")?,
        credits: row.try_get_unchecked("credits")?,
        level: row
            .try_get_unchecked::<Option<i64>, _>("level")?
            .map(|l| l != 0),
    })
});

/// The original's `UserInfo`, without the time stamps (the original nulls them out): the
/// owner's own view ([`Profile`]), the public part with the owner's private fields.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserInfo {
    #[serde(flatten)]
    pub public: PublicUserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub city: Option<String>,
    /// `false` = male, `true` = female (a Boolean in the original's JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gender: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = Date)]
    pub birthday: Option<NaiveDate>,
}

impl_from_row!(UserInfo, |row| {
    Ok(UserInfo {
        public: sqlx::FromRow::from_row(row)?,
        city: row.try_get_unchecked("city")?,
        gender: row
            .try_get_unchecked::<Option<i64>, _>("gender")?
            .map(|g| g != 0),
        birthday: row.try_get_unchecked("birthday")?,
    })
});

const USER_COLUMNS: &str = "SELECT id, phone, nick_name, icon FROM tb_user";

/// The user with this phone, if any.
pub(crate) async fn find_by_phone(db: &Db, phone: &Phone) -> Result<Option<UserRow>> {
    let sql = format!("{USER_COLUMNS} WHERE phone = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, UserRow>(&sql).bind(phone.as_str()).fetch_optional(pool).await?
    }))
}

/// The user with this id, if any.
pub(crate) async fn find_by_id(db: &Db, id: UserId) -> Result<Option<UserRow>> {
    let sql = format!("{USER_COLUMNS} WHERE id = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, UserRow>(&sql).bind(id.get()).fetch_optional(pool).await?
    }))
}

/// Returns the user with this phone, creating it with `nick_name` if there is none.
///
/// Two first logins of one phone may race; the unique key on `phone` lets exactly one insert
/// win and the other reads the winner's row.
pub(crate) async fn find_or_create(db: &Db, phone: &Phone, nick_name: &str) -> Result<UserRow> {
    if let Some(u) = find_by_phone(db, phone).await? {
        return Ok(u);
    }
    let inserted = crate::storage::on_pool!(db, pool => {
        sqlx::query("INSERT INTO tb_user (phone, nick_name, password, icon) VALUES (?, ?, '', '')")
            .bind(phone.as_str())
            .bind(nick_name)
            .execute(pool)
            .await
            .map(|r| last_id(&r))
    });
    match inserted {
        Ok(id) => Ok(UserRow {
            id: UserId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
            phone: phone.as_str().to_owned(),
            nick_name: nick_name.to_owned(),
            icon: String::new(),
        }),
        Err(e) if is_unique_violation(&e) => {
            find_by_phone(db, phone).await?.ok_or_else(|| e.into())
        }
        Err(e) => Err(e.into()),
    }
}

/// The public part of a user's `tb_user_info` row, if there is a row (the private columns are
/// not even read).
pub(crate) async fn find_public_info(db: &Db, id: UserId) -> Result<Option<PublicUserInfo>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, PublicUserInfo>(
            "SELECT user_id, introduce, fans, followee, credits, level \
             FROM tb_user_info WHERE user_id = ?",
        )
        .bind(id.get())
        .fetch_optional(pool)
        .await?
    }))
}

/// A user's own profile: the `tb_user_info` fields (absent when there is no row) with the
/// nickname and icon of `tb_user`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Profile {
    #[serde(flatten)]
    pub info: UserInfo,
    pub nick_name: String,
    pub icon: String,
}

impl_from_row!(Profile, |row| {
    let id: i64 = row.try_get_unchecked("user_id")?;
    let has_info = row
        .try_get_unchecked::<Option<i64>, _>("info_user_id")?
        .is_some();
    let info: UserInfo = if has_info {
        sqlx::FromRow::from_row(row)?
    } else {
        UserInfo {
            public: PublicUserInfo {
                user_id: UserId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                introduce: None,
                fans: None,
                followee: None,
                credits: None,
                level: None,
            },
            city: None,
            gender: None,
            birthday: None,
        }
    };
    Ok(Profile {
        info,
        nick_name: row
            .try_get_unchecked::<Option<String>, _>("nick_name")?
            .unwrap_or_default(),
        icon: row
            .try_get_unchecked::<Option<String>, _>("icon")?
            .unwrap_or_default(),
    })
});

impl Profile {
    pub(crate) fn dto(&self) -> UserDto {
        UserDto {
            id: self.info.public.user_id,
            nick_name: self.nick_name.clone(),
            icon: self.icon.clone(),
        }
    }
}

/// The profile of a user, if the user exists.
pub(crate) async fn find_profile(db: &Db, id: UserId) -> Result<Option<Profile>> {
    let sql = "SELECT u.id AS user_id, u.nick_name, u.icon, i.user_id AS info_user_id, i.city, \
               i.introduce, i.fans, i.followee, i.gender, i.birthday, i.credits, i.level \
               FROM tb_user u LEFT JOIN tb_user_info i ON i.user_id = u.id WHERE u.id = ?";
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, Profile>(sql).bind(id.get()).fetch_optional(pool).await?
    }))
}

/// What a profile change sets; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProfileChange {
    pub nick_name: Option<String>,
    pub icon: Option<String>,
    pub city: Option<String>,
    pub introduce: Option<String>,
    pub gender: Option<bool>,
    pub birthday: Option<NaiveDate>,
}

impl ProfileChange {
    fn touches_info(&self) -> bool {
        self.city.is_some()
            || self.introduce.is_some()
            || self.gender.is_some()
            || self.birthday.is_some()
    }

    fn touches_user(&self) -> bool {
        self.nick_name.is_some() || self.icon.is_some()
    }
}

/// Applies `change` to the profile of user `id` (creating its `tb_user_info` row if needed).
pub(crate) async fn update_profile(db: &Db, id: UserId, change: &ProfileChange) -> Result<()> {
    if change.touches_info() {
        let insert = match db {
            Db::Sqlite(_) => "INSERT OR IGNORE INTO tb_user_info (user_id) VALUES (?)",
            Db::MySql(_) => "INSERT IGNORE INTO tb_user_info (user_id) VALUES (?)",
        };
        crate::storage::on_pool!(db, pool => {
            sqlx::query(insert).bind(id.get()).execute(pool).await?;
        });
    }
    let info = "UPDATE tb_user_info SET city = COALESCE(?, city), \
                introduce = COALESCE(?, introduce), gender = COALESCE(?, gender), \
                birthday = COALESCE(?, birthday), update_time = CURRENT_TIMESTAMP \
                WHERE user_id = ?";
    let user = "UPDATE tb_user SET nick_name = COALESCE(?, nick_name), \
                icon = COALESCE(?, icon), update_time = CURRENT_TIMESTAMP WHERE id = ?";
    crate::storage::on_pool!(db, pool => {
        // Always `tb_user_info` first, then `tb_user`: one lock order for every change.
        let mut tx = pool.begin_write().await?;
        if change.touches_info() {
            sqlx::query(info)
                .bind(change.city.as_deref())
                .bind(change.introduce.as_deref())
                .bind(change.gender.map(i64::from))
                .bind(change.birthday)
                .bind(id.get())
                .execute(&mut *tx)
                .await?;
        }
        if change.touches_user() {
            sqlx::query(user)
                .bind(change.nick_name.as_deref())
                .bind(change.icon.as_deref())
                .bind(id.get())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?
    });
    Ok(())
}
