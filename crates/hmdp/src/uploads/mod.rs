//! Note photos: upload, delete, serve, and clean up the ones no note uses.
//!
//! A photo is judged by its first bytes (JPEG, PNG, GIF or WebP), written to a `.part` file
//! beside its final place, its header read for real dimensions, charged to its uploader's day
//! (`quota.rs`) and renamed, so a half-written, fake or uncharged file is never served. Uploads
//! stop while the folder's disk is nearly full (`HMDP_UPLOAD_MIN_FREE_BYTES`). Its name
//! ([`PhotoName`]) is the original's `/blogs/{d1}/{d2}/{uuid}.{ext}`, the extension taken from
//! the content. Redis keeps who uploaded it (`upload:{name}`) and queues the name by upload
//! time (`upload:pending`): only the uploader may delete it, and only until a note lists it (a
//! published note keeps its photos); a background task deletes the
//! queued photos that no note lists once `HMDP_UPLOAD_GRACE_SECS` have passed
//! ([`Uploads::sweep_once`]). A photo a note uses leaves the queue, so a sweep only looks at
//! the photos uploaded since the one before, but its record keeps the uploader: deleting the
//! note queues its photos again ([`Uploads::release`]), unless one is somebody's icon, each
//! its uploader's again and nobody else's, whoever wrote the note (a note may list any
//! photo). A photo with no record of its uploader (one the original wrote, or whose record a
//! Redis lost) is queued as nobody's: the sweep may delete it, no user may delete it or make it
//! their icon. A photo its uploader makes their icon ([`Uploads::adopt`]) leaves the queue and
//! its record: kept, and nobody's to delete.
//!
//! The folder must be shared by every instance (or there is one instance): any instance's
//! sweep deletes the files of photos uploaded through another. A Redis that loses its data
//! forgets the queue: those photos are then kept, never deleted wrongly. A note posted in the
//! very moment its photo's grace runs out may lose the photo to a sweep running beside it, and
//! one posted in the very moment its uploader deletes the photo, to that delete.

mod name;
mod quota;

use std::{
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, Weak},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::body::Bytes;
use futures_util::{Stream, StreamExt};
use redis::AsyncCommands;
use tokio::{io::AsyncWriteExt, sync::watch, task::JoinHandle};

pub(crate) use name::{ImageKind, InvalidName, PhotoName};

use crate::{
    config::SocialSettings,
    domain::{Answer, Answered, ErrorCode, Refused, UserId},
    kv::{Keys, RedisConn},
    storage::{self, Db, StorageError},
};

/// Errors of the photo store.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The content is not a JPEG, PNG, GIF or WebP image.
    #[error("not an image (JPEG, PNG, GIF or WebP, judged by its content)")]
    NotAnImage,
    /// The photo is larger than `HMDP_UPLOAD_MAX_BYTES`.
    #[error("photo larger than {max} bytes")]
    TooLarge { max: usize },
    /// The request body could not be read as an upload.
    #[error("unreadable upload: {0}")]
    BadBody(String),
    /// The request body is not `multipart/form-data`.
    #[error("not a multipart/form-data body")]
    NotMultipart,
    /// Not a name this service hands out.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// Someone else uploaded this photo, or a note already uses it.
    #[error("this photo is not the caller's to delete")]
    NotYours,
    /// A published note lists this photo: it is the note's now.
    #[error("a published note uses this photo")]
    InUse,
    /// A profile's icon that is neither empty nor a photo the user uploaded and still has.
    #[error("not a photo of the user's")]
    NotAnIcon,
    /// The uploader's photos or bytes of the day (`HMDP_UPLOAD_USER_DAILY_*`) are spent.
    #[error("daily upload quota spent ({count} photos or {bytes} bytes a day)")]
    QuotaExceeded {
        count: u64,
        bytes: u64,
        /// Until the day ends.
        retry_after: Duration,
    },
    /// The upload folder's free space is below `HMDP_UPLOAD_MIN_FREE_BYTES`, or ran out.
    #[error("the upload folder's disk is (nearly) full")]
    DiskFull,
    #[error("photo file operation failed: {0}")]
    Io(#[from] io::Error),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The upload folder cannot be created or resolved.
    #[error("cannot use the upload folder {path}: {source}")]
    Folder { path: PathBuf, source: io::Error },
    /// The upload folder would be served as static files, past every check of this module.
    #[error(
        "HMDP_UPLOAD_DIR ({upload}) is inside HMDP_STATIC_DIR ({static_dir}); choose an upload \
         folder outside the static files (photos are served at /imgs/blogs/ from it, then from \
         the static folder)"
    )]
    InsideStaticDir {
        upload: PathBuf,
        static_dir: PathBuf,
    },
}

impl UploadError {
    /// The same error, for a photo someone wants as their icon: a name that is no photo, or not
    /// theirs, is not an icon.
    pub(crate) fn for_icon(self) -> Self {
        match self {
            UploadError::InvalidName(_) | UploadError::NotYours => UploadError::NotAnIcon,
            e => e,
        }
    }
}

impl Answered for UploadError {
    fn answer(&self) -> Answer {
        use UploadError as E;
        let refused = match self {
            E::Redis(r) => return r.answer(),
            E::Storage(s) => return s.answer(),
            E::Io(_) | E::Folder { .. } | E::InsideStaticDir { .. } => return Answer::Internal,
            E::NotAnImage => Refused::new(
                ErrorCode::NotAnImage,
                "只能上传图片 (only JPEG, PNG, GIF or WebP images, judged by their content)",
            ),
            E::TooLarge { max } => Refused::new(
                ErrorCode::PayloadTooLarge,
                format!("图片过大 (photo larger than {max} bytes)"),
            ),
            E::BadBody(detail) => Refused::new(
                ErrorCode::InvalidRequest,
                format!("上传内容错误 (unreadable multipart body: {detail})"),
            ),
            E::NotMultipart => Refused::new(
                ErrorCode::UnsupportedMediaType,
                "请以 multipart/form-data 上传图片 (expected a multipart/form-data body with the \
                 photo in the field `file`)",
            ),
            E::InvalidName(_) => Refused::new(ErrorCode::InvalidFileName, "错误的文件名称"),
            E::NotYours => Refused::new(
                ErrorCode::NotYourFile,
                "只能删除自己上传且未发布的图片 (only the uploader may delete a photo, until a note \
                 uses it)",
            ),
            E::InUse => Refused::new(
                ErrorCode::FileInUse,
                "图片已被发布的笔记使用，不能删除 (a published note uses this photo)",
            ),
            E::NotAnIcon => Refused::new(
                ErrorCode::InvalidIcon,
                "头像只能是自己上传的图片 (icon must be empty or a photo you uploaded: \
                 /imgs/blogs/…)",
            ),
            E::QuotaExceeded {
                count,
                bytes,
                retry_after,
            } => Refused::new(
                ErrorCode::UploadQuota,
                format!(
                    "今日上传已达上限 (daily upload quota spent: {count} photos or {bytes} bytes a \
                     day)"
                ),
            )
            .retry_after(*retry_after),
            E::DiskFull => Refused::new(
                ErrorCode::DiskFull,
                "存储空间不足，请稍后再试 (no room for photos right now, retry later)",
            ),
        };
        refused.into()
    }
}

/// What one clean-up did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Photos no note used, deleted.
    pub deleted: u64,
    /// Photos a note uses: kept for good.
    pub kept: u64,
    /// Queued photos whose file was already gone (deleted by the uploader, or never written).
    pub missing: u64,
}

/// The photo store. Cheap to clone.
#[derive(Clone)]
pub struct Uploads {
    inner: Arc<Inner>,
}

struct Inner {
    /// Canonical, so no symbolic link above it changes what the checks below it mean.
    dir: PathBuf,
    db: Db,
    redis: RedisConn,
    keys: Keys,
    max_bytes: usize,
    grace: Duration,
    quota: quota::Quota,
    min_free_bytes: u64,
    stop: watch::Sender<bool>,
    sweeper: Mutex<Option<JoinHandle<()>>>,
}

/// Queue entries decided per Redis round trip of a sweep.
const SWEEP_BATCH: usize = 100;

impl Uploads {
    /// Creates the folder (`dir/blogs`) and starts the clean-up task (so: inside a Tokio
    /// runtime). Refuses a `dir` inside `static_dir`, which would serve uploads (and `.part`
    /// files) unchecked.
    pub fn new(
        dir: PathBuf,
        static_dir: Option<&Path>,
        db: Db,
        redis: RedisConn,
        keys: Keys,
        settings: SocialSettings,
    ) -> Result<Self, UploadError> {
        let blogs = dir.join("blogs");
        let folder_error = |source| UploadError::Folder {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&blogs).map_err(folder_error)?;
        let dir = dir.canonicalize().map_err(folder_error)?;
        if let Some(static_dir) = static_dir {
            let static_dir = static_dir
                .canonicalize()
                .or_else(|_| std::path::absolute(static_dir))
                .unwrap_or_else(|_| static_dir.to_owned());
            if dir.starts_with(&static_dir) {
                return Err(UploadError::InsideStaticDir {
                    upload: dir,
                    static_dir,
                });
            }
        }
        let (stop, stopped) = watch::channel(false);
        let grace = settings.upload_grace;
        let quota = quota::Quota {
            redis: redis.clone(),
            keys: keys.clone(),
            time_zone: settings.time_zone,
            daily_count: settings.upload_user_daily_count,
            daily_bytes: settings.upload_user_daily_bytes,
        };
        let inner = Arc::new(Inner {
            dir,
            db,
            redis,
            keys,
            max_bytes: settings.upload_max_bytes,
            grace,
            quota,
            min_free_bytes: settings.upload_min_free_bytes,
            stop,
            sweeper: Mutex::new(None),
        });
        let task = tokio::spawn(sweep_forever(
            Arc::downgrade(&inner),
            stopped,
            sweep_period(grace),
        ));
        *inner.sweeper.lock().expect("not poisoned") = Some(task);
        Ok(Self { inner })
    }

    /// The (canonical) upload folder; photos are below it at [`PhotoName::relative_path`].
    #[cfg(feature = "test-util")]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The largest photo accepted, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.inner.max_bytes
    }

    /// Stores the photo read from `body` for `user` and returns its name.
    ///
    /// A user whose day is spent, or a nearly full disk, is refused before the body is read;
    /// the first bytes decide the kind (anything else is refused before a file is created);
    /// more than [`Uploads::max_bytes`], or than the user's bytes left today, is refused while
    /// reading; a header that does not parse, or absurd dimensions, once written.
    pub async fn store<S>(&self, user: UserId, body: S) -> Result<PhotoName, UploadError>
    where
        S: Stream<Item = Result<Bytes, UploadError>>,
    {
        let remaining = self.inner.quota.remaining(user).await?;
        self.check_free_space().await?;
        let limit = Limit {
            max_bytes: self.inner.max_bytes,
            remaining,
        };
        let mut body = std::pin::pin!(body);
        let mut first = Vec::new();
        let mut len = 0;
        while len < ImageKind::SNIFF_LEN {
            let Some(chunk) = body.next().await else {
                break;
            };
            let chunk = chunk?;
            len += chunk.len();
            self.check_len(limit, len)?;
            first.push(chunk);
        }
        let head: Vec<u8> = first
            .iter()
            .flat_map(|c| c.iter().copied())
            .take(ImageKind::SNIFF_LEN)
            .collect();
        let kind = ImageKind::sniff(&head).ok_or(UploadError::NotAnImage)?;
        let name = PhotoName::generate(kind);
        let after = storage::uploads::newest_blog_id(&self.inner.db).await?;
        self.record(Some(user), &name, after).await?;
        let stored = self.write(user, &name, first, body, len, limit).await;
        if stored.is_err()
            && let Err(e) = self.forget(&name).await
        {
            tracing::warn!(error = %e, %name, "could not drop the record of a failed upload");
        }
        stored.map(|()| name)
    }

    /// Deletes a photo of `user`'s that no note lists; `raw` is the name with or without
    /// `/imgs`.
    ///
    /// A name nobody has a record of is refused when its file exists (a photo a note uses, or
    /// one of another instance's) and accepted when it does not (already deleted, as the
    /// original, whose delete of a missing file succeeds).
    pub async fn delete(&self, user: UserId, raw: &str) -> Result<(), UploadError> {
        let name = PhotoName::parse(raw)?;
        let mut redis = self.inner.redis.clone();
        let (owner, after, at): (Option<i64>, Option<i64>, Option<i64>) = redis
            .hmget(
                self.inner.keys.upload(name.as_str()),
                &["user", "after", "at"],
            )
            .await?;
        // A kept photo's record names its uploader but gives him nothing: a note has it.
        let owner = owner.filter(|_| at.is_some());
        match owner {
            Some(owner) if owner == user.get() => {
                let after = after.unwrap_or(0);
                if storage::uploads::is_referenced(&self.inner.db, name.as_str(), after).await? {
                    return Err(UploadError::InUse);
                }
                self.remove_files(&name).await?;
                self.forget(&name).await?;
                Ok(())
            }
            Some(_) => Err(UploadError::NotYours),
            None if self.locate(&name).await?.is_some() => Err(UploadError::NotYours),
            None => Ok(()),
        }
    }

    /// Makes a photo `user` uploaded theirs for good (their icon): it leaves the clean-up queue
    /// and can no longer be deleted, as a photo a note uses. `raw` is the name with or without
    /// `/imgs`; a photo of someone else's, or one no longer pending (kept or swept), is
    /// [`UploadError::NotYours`].
    pub async fn adopt(&self, user: UserId, raw: &str) -> Result<PhotoName, UploadError> {
        let name = PhotoName::parse(raw)?;
        let (owner, at): (Option<i64>, Option<i64>) = self
            .inner
            .redis
            .clone()
            .hmget(self.inner.keys.upload(name.as_str()), &["user", "at"])
            .await?;
        let pending = at.is_some();
        if !pending || owner != Some(user.get()) || self.locate(&name).await?.is_none() {
            return Err(UploadError::NotYours);
        }
        self.forget(&name).await?;
        Ok(name)
    }

    /// Hands the photos of a deleted note back to the clean-up; how many were queued.
    ///
    /// Each of this service's photos that `images` lists (comma-separated, as a note stores
    /// them) and whose file is here is queued again as if its uploader had uploaded it now
    /// (as nobody's when there is no record of who did), with every note to be looked at
    /// (another note may list it too): the sweep deletes it once the grace period has passed
    /// unless a note uses it then. The note's author gets nothing of photos he did not upload.
    /// Other paths, and photos that are somebody's icon, are left alone.
    pub async fn release(&self, images: &str) -> Result<usize, UploadError> {
        let mut queued = 0;
        let mut redis = self.inner.redis.clone();
        for path in images.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Ok(name) = PhotoName::parse(path) else {
                continue;
            };
            // A photo somebody made their icon stays theirs for good, whatever note listed it.
            if self.locate(&name).await?.is_some()
                && !storage::uploads::is_an_icon(&self.inner.db, name.as_str()).await?
            {
                let uploader: Option<i64> = redis
                    .hget(self.inner.keys.upload(name.as_str()), "user")
                    .await?;
                let uploader = uploader.and_then(|id| UserId::new(id).ok());
                self.record(uploader, &name, 0).await?;
                queued += 1;
            }
        }
        Ok(queued)
    }

    /// The file of a photo, when it is a regular file below real folders (no symbolic link
    /// is followed).
    pub async fn locate(&self, name: &PhotoName) -> io::Result<Option<PathBuf>> {
        let Some(folder) = self.folder_of(name).await? else {
            return Ok(None);
        };
        let path = folder.join(name.file_name());
        match tokio::fs::symlink_metadata(&path).await {
            Ok(m) if m.is_file() => Ok(Some(path)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes the queued photos uploaded more than the grace period before `now` that no
    /// note lists, and drops the used ones from the queue. The background task calls it
    /// periodically; tests call it with a `now` of their choosing.
    pub async fn sweep_once(&self, now: SystemTime) -> Result<SweepReport, UploadError> {
        let cutoff = epoch_ms(now.checked_sub(self.inner.grace).unwrap_or(UNIX_EPOCH));
        let pending = self.inner.keys.upload_pending();
        let mut redis = self.inner.redis.clone();
        let mut report = SweepReport::default();
        loop {
            let members: Vec<String> = redis
                .zrangebyscore_limit(&pending, "-inf", cutoff, 0, SWEEP_BATCH as isize)
                .await?;
            for member in &members {
                let Ok(name) = PhotoName::parse(member) else {
                    let _: () = redis.zrem(&pending, member).await?;
                    continue;
                };
                let after: Option<i64> = redis
                    .hget(self.inner.keys.upload(name.as_str()), "after")
                    .await?;
                // Without the record (expired), every note is looked at.
                let used = storage::uploads::is_referenced(
                    &self.inner.db,
                    name.as_str(),
                    after.unwrap_or(0),
                )
                .await?;
                if used {
                    report.kept += 1;
                    self.keep(&name).await?;
                    continue;
                }
                if self.remove_files(&name).await? {
                    report.deleted += 1;
                } else {
                    report.missing += 1;
                }
                self.forget(&name).await?;
            }
            if members.len() < SWEEP_BATCH || *self.inner.stop.borrow() {
                return Ok(report);
            }
        }
    }

    /// Stops the clean-up task (letting a sweep in progress finish its batch).
    pub async fn shutdown(&self) {
        self.inner.stop.send_replace(true);
        let task = self.inner.sweeper.lock().expect("not poisoned").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Refuses a photo longer than the per-photo limit, or than the uploader's bytes left today.
    fn check_len(&self, limit: Limit, len: usize) -> Result<(), UploadError> {
        if len > limit.max_bytes {
            Err(UploadError::TooLarge {
                max: limit.max_bytes,
            })
        } else if len as u64 > limit.remaining {
            Err(self.inner.quota.exceeded())
        } else {
            Ok(())
        }
    }

    /// Refuses uploads while the folder's free space is below `HMDP_UPLOAD_MIN_FREE_BYTES`.
    async fn check_free_space(&self) -> Result<(), UploadError> {
        let min = self.inner.min_free_bytes;
        if min == 0 {
            return Ok(());
        }
        let free = quota::free_space(&self.inner.dir).await?;
        if free < min {
            tracing::warn!(
                free,
                min,
                dir = %self.inner.dir.display(),
                "photo upload refused: the upload folder's free space is below HMDP_UPLOAD_MIN_FREE_BYTES"
            );
            return Err(UploadError::DiskFull);
        }
        Ok(())
    }

    /// Queues the name, then records the uploader, if known (in this order: a failure between
    /// the two leaves a photo the sweep still visits).
    async fn record(
        &self,
        user: Option<UserId>,
        name: &PhotoName,
        after: i64,
    ) -> Result<(), UploadError> {
        let now = epoch_ms(SystemTime::now());
        let key = self.inner.keys.upload(name.as_str());
        // Only a backstop: the sweep decides the photo long before.
        let ttl = self.inner.grace * 2 + Duration::from_secs(3600);
        let mut redis = self.inner.redis.clone();
        let _: () = redis
            .zadd(self.inner.keys.upload_pending(), name.as_str(), now)
            .await?;
        let mut pipe = redis::pipe();
        match user {
            Some(user) => pipe
                .hset_multiple(&key, &[("user", user.get()), ("at", now), ("after", after)])
                .ignore(),
            None => pipe
                .del(&key)
                .ignore()
                .hset_multiple(&key, &[("at", now), ("after", after)])
                .ignore(),
        };
        let _: () = pipe
            .pexpire(&key, ttl.as_millis() as i64)
            .ignore()
            .query_async(&mut redis)
            .await?;
        Ok(())
    }

    /// Takes a photo a note uses off the queue; its record keeps only the uploader, for as
    /// long as the photo is kept, so that a deleted note hands it back to him.
    async fn keep(&self, name: &PhotoName) -> Result<(), redis::RedisError> {
        let key = self.inner.keys.upload(name.as_str());
        let mut redis = self.inner.redis.clone();
        let _: () = redis
            .zrem(self.inner.keys.upload_pending(), name.as_str())
            .await?;
        redis::pipe()
            .hdel(&key, &["at", "after"])
            .ignore()
            .persist(&key)
            .ignore()
            .query_async(&mut redis)
            .await
    }

    /// Drops the queue entry and the record of a photo.
    async fn forget(&self, name: &PhotoName) -> Result<(), redis::RedisError> {
        let mut redis = self.inner.redis.clone();
        let _: () = redis
            .zrem(self.inner.keys.upload_pending(), name.as_str())
            .await?;
        redis.del(self.inner.keys.upload(name.as_str())).await
    }

    /// Writes `first` and the rest of `body` to the `.part` file, checks the image's header,
    /// charges it to `user`'s day, then renames it into place.
    async fn write<S>(
        &self,
        user: UserId,
        name: &PhotoName,
        first: Vec<Bytes>,
        body: std::pin::Pin<&mut S>,
        len: usize,
        limit: Limit,
    ) -> Result<(), UploadError>
    where
        S: Stream<Item = Result<Bytes, UploadError>>,
    {
        let written = self.write_part(name, first, body, len, limit).await;
        let (mut part, len) = written.map_err(|e| match e {
            UploadError::Io(e) if e.kind() == io::ErrorKind::StorageFull => {
                tracing::warn!(dir = %self.inner.dir.display(), "photo upload failed: the upload folder's disk is full");
                UploadError::DiskFull
            }
            e => e,
        })?;
        let part_path = part.0.clone().expect("not renamed yet");
        let path = part_path.clone();
        let kind = name.kind();
        let dimensions = tokio::task::spawn_blocking(move || kind.dimensions(&path))
            .await
            .map_err(io::Error::other)??;
        if dimensions.is_none() {
            return Err(UploadError::NotAnImage);
        }
        let len = len as u64;
        self.inner.quota.charge(user, len).await?;
        let renamed =
            tokio::fs::rename(&part_path, part_path.with_file_name(name.file_name())).await;
        match renamed {
            Ok(()) => {
                part.0 = None;
                Ok(())
            }
            Err(e) => {
                if let Err(r) = self.inner.quota.refund(user, len).await {
                    tracing::warn!(error = %r, %name, "could not refund a photo that was not stored");
                }
                Err(e.into())
            }
        }
    }

    /// Writes `first` and the rest of `body` to the photo's `.part` file; the file (removed
    /// when dropped) and its length.
    async fn write_part<S>(
        &self,
        name: &PhotoName,
        first: Vec<Bytes>,
        mut body: std::pin::Pin<&mut S>,
        mut len: usize,
        limit: Limit,
    ) -> Result<(PartFile, usize), UploadError>
    where
        S: Stream<Item = Result<Bytes, UploadError>>,
    {
        let folder = self.inner.dir.join(
            name.relative_path()
                .parent()
                .expect("a photo name has folders"),
        );
        tokio::fs::create_dir_all(&folder).await?;
        let part_path = folder.join(name.part_file_name());
        let part = PartFile(Some(part_path.clone()));
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&part_path)
            .await?;
        for chunk in first {
            file.write_all(&chunk).await?;
        }
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            len += chunk.len();
            self.check_len(limit, len)?;
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        file.sync_all().await?;
        Ok((part, len))
    }

    /// The photo's folder, when every folder from the upload folder down is a real one.
    async fn folder_of(&self, name: &PhotoName) -> io::Result<Option<PathBuf>> {
        let mut path = self.inner.dir.clone();
        for folder in name.folders() {
            path.push(folder);
            match tokio::fs::symlink_metadata(&path).await {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(path))
    }

    /// Removes a photo's file and a `.part` left by an interrupted upload; true when the
    /// photo's file was there. A symbolic link in its place is removed, never followed.
    async fn remove_files(&self, name: &PhotoName) -> io::Result<bool> {
        let Some(folder) = self.folder_of(name).await? else {
            return Ok(false);
        };
        remove_if_present(&folder.join(name.part_file_name())).await?;
        remove_if_present(&folder.join(name.file_name())).await
    }
}

/// How long one photo may be: the per-photo limit and the uploader's bytes left today.
#[derive(Debug, Clone, Copy)]
struct Limit {
    max_bytes: usize,
    remaining: u64,
}

/// A `.part` file, removed when dropped: an upload that fails or whose request goes away
/// leaves nothing behind.
/// `None` once renamed into place.
struct PartFile(Option<PathBuf>);

impl Drop for PartFile {
    fn drop(&mut self) {
        if let Some(path) = &self.0
            && let Err(e) = std::fs::remove_file(path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(error = %e, path = %path.display(), "could not remove a partial upload");
        }
    }
}

async fn remove_if_present(path: &Path) -> io::Result<bool> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// How often the background task sweeps: a quarter of the grace period, between a minute and
/// an hour (a photo lives at most that much longer than its grace).
fn sweep_period(grace: Duration) -> Duration {
    (grace / 4).clamp(Duration::from_secs(60), Duration::from_secs(3600))
}

async fn sweep_forever(inner: Weak<Inner>, mut stop: watch::Receiver<bool>, period: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            changed = stop.changed() => {
                // Stopped, or every handle dropped.
                if changed.is_err() || *stop.borrow() {
                    return;
                }
                continue;
            }
            _ = ticks.tick() => {}
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match (Uploads { inner }).sweep_once(SystemTime::now()).await {
            Ok(r) if r != SweepReport::default() => tracing::info!(
                deleted = r.deleted,
                kept = r.kept,
                missing = r.missing,
                "photo clean-up"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "photo clean-up failed; next try at the next sweep")
            }
        }
    }
}

fn epoch_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_come_between_a_minute_and_an_hour_apart() {
        assert_eq!(
            sweep_period(Duration::from_secs(1)),
            Duration::from_secs(60)
        );
        assert_eq!(
            sweep_period(Duration::from_secs(24 * 3600)),
            Duration::from_secs(3600)
        );
        assert_eq!(
            sweep_period(Duration::from_secs(1200)),
            Duration::from_secs(300)
        );
    }
}
