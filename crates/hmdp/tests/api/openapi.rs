//! `/openapi.json` documents exactly routes that exist, and `/docs` points at it.

use crate::helpers::{ADMIN_TOKEN, Backend, spawn_app};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_exists() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812345678").await;
    let doc = app.get("/openapi.json", None).await.body;
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 19, "{} paths", paths.len());
    let mut checked = 0;
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path.replace("{id}", "1").replace("{shopId}", "1");
            for prefix in ["", "/api"] {
                let url = app.url(&format!("{prefix}{concrete}"));
                let req = match method.as_str() {
                    "get" => app.client.get(&url),
                    "post" => app.client.post(&url).json(&serde_json::json!({})),
                    "put" => app.client.put(&url).json(&serde_json::json!({})),
                    other => panic!("unexpected method {other}"),
                };
                let r = app
                    .send(
                        req.header("authorization", &token)
                            .header("x-admin-token", ADMIN_TOKEN),
                    )
                    .await;
                assert!(
                    r.status != 404 && r.status != 405 && r.status < 500,
                    "{method} {prefix}{concrete}: {r:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 40);
    // Logged out last: /user/logout is among the operations above.
    let docs = app
        .client
        .get(app.url("/docs"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(docs.contains("/openapi.json"));
}
