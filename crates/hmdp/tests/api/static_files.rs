//! `HMDP_STATIC_DIR`: the original front-end pages served at `/`, the API beside them.

use crate::helpers::{Backend, assert_nothing_outside, raw_get, spawn_app_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_dir_is_served_at_the_root_beside_the_api() {
    // The served folder and, beside it, a file that must never be reachable.
    let parent = tempfile::tempdir().unwrap();
    let site = parent.path().join("site");
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("index.html"), "<h1>hmdp pages</h1>").unwrap();
    std::fs::create_dir(site.join("js")).unwrap();
    std::fs::write(site.join("js/common.js"), "axios.defaults.baseURL = '/api'").unwrap();
    std::fs::write(parent.path().join("secret.txt"), "top secret").unwrap();
    let root = site.clone();
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

    // Missing files are a 404 envelope.
    let r = app.get("/nope.html", None).await;
    assert_eq!((r.status, r.code()), (404, "not_found"));

    // Traversal out of the folder, sent byte for byte: plain, percent-encoded dots, encoded
    // slashes, backslashes (raw and encoded), mixed case, from a subfolder, and deep.
    let (status, answer) = raw_get(app.addr, "/js/common.js");
    assert_eq!(status, 200, "the raw client works: {answer}");
    assert!(answer.contains("axios.defaults.baseURL"), "{answer}");
    for target in [
        "/../secret.txt",
        "/js/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/js/..%2f..%2fsecret.txt",
        "/..%5csecret.txt",
        "/%5c..%5csecret.txt",
        "/js%5c..%5c..%5csecret.txt",
        "/..\\secret.txt",
        "/../site/../secret.txt",
        "/..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc/passwd",
        "/%2fetc%2fpasswd",
        "/../../../../../../../../etc/passwd",
    ] {
        assert_nothing_outside(app.addr, target);
    }
}
