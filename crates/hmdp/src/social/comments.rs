//! Comments on notes: written sanitised (the pages would render them as HTML, as notes), at
//! most 255 characters once cleaned (the original's `varchar(255)` column), and listed newest
//! first with their author.
//!
//! A reply names the thread it joins (`parentId`, a top-level comment of the same note) and
//! may name the comment it answers (`answerId`, in that thread); either alone is enough, a
//! mismatch is refused. Deleting a top-level comment deletes its thread. `storage::comments`
//! keeps `tb_blog.comments` equal to the rows.
//!
//! Each user's comments a day are capped (`HMDP_COMMENT_USER_DAILY_COUNT`, the day in
//! `HMDP_TIME_ZONE`), counted in Redis by every instance together, so one account cannot fill
//! the table and the write lock for ever. A note's author may delete any comment on the note
//! (what spam there is lands on their page); anyone else only their own.

use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::{
    Social, SocialError,
    blogs::PAGE_SIZE,
    scripts::{CHARGE_COMMENT, REFUND_COMMENT},
};
use crate::{
    config::TimeZone,
    domain::{ApiDateTime, BlogId, CommentId, UserId},
    storage::{
        blogs,
        comments::{self, CommentRow, NewComment, NotAdded, NotDeleted},
    },
};

/// The longest comment, in characters after cleaning (the column's `varchar(255)`).
const CONTENT_MAX: usize = 255;

/// A new comment.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommentInput {
    /// HTML; cleaned of anything that could run in a reader's browser, then 1 to 255
    /// characters.
    #[schema(min_length = 1, max_length = 255)]
    pub content: String,
    /// The top-level comment of the same note whose thread this reply joins.
    #[serde(default)]
    pub parent_id: Option<CommentId>,
    /// The comment of the same note this one answers.
    #[serde(default)]
    pub answer_id: Option<CommentId>,
}

/// A comment with its author (null fields omitted).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Comment {
    pub id: CommentId,
    pub user_id: UserId,
    pub blog_id: BlogId,
    /// The thread's top-level comment; absent on a top-level comment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<i64>,
    /// The comment this one answers, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_id: Option<i64>,
    /// Sanitised HTML.
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create_time: Option<ApiDateTime>,
    /// The author's nickname.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The author's icon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
}

impl From<CommentRow> for Comment {
    fn from(r: CommentRow) -> Self {
        Comment {
            id: r.id,
            user_id: r.user_id,
            blog_id: r.blog_id,
            parent_id: (r.parent_id > 0).then_some(r.parent_id),
            answer_id: (r.answer_id > 0).then_some(r.answer_id),
            content: r.content,
            create_time: r.create_time.map(ApiDateTime),
            name: r.name,
            icon: r.icon,
        }
    }
}

impl Social {
    /// Adds `author`'s comment to a note; its id.
    pub async fn comment(
        &self,
        blog: BlogId,
        author: UserId,
        input: &CommentInput,
    ) -> Result<CommentId, SocialError> {
        let content = super::blogs::clean_content(&input.content, CONTENT_MAX)
            .map_err(SocialError::InvalidComment)?;
        let quota = self.charge_comment(author).await?;
        let (now, _) = super::blogs::now_local();
        let added = comments::insert(
            &self.db,
            &NewComment {
                blog,
                user: author,
                parent: input.parent_id,
                answer: input.answer_id,
                content: &content,
                now,
            },
        )
        .await;
        if !matches!(added, Ok(Ok(_))) {
            self.refund_comment(&quota).await;
        }
        added?.map_err(|why| match why {
            NotAdded::NoNote => SocialError::BlogNotFound,
            NotAdded::BadParent => SocialError::InvalidComment(
                "parentId 不是该笔记的一级评论 (parentId names no top-level comment of this note)"
                    .into(),
            ),
            NotAdded::BadAnswer => SocialError::InvalidComment(
                "answerId 不是该笔记的评论 (answerId names no comment of this note)".into(),
            ),
            NotAdded::AnswerOutsideParent => SocialError::InvalidComment(
                "answerId 不在 parentId 的评论中 (answerId names a comment outside the thread \
                 of parentId)"
                    .into(),
            ),
        })
    }

    /// Counts one comment of `author`'s day, or refuses it when the day is spent; the day's
    /// key, to give it back with.
    async fn charge_comment(&self, author: UserId) -> Result<String, SocialError> {
        let now = Utc::now();
        let zone = self.settings.time_zone;
        let key = self.keys.comment_quota(author.get(), &zone.day(now));
        let counted: i64 = CHARGE_COMMENT
            .key(&key)
            .arg(self.settings.comment_user_daily_count)
            .arg(TimeZone::DAY_RECORD_TTL.as_secs())
            .invoke_async(&mut self.conn())
            .await?;
        if counted == 1 {
            Ok(key)
        } else {
            Err(SocialError::CommentQuota {
                count: self.settings.comment_user_daily_count,
                retry_after: zone.until_midnight(now),
            })
        }
    }

    /// Gives back a counted comment that was not written (refused, or the database failed).
    async fn refund_comment(&self, key: &str) {
        let refunded: redis::RedisResult<i64> =
            REFUND_COMMENT.key(key).invoke_async(&mut self.conn()).await;
        if let Err(e) = refunded {
            tracing::warn!(error = %e, "a comment not written stays counted in its day's quota");
        }
    }

    /// Page `current` of a note's comments, newest first.
    pub async fn comments(&self, blog: BlogId, current: i64) -> Result<Vec<Comment>, SocialError> {
        if !blogs::exists(&self.db, blog).await? {
            return Err(SocialError::BlogNotFound);
        }
        let rows = comments::of_blog(&self.db, blog, current, PAGE_SIZE).await?;
        Ok(rows.into_iter().map(Comment::from).collect())
    }

    /// Deletes a comment (a top-level one with its thread) if `user` wrote it or its note; how
    /// many comments went.
    pub async fn delete_comment(&self, id: CommentId, user: UserId) -> Result<u64, SocialError> {
        comments::delete(&self.db, id, user)
            .await?
            .map_err(|why| match why {
                NotDeleted::NoComment => SocialError::CommentNotFound,
                NotDeleted::NotAuthor => SocialError::NotYourComment,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::blogs::clean_content;
    use super::CONTENT_MAX;

    #[test]
    fn comments_are_cleaned_and_counted_after_cleaning() {
        let c = clean_content("<b>hi</b><script>alert(1)</script>", CONTENT_MAX).unwrap();
        assert_eq!(c, "<b>hi</b>");
        assert!(clean_content(&"好".repeat(255), CONTENT_MAX).is_ok());
        assert!(clean_content(&"好".repeat(256), CONTENT_MAX).is_err());
        // `<` becomes `&lt;`: 100 of them are 400 characters once cleaned.
        assert!(clean_content(&"<".repeat(100), CONTENT_MAX).is_err());
        assert!(clean_content("<script>x</script>", CONTENT_MAX).is_err());
        assert!(clean_content("a\u{0}b", CONTENT_MAX).is_err());
    }
}
