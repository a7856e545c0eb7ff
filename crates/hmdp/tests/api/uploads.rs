//! Note photos: upload (login, content check, size limit, daily caps, free space), serving at
//! `/imgs/blogs/…` (with the static folder behind), delete (owner only, names checked, not
//! once a note uses it), and the clean-up of photos no note uses.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use hmdp::{
    Application, Dependencies,
    testing::{auth::CapturingSms, uploads::SweepReport},
};
use redis::AsyncCommands;
use serde_json::json;

use crate::{
    both_backends,
    helpers::{
        Backend, Resp, TestApp, assert_nothing_outside, multipart, raw_get, spawn_app,
        spawn_app_with, square_png, test_config,
    },
};

both_backends!(
    the_sweep_deletes_unused_photos_and_keeps_used_ones,
    a_photo_a_published_note_uses_cannot_be_deleted,
);

// ---- bytes built here ----

/// A JPEG's first bytes (SOI, a JFIF APP0 segment), a 2×2 frame header and its end marker.
fn tiny_jpeg() -> Vec<u8> {
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
    jpeg.extend(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
    jpeg.extend([
        0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x02, 0x00, 0x02, 0x01, 0x01, 0x11, 0x00,
    ]);
    jpeg.extend([0xFF, 0xD9]);
    jpeg
}

/// A 1×1 PNG whose header claims `width`×`height` (a decompression bomb needs no more).
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut png = square_png(1, [5, 5, 5]);
    png[16..20].copy_from_slice(&width.to_be_bytes());
    png[20..24].copy_from_slice(&height.to_be_bytes());
    png
}

/// A PNG signature followed by `len` bytes in total.
fn png_of_len(len: usize) -> Vec<u8> {
    let mut data = square_png(1, [1, 2, 3]);
    data.resize(len, 0);
    data
}

async fn upload_as(
    app: &TestApp,
    token: Option<&str>,
    field: &str,
    file_name: &str,
    data: &[u8],
) -> Resp {
    let (content_type, body) = multipart(field, file_name, "image/png", data);
    let mut req = app
        .client
        .post(app.url("/api/upload/blog"))
        .header("content-type", content_type)
        .body(body);
    if let Some(t) = token {
        req = req.header("authorization", t);
    }
    app.send(req).await
}

async fn upload(app: &TestApp, token: &str, file_name: &str, data: &[u8]) -> Resp {
    upload_as(app, Some(token), "file", file_name, data).await
}

/// Uploads and returns the answered name.
pub(crate) async fn uploaded(app: &TestApp, token: &str, data: &[u8]) -> String {
    let r = upload(app, token, "photo.png", data).await;
    assert!(r.success(), "upload: {r:?}");
    r.body["data"].as_str().unwrap().to_owned()
}

async fn delete(app: &TestApp, token: Option<&str>, name: &str) -> Resp {
    let mut req = app
        .client
        .get(app.url("/api/upload/blog/delete"))
        .query(&[("name", name)]);
    if let Some(t) = token {
        req = req.header("authorization", t);
    }
    app.send(req).await
}

/// `GET /imgs{name}`: status, content type, body.
async fn fetch(app: &TestApp, path: &str) -> (u16, String, Vec<u8>) {
    app.get_bytes(path).await
}

/// Every file below `dir`, relative, sorted (symbolic links included, not followed).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The photos and bytes charged to the user of `token` today.
async fn charged(app: &TestApp, token: &str) -> (u64, u64) {
    let id = app.get("/api/user/me", Some(token)).await.body["data"]["id"]
        .as_i64()
        .unwrap();
    let today = chrono::Utc::now()
        .with_timezone(&app.state.config.social.time_zone.0)
        .format("%Y%m%d")
        .to_string();
    let (count, bytes): (Option<u64>, Option<u64>) = app
        .redis()
        .await
        .hmget(app.state.keys.upload_quota(id, &today), &["count", "bytes"])
        .await
        .unwrap();
    (count.unwrap_or(0), bytes.unwrap_or(0))
}

fn assert_retry_after_within_a_day(r: &Resp) {
    let secs: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=24 * 3600).contains(&secs), "{secs}");
}

fn on_disk(app: &TestApp, name: &str) -> PathBuf {
    app.state.uploads.dir().join(name.trim_start_matches('/'))
}

fn assert_name_shape(name: &str, ext: &str) {
    let re = regex::Regex::new(&format!(
        r"^/blogs/(1[0-5]|[0-9])/(1[0-5]|[0-9])/[0-9a-f]{{8}}-[0-9a-f]{{4}}-4[0-9a-f]{{3}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}\.{ext}$"
    ))
    .unwrap();
    assert!(re.is_match(name), "{name}");
}

// ---- the tests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_is_uploaded_served_and_deleted_by_its_owner_only() {
    let app = spawn_app(Backend::Sqlite).await;
    let alice = app.login("13812340001").await;
    let bob = app.login("13812340002").await;
    let png = square_png(1, [200, 10, 30]);

    // Login is required (the original left /upload/** open).
    let r = upload_as(&app, None, "file", "a.png", &png).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");
    let r = delete(
        &app,
        None,
        "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
    )
    .await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{r:?}");

    // The name's extension comes from the content, not from the client's file name.
    let name = {
        let r = upload(&app, &alice, "holiday.gif", &png).await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.status, 200);
        r.body["data"].as_str().unwrap().to_owned()
    };
    assert_name_shape(&name, "png");
    let (status, content_type, body) = fetch(&app, &format!("/imgs{name}")).await;
    assert_eq!((status, content_type.as_str()), (200, "image/png"));
    assert_eq!(body, png);
    let r = app
        .client
        .get(app.url(&format!("/imgs{name}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(std::fs::read(on_disk(&app, &name)).unwrap(), png);

    let jpeg_name = uploaded(&app, &alice, &tiny_jpeg()).await;
    assert_name_shape(&jpeg_name, "jpg");
    let (status, content_type, body) = fetch(&app, &format!("/imgs{jpeg_name}")).await;
    assert_eq!((status, content_type.as_str()), (200, "image/jpeg"));
    assert_eq!(body, tiny_jpeg());

    // Photos above the global 64 KiB body limit pass: the route has its own limit.
    let big = png_of_len(200 * 1024);
    let big_name = uploaded(&app, &alice, &big).await;
    assert_eq!(fetch(&app, &format!("/imgs{big_name}")).await.2, big);

    // Nothing half-written is left beside the photos.
    let files = files_below(app.state.uploads.dir());
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(
        files
            .iter()
            .all(|f| !f.to_string_lossy().ends_with(".part")),
        "{files:?}"
    );

    // Only the uploader may delete.
    let r = delete(&app, Some(&bob), &name).await;
    assert_eq!((r.status, r.code()), (200, "not_your_file"), "{r:?}");
    assert!(!r.success());
    assert_eq!(fetch(&app, &format!("/imgs{name}")).await.0, 200);

    // The owner deletes, with the pages' `/imgs` prefix ...
    let r = delete(&app, Some(&alice), &format!("/imgs{name}")).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body, json!({"success": true}));
    assert!(!on_disk(&app, &name).exists());
    let (status, _, _) = fetch(&app, &format!("/imgs{name}")).await;
    assert_eq!(status, 404);
    // ... again (nothing left to delete: fine, as the original) ...
    assert!(delete(&app, Some(&alice), &name).await.success());
    // ... and without the prefix.
    assert!(delete(&app, Some(&alice), &jpeg_name).await.success());
    assert!(!on_disk(&app, &jpeg_name).exists());
    assert_eq!(files_below(app.state.uploads.dir()).len(), 1);

    // The records went with the photos; only the big one is still queued.
    let mut redis = app.redis().await;
    let pending: Vec<String> = redis
        .zrange(app.state.keys.upload_pending(), 0, -1)
        .await
        .unwrap();
    assert_eq!(pending, vec![big_name.clone()]);
    let exists: bool = redis.exists(app.state.keys.upload(&name)).await.unwrap();
    assert!(!exists);

    // The service stops with its clean-up task.
    tokio::time::timeout(Duration::from_secs(15), app.stop())
        .await
        .expect("the service stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_images_of_allowed_size_are_accepted() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.social.upload_max_bytes = 128 * 1024).await;
    let token = app.login("13812340003").await;

    for (file_name, data) in [
        ("x.png", b"just some text, not a picture".to_vec()),
        ("x.png", Vec::new()),
        (
            "x.svg",
            b"<svg xmlns='http://www.w3.org/2000/svg'/>".to_vec(),
        ),
        ("x.html", b"<html><script>alert(1)</script></html>".to_vec()),
        ("x.png", b"\x89PNG".to_vec()),
    ] {
        let r = upload(&app, &token, file_name, &data).await;
        assert_eq!(
            (r.status, r.code()),
            (200, "not_an_image"),
            "{file_name}: {r:?}"
        );
        assert!(!r.success());
    }

    // Within the limit, at it, beyond it (counted while writing), far beyond it (the route's
    // body limit).
    assert!(
        upload(&app, &token, "ok.png", &png_of_len(100 * 1024))
            .await
            .success()
    );
    assert!(
        upload(&app, &token, "ok.png", &png_of_len(128 * 1024))
            .await
            .success()
    );
    for len in [128 * 1024 + 1, 300 * 1024] {
        let r = upload(&app, &token, "big.png", &png_of_len(len)).await;
        assert_eq!(
            (r.status, r.code()),
            (413, "payload_too_large"),
            "{len}: {r:?}"
        );
        assert!(r.msg().contains("131072"), "{r:?}");
    }

    // Not multipart, or without the `file` field.
    let r = app
        .send(
            app.client
                .post(app.url("/api/upload/blog"))
                .header("authorization", &token)
                .json(&json!({"file": "x"})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (415, "unsupported_media_type"),
        "{r:?}"
    );
    let r = upload_as(
        &app,
        Some(&token),
        "photo",
        "a.png",
        &square_png(1, [0, 0, 0]),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"), "{r:?}");

    // Only the two accepted photos are on disk, nothing partial.
    let files = files_below(app.state.uploads.dir());
    assert_eq!(files.len(), 2, "{files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_not_ours_are_refused_and_nothing_outside_is_reached() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812340004").await;
    let dir = app.state.uploads.dir().to_owned();
    // A secret beside the upload folder.
    let secret = dir.parent().unwrap().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();

    for name in [
        "",
        "../secret.txt",
        "/blogs/../../secret.txt",
        "/imgs/blogs/7/14/../../../../secret.txt",
        "/blogs/7/14/..%2f..%2f..%2fsecret.txt",
        "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg/../../../../../secret.txt",
        "/etc/passwd",
        "blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
        "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.txt",
        "/blogs/8/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg",
        "/blogs",
        "/blogs/7/14",
        "/blogs/7/14/.4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg.part",
        "C:\\secret.txt",
    ] {
        let r = delete(&app, Some(&token), name).await;
        assert_eq!(
            (r.status, r.code()),
            (200, "invalid_file_name"),
            "{name:?}: {r:?}"
        );
        assert_eq!(r.msg(), "错误的文件名称");
    }
    let r = app.get("/api/upload/blog/delete", Some(&token)).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"), "{r:?}");
    assert!(secret.exists());

    // A link in the upload folder under a valid name is neither served nor followed on
    // delete; nor is a linked folder.
    let linked = "/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg";
    std::fs::create_dir_all(dir.join("blogs/7/14")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join(&linked[1..])).unwrap();
    let outside = dir.parent().unwrap().join("outside");
    std::fs::create_dir_all(outside.join("0")).unwrap();
    std::fs::write(
        outside.join("0/26a7cd7e-6320-432c-a0b4-1b7418f45ec7.jpg"),
        "top secret",
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("blogs/4")).unwrap();
    let in_linked_folder = "/blogs/4/0/26a7cd7e-6320-432c-a0b4-1b7418f45ec7.jpg";
    for name in [linked, in_linked_folder] {
        let (status, _, body) = fetch(&app, &format!("/imgs{name}")).await;
        assert_eq!(status, 404, "{name}");
        assert!(!String::from_utf8_lossy(&body).contains("top secret"));
        let r = delete(&app, Some(&token), name).await;
        assert!(r.success(), "{name}: {r:?}");
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret");
    assert!(
        outside
            .join("0/26a7cd7e-6320-432c-a0b4-1b7418f45ec7.jpg")
            .exists()
    );

    // Serving: traversal sent byte for byte never leaves the folder. The linked folder goes
    // first: a new photo's folder is random, and one in `blogs/4` would be refused as linked.
    std::fs::remove_file(dir.join("blogs/4")).unwrap();
    let name = uploaded(&app, &token, &square_png(1, [1, 1, 1])).await;
    let (status, answer) = raw_get(app.addr, &format!("/imgs{name}"));
    assert_eq!(status, 200, "the raw client works: {answer}");
    for target in [
        "/imgs/blogs/../../secret.txt",
        "/imgs/blogs/%2e%2e/%2e%2e/secret.txt",
        "/imgs/blogs/..%2f..%2fsecret.txt",
        "/imgs/blogs/7/14/..%2f..%2f..%2f..%2fsecret.txt",
        "/imgs/blogs/%2fetc%2fpasswd",
        "/imgs/blogs/..\\..\\secret.txt",
    ] {
        assert_nothing_outside(app.addr, target);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_folder_serves_the_other_imgs_blogs_files() {
    let parent = tempfile::tempdir().unwrap();
    let site = parent.path().join("site");
    let sample = "/imgs/blogs/7/14/4771fefb-1a87-4252-816c-9f7ec41ffa4a.jpg";
    std::fs::create_dir_all(site.join("imgs/blogs/7/14")).unwrap();
    std::fs::write(site.join("index.html"), "<h1>hmdp pages</h1>").unwrap();
    std::fs::write(site.join("imgs/blogs/blog1.jpg"), tiny_jpeg()).unwrap();
    std::fs::write(site.join(&sample[1..]), tiny_jpeg()).unwrap();
    let root = site.clone();
    let app = spawn_app_with(Backend::Sqlite, move |c| c.static_dir = Some(root)).await;
    let token = app.login("13812340005").await;

    let name = uploaded(&app, &token, &square_png(1, [9, 9, 9])).await;
    assert!(
        !site.join(format!("imgs{name}")).exists(),
        "uploads stay out of the pages"
    );
    let (status, content_type, body) = fetch(&app, &format!("/imgs{name}")).await;
    assert_eq!((status, content_type.as_str()), (200, "image/png"));
    assert_eq!(body, square_png(1, [9, 9, 9]));
    for path in ["/imgs/blogs/blog1.jpg", sample] {
        let (status, content_type, body) = fetch(&app, path).await;
        assert_eq!(
            (status, content_type.as_str()),
            (200, "image/jpeg"),
            "{path}"
        );
        assert_eq!(body, tiny_jpeg());
    }
    assert_eq!(fetch(&app, "/index.html").await.0, 200);
    let r = app.get("/imgs/blogs/nope.jpg", None).await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    // The original's sample photo is nobody's to delete.
    let r = delete(&app, Some(&token), sample).await;
    assert!(r.success(), "{r:?}");
    assert!(site.join(&sample[1..]).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_folder_inside_the_static_folder_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let mut config = test_config(
        format!("sqlite://{}/hmdp.db", dir.path().display()),
        dir.path(),
    );
    config.static_dir = Some(site.clone());
    config.social.upload_dir = Some(site.join("imgs"));
    let built = Application::build_with(
        config,
        Dependencies {
            sms: Arc::new(CapturingSms::default()),
        },
    )
    .await;
    let error = format!("{:#}", built.err().expect("the start is refused"));
    assert!(error.contains("inside HMDP_STATIC_DIR"), "{error}");

    // Beside it is fine.
    let mut config = test_config(
        format!("sqlite://{}/hmdp2.db", dir.path().display()),
        dir.path(),
    );
    config.static_dir = Some(site.clone());
    config.social.upload_dir = Some(dir.path().join("uploads"));
    let app = Application::build_with(
        config,
        Dependencies {
            sms: Arc::new(CapturingSms::default()),
        },
    )
    .await
    .expect("the app builds");
    app.state().uploads.shutdown().await;
}

async fn insert_note(app: &TestApp, images: &str) {
    let sql = "INSERT INTO tb_blog (shop_id, user_id, title, images, content) \
               VALUES (1, 1, 'a note', ?, 'with photos')";
    match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => {
            sqlx::query(sql).bind(images).execute(p).await.unwrap();
        }
        hmdp::testing::storage::Db::MySql(p) => {
            sqlx::query(sql).bind(images).execute(p).await.unwrap();
        }
    }
}

async fn the_sweep_deletes_unused_photos_and_keeps_used_ones(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.social.upload_grace = Duration::from_secs(1);
    })
    .await;
    let token = app.login("13812340006").await;
    // A note from before the uploads: it cannot list them, and is not looked at.
    insert_note(&app, "/imgs/blogs/blog1.jpg").await;
    let unused = uploaded(&app, &token, &square_png(1, [1, 0, 0])).await;
    let used = uploaded(&app, &token, &square_png(1, [0, 1, 0])).await;
    let deleted_by_owner = uploaded(&app, &token, &square_png(1, [0, 0, 1])).await;
    assert!(
        delete(&app, Some(&token), &deleted_by_owner)
            .await
            .success()
    );
    insert_note(&app, &format!("/imgs/blogs/blog1.jpg,/imgs{used}")).await;

    // Too young: nothing happens.
    let now = SystemTime::now();
    let r = app.state.uploads.sweep_once(now).await.unwrap();
    assert_eq!(r, SweepReport::default());
    assert!(on_disk(&app, &unused).exists() && on_disk(&app, &used).exists());

    // After the grace period: the unused one goes, the used one stays.
    let later = now + Duration::from_secs(5);
    let r = app.state.uploads.sweep_once(later).await.unwrap();
    assert_eq!(
        r,
        SweepReport {
            deleted: 1,
            kept: 1,
            missing: 0
        }
    );
    assert!(!on_disk(&app, &unused).exists());
    assert_eq!(fetch(&app, &format!("/imgs{unused}")).await.0, 404);
    let (status, _, body) = fetch(&app, &format!("/imgs{used}")).await;
    assert_eq!((status, body), (200, square_png(1, [0, 1, 0])));

    // Decided photos leave the queue: the next sweep has nothing to do, and the used photo
    // now belongs to its note; its record keeps only the uploader, for good (a deleted note
    // hands the photo back to him).
    let mut redis = app.redis().await;
    let queued: i64 = redis.zcard(app.state.keys.upload_pending()).await.unwrap();
    assert_eq!(queued, 0);
    let exists: bool = redis.exists(app.state.keys.upload(&unused)).await.unwrap();
    assert!(!exists, "{unused}");
    let kept: std::collections::HashMap<String, i64> =
        redis.hgetall(app.state.keys.upload(&used)).await.unwrap();
    let uploader = app.get("/api/user/me", Some(&token)).await.body["data"]["id"]
        .as_i64()
        .unwrap();
    assert_eq!(kept, [("user".to_owned(), uploader)].into());
    let ttl: i64 = redis.ttl(app.state.keys.upload(&used)).await.unwrap();
    assert_eq!(ttl, -1, "kept for as long as the photo");
    let r = app.state.uploads.sweep_once(later).await.unwrap();
    assert_eq!(r, SweepReport::default());
    assert!(on_disk(&app, &used).exists());
    let r = delete(&app, Some(&token), &used).await;
    assert_eq!(r.code(), "not_your_file", "{r:?}");

    // A queued photo whose file went away (an upload cut short) is only dropped.
    let gone = uploaded(&app, &token, &square_png(1, [2, 2, 2])).await;
    std::fs::remove_file(on_disk(&app, &gone)).unwrap();
    let r = app
        .state
        .uploads
        .sweep_once(SystemTime::now() + Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.missing, 1, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_is_documented_as_multipart() {
    let app = spawn_app(Backend::Sqlite).await;
    let doc = app.get("/openapi.json", None).await.body;
    let op = &doc["paths"]["/upload/blog"]["post"];
    let form = &op["requestBody"]["content"]["multipart/form-data"]["schema"];
    assert_eq!(form["properties"]["file"]["format"], "binary", "{op}");
    assert!(op["responses"]["413"].is_object(), "{op}");
    assert!(op["responses"]["401"].is_object(), "{op}");
    let quota = op["responses"]["429"]["description"].as_str().unwrap();
    assert!(quota.contains("upload_quota"), "{op}");
    assert!(op["responses"]["507"].is_object(), "{op}");
    let delete = &doc["paths"]["/upload/blog/delete"]["get"];
    assert!(delete["responses"]["401"].is_object(), "{delete}");
    assert!(delete["responses"]["507"].is_null(), "{delete}");
}

/// On a Redis Cluster the owner records and the sweep queue live in different slots: upload,
/// owner-only delete and the sweep still work (no command names keys of two slots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_work_on_a_redis_cluster() {
    let cluster = crate::helpers::RedisCluster::start().await;
    let url = cluster.urls().join(",");
    let app = spawn_app_with(Backend::Sqlite, move |c| {
        c.redis_url = Some(url);
        c.social.upload_grace = Duration::from_secs(1);
    })
    .await;
    let owner = app.login("13812340016").await;
    let other = app.login("13812340017").await;
    let kept = uploaded(&app, &owner, &square_png(1, [9, 9, 9])).await;
    let swept = uploaded(&app, &owner, &square_png(1, [8, 8, 8])).await;
    assert_eq!(
        delete(&app, Some(&other), &kept).await.code(),
        "not_your_file"
    );
    assert!(
        delete(&app, Some(&owner), &format!("/imgs{kept}"))
            .await
            .success()
    );
    assert!(!on_disk(&app, &kept).exists());
    let later = SystemTime::now() + Duration::from_secs(5);
    let r = app.state.uploads.sweep_once(later).await.unwrap();
    assert_eq!(r.deleted, 1, "{r:?}");
    assert!(!on_disk(&app, &swept).exists());
}

/// A photo sent slowly outlives `HMDP_REQUEST_TIMEOUT_MS`: uploads have their own limit
/// (`HMDP_UPLOAD_TIMEOUT_SECS`), while any other request is still cut at the general one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_gets_its_own_timeout() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.request_timeout = Duration::from_millis(300);
        c.social.upload_timeout = Duration::from_secs(30);
    })
    .await;
    let token = app.login("13812340018").await;
    let (content_type, body) = multipart("file", "slow.png", "image/png", &square_png(8, [7; 3]));
    let addr = app.addr;
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(
            stream,
            "POST /api/upload/blog HTTP/1.1\r\nHost: {addr}\r\nauthorization: {token}\r\n\
             content-type: {content_type}\r\ncontent-length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        // The body arrives in two halves, more than the general timeout apart (a slow client,
        // simulated: the pause is the point of the test, not a wait for a condition).
        let (first, rest) = body.split_at(body.len() / 2);
        stream.write_all(first).unwrap();
        std::thread::sleep(Duration::from_millis(900));
        stream.write_all(rest).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("\"success\":true"),
        "{answer}"
    );
    assert!(answer.contains("/blogs/"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_real_images_of_sane_dimensions_are_accepted() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812340019").await;
    let mut frameless_jpeg = tiny_jpeg();
    frameless_jpeg.drain(20..33);
    for (what, data) in [
        ("a bare GIF signature", b"GIF89a".to_vec()),
        (
            "a GIF signature before HTML",
            b"GIF89a<script>alert(1)</script>".to_vec(),
        ),
        ("a JPEG without a frame", frameless_jpeg),
        ("a side over 20,000 px", png_claiming(20_001, 1)),
        ("64 megapixels", png_claiming(8_000, 8_000)),
        ("no pixels", png_claiming(0, 1)),
    ] {
        let r = upload(&app, &token, "x.gif", &data).await;
        assert_eq!((r.status, r.code()), (200, "not_an_image"), "{what}: {r:?}");
    }
    // The largest accepted.
    let name = uploaded(&app, &token, &png_claiming(20_000, 2_500)).await;
    assert_name_shape(&name, "png");

    // Nothing refused is on disk, nor charged.
    let files = files_below(app.state.uploads.dir());
    assert_eq!(files.len(), 1, "{files:?}");
    let len = png_claiming(1, 1).len() as u64;
    assert_eq!(charged(&app, &token).await, (1, len));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_s_photos_a_day_are_capped() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.social.upload_user_daily_count = 3).await;
    let alice = app.login("13812340021").await;
    let bob = app.login("13812340022").await;

    // A refused upload costs nothing.
    let r = upload(&app, &alice, "x.gif", b"GIF89a").await;
    assert_eq!(r.code(), "not_an_image", "{r:?}");
    // Ten at once: exactly three are stored, whoever wins.
    let photos: Vec<Vec<u8>> = (0..10u8).map(|i| square_png(1, [i, 0, 0])).collect();
    let answers =
        futures_util::future::join_all(photos.iter().map(|p| upload(&app, &alice, "p.png", p)))
            .await;
    let stored = answers.iter().filter(|r| r.success()).count();
    assert_eq!(stored, 3, "{answers:?}");
    for r in answers.iter().filter(|r| !r.success()) {
        assert_eq!((r.status, r.code()), (429, "upload_quota"), "{r:?}");
        assert_retry_after_within_a_day(r);
    }
    assert_eq!(files_below(app.state.uploads.dir()).len(), 3);
    assert_eq!(charged(&app, &alice).await.0, 3);

    // Deleting gives nothing back; another user has a day of their own.
    let name = answers.iter().find(|r| r.success()).unwrap().body["data"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(delete(&app, Some(&alice), &name).await.success());
    let r = upload(&app, &alice, "p.png", &square_png(1, [1, 1, 1])).await;
    assert_eq!((r.status, r.code()), (429, "upload_quota"), "{r:?}");
    uploaded(&app, &bob, &square_png(1, [2, 2, 2])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_s_bytes_a_day_are_capped_at_what_is_stored() {
    let app = spawn_app_with(Backend::Sqlite, |c| c.social.upload_user_daily_bytes = 4096).await;
    let token = app.login("13812340023").await;
    uploaded(&app, &token, &png_of_len(1500)).await;
    uploaded(&app, &token, &png_of_len(1500)).await;
    // Past the day's bytes: refused while reading, and not charged.
    let r = upload(&app, &token, "p.png", &png_of_len(1500)).await;
    assert_eq!((r.status, r.code()), (429, "upload_quota"), "{r:?}");
    assert_retry_after_within_a_day(&r);
    assert_eq!(charged(&app, &token).await, (2, 3000));
    // What is left still fits, to the byte.
    uploaded(&app, &token, &png_of_len(1096)).await;
    assert_eq!(charged(&app, &token).await, (3, 4096));
    let on_disk: u64 = files_below(app.state.uploads.dir())
        .iter()
        .map(|f| {
            std::fs::metadata(app.state.uploads.dir().join(f))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(on_disk, 4096);
    // The day is spent: refused before the body is read.
    let r = upload(&app, &token, "p.png", &square_png(1, [3, 3, 3])).await;
    assert_eq!((r.status, r.code()), (429, "upload_quota"), "{r:?}");
    assert_eq!(files_below(app.state.uploads.dir()).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_stop_while_the_upload_disk_is_nearly_full() {
    // A threshold no disk meets.
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.social.upload_min_free_bytes = u64::MAX
    })
    .await;
    let token = app.login("13812340024").await;
    let r = upload(&app, &token, "p.png", &square_png(1, [4, 4, 4])).await;
    assert_eq!((r.status, r.code()), (507, "disk_full"), "{r:?}");
    assert!(!r.success());
    assert!(files_below(app.state.uploads.dir()).is_empty());
    assert_eq!(charged(&app, &token).await, (0, 0));
    let queued: i64 = app
        .redis()
        .await
        .zcard(app.state.keys.upload_pending())
        .await
        .unwrap();
    assert_eq!(queued, 0);
}

async fn a_photo_a_published_note_uses_cannot_be_deleted(backend: Backend) {
    let app = spawn_app(backend).await;
    let alice = app.login("13812340025").await;
    let bob = app.login("13812340026").await;
    let in_her_note = uploaded(&app, &alice, &square_png(1, [6, 0, 0])).await;
    let in_his_note = uploaded(&app, &alice, &square_png(1, [0, 6, 0])).await;
    let unused = uploaded(&app, &alice, &square_png(1, [0, 0, 6])).await;
    for (token, name) in [(&alice, &in_her_note), (&bob, &in_his_note)] {
        let note = json!({"shopId": 1, "title": "photos", "content": "<p>look</p>",
                          "images": format!("/imgs/blogs/blog1.jpg,/imgs{name}")});
        let r = app.post_json("/api/blog", &note, Some(token)).await;
        assert!(r.success(), "publish: {r:?}");
    }

    for name in [&in_her_note, &in_his_note] {
        for raw in [name.clone(), format!("/imgs{name}")] {
            let r = delete(&app, Some(&alice), &raw).await;
            assert_eq!((r.status, r.code()), (200, "file_in_use"), "{raw}: {r:?}");
            assert!(!r.success());
        }
        let (status, _, _) = fetch(&app, &format!("/imgs{name}")).await;
        assert_eq!(status, 200, "{name}");
    }
    // A photo no note lists is still its uploader's to delete.
    assert!(delete(&app, Some(&alice), &unused).await.success());
    assert!(!on_disk(&app, &unused).exists());
}
