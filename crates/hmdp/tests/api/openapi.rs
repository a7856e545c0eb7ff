//! `/openapi.json` documents exactly routes that exist, and `/docs` renders it offline.

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

/// `/docs` works offline: one page rendered from the document, nothing fetched from another
/// host (no script, no external stylesheet, only local links); Swagger UI is the opt-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_page_is_self_contained() {
    let app = spawn_app(Backend::Sqlite).await;
    let r = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("http"), "{csp}");
    let html = r.text().await.unwrap();
    for needle in [
        "<script", "<link", "<iframe", "<img", "@import", "url(", "http://", "https://",
    ] {
        assert!(!html.contains(needle), "/docs contains {needle:?}");
    }
    // Every link stays on this host: a path or an anchor, never `//host`.
    let mut links = 0;
    for attr in ["href=\"", "src=\""] {
        for (at, _) in html.match_indices(attr) {
            let value = &html[at + attr.len()..];
            let value = &value[..value.find('"').unwrap()];
            assert!(
                (value.starts_with('/') && !value.starts_with("//")) || value.starts_with('#'),
                "off-host reference {value:?}"
            );
            links += 1;
        }
    }
    assert!(links > 20, "{links} links");
    assert!(html.contains("href=\"/openapi.json\""));
    assert!(html.contains("href=\"/docs/swagger\""));
    // Every documented operation is on the page, with its summary.
    let doc = app.get("/openapi.json", None).await.body;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let escaped = path.replace('&', "&amp;");
        assert!(html.contains(&format!("<code>{escaped}</code>")), "{path}");
        for op in ops.as_object().unwrap().values() {
            let summary = op["summary"]
                .as_str()
                .unwrap()
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
                .replace('\'', "&#39;");
            assert!(html.contains(&summary), "{summary}");
        }
    }
    for schema in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(
            html.contains(&format!("id=\"schema-{schema}\"")),
            "{schema}"
        );
    }
    // The fields the web UI relies on are documented.
    for field in ["beginMillis", "endMillis", "serverUtcOffsetMinutes"] {
        assert!(html.contains(&format!("<code>{field}</code>")), "{field}");
    }
    // Swagger UI stays available for who wants it (it loads from a CDN).
    let swagger = app
        .client
        .get(app.url("/docs/swagger"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(swagger.contains("SwaggerUIBundle") && swagger.contains("/openapi.json"));
}
