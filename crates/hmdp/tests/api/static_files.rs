//! `HMDP_STATIC_DIR`: the original front-end pages served at `/`, the API beside them.

use crate::helpers::{Backend, spawn_app_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_dir_is_served_at_the_root_beside_the_api() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), "<h1>hmdp pages</h1>").unwrap();
    std::fs::create_dir(site.path().join("js")).unwrap();
    std::fs::write(
        site.path().join("js/common.js"),
        "axios.defaults.baseURL = '/api'",
    )
    .unwrap();
    let secret_dir = tempfile::tempdir().unwrap();
    std::fs::write(secret_dir.path().join("secret.txt"), "top secret").unwrap();
    let root = site.path().to_owned();
    let app = spawn_app_with(Backend::Sqlite, move |c| c.static_dir = Some(root)).await;

    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.text().await.unwrap(), "<h1>hmdp pages</h1>");
    let js = app
        .client
        .get(app.url("/js/common.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);

    // The API still answers, at both mount points.
    assert!(app.get("/api/shop-type/list", None).await.success());
    assert!(app.get("/shop-type/list", None).await.success());

    // Missing files are a 404 envelope; traversal out of the folder finds nothing.
    let r = app.get("/nope.html", None).await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let name = secret_dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    for path in [
        format!("/../{name}/secret.txt"),
        format!("/%2e%2e/{name}/secret.txt"),
        "/..%2f..%2fetc/passwd".to_owned(),
    ] {
        let resp = app.client.get(app.url(&path)).send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert!(
            !body.contains("top secret") && !body.contains("root:"),
            "{path}: {body}"
        );
        assert!(status == 404 || status == 400, "{path}: {status}");
    }
}
