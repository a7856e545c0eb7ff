//! `/openapi.json` documents exactly the routes that exist (both ways), each with its request
//! and response schemas, and `/docs` renders it offline.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::Value;

use crate::helpers::{ADMIN_TOKEN, Backend, TestApp, signature, spawn_app};

/// A documented path with each `{parameter}` replaced by 1.
fn concrete(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').expect("a closing brace") + open;
        out.push_str(&rest[..open]);
        out.push('1');
        rest = &rest[close + 1..];
    }
    out + rest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_exists() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812345678").await;
    let doc = app.get("/openapi.json", None).await.body;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 19, "{} paths", paths.len());
    let mut checked = 0;
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let concrete = concrete(path);
            for prefix in ["", "/api"] {
                let url = app.url(&format!("{prefix}{concrete}"));
                let req = match method.as_str() {
                    "get" => app.client.get(&url),
                    "post" => app.client.post(&url).json(&serde_json::json!({})),
                    "put" => app.client.put(&url).json(&serde_json::json!({})),
                    "delete" => app.client.delete(&url),
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
    assert!(checked >= 40, "{checked}");
    // Logged out last: /user/logout is among the operations above.
    let docs = app.get_text("/docs").await;
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
}

/// Swagger UI (the opt-in, from a CDN) runs on the origin that holds the session token, so every
/// file it loads from another host is one exact release, pinned by its SRI hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swagger_ui_loads_only_pinned_files() {
    let app = spawn_app(Backend::Sqlite).await;
    let swagger = app.get_text("/docs/swagger").await;
    assert!(swagger.contains("SwaggerUIBundle") && swagger.contains("/openapi.json"));
    let tag = regex::Regex::new(r"<(?:script|link)\b[^>]*>").unwrap();
    let version = regex::Regex::new(r"@\d+\.\d+\.\d+/").unwrap();
    let mut external = 0;
    for m in tag.find_iter(&swagger) {
        let tag = m.as_str();
        if !tag.contains("https://") && !tag.contains("http://") && !tag.contains("//") {
            continue;
        }
        external += 1;
        assert!(tag.contains("https://"), "not over HTTPS: {tag}");
        assert!(version.is_match(tag), "not an exact release: {tag}");
        assert!(tag.contains("integrity=\"sha384-"), "no SRI hash: {tag}");
        assert!(
            tag.contains("crossorigin=\"anonymous\""),
            "no crossorigin: {tag}"
        );
    }
    assert_eq!(external, 2, "the script and the stylesheet: {swagger}");
}

/// The paths the API router serves, read from the router itself: axum shows them only in its
/// `Debug` output, as `RouteId(n): "/path"` in its `path_router` (the `fallback_router` after it
/// holds axum's own catch-all routes).
fn served_paths(app: &TestApp) -> BTreeSet<String> {
    let (router, _) = hmdp::testing::http::api(&app.state.config).split_for_parts();
    let debug = format!("{router:?}");
    let routes = &debug[..debug
        .find("fallback_router")
        .expect("axum's Router debug output")];
    let re = regex::Regex::new(r#"RouteId\(\d+\): "([^"]*)""#).unwrap();
    re.captures_iter(routes).map(|c| c[1].to_owned()).collect()
}

/// Operations answered without `data` (`{"success":true}`); every other has a typed one.
const NO_DATA: &[(&str, &str)] = &[
    ("post", "/user/code"),
    ("post", "/user/logout"),
    ("put", "/shop"),
    ("get", "/upload/blog/delete"),
    ("post", "/user/sign"),
    ("delete", "/blog/{id}"),
    ("delete", "/blog/comments/{id}"),
];

/// A `data` schema says what it is: a reference, a primitive, or an array of those.
fn typed(schema: &Value) -> bool {
    match schema["type"].as_str() {
        _ if schema.get("$ref").is_some() => true,
        Some("array") => typed(&schema["items"]),
        Some("object") | None => false,
        Some(_) => true,
    }
}

/// Every `$ref` in `value`.
fn refs<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::Object(map) => {
            if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                out.push(r);
            }
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// The reverse of `every_documented_operation_exists`: every route the API router serves is
/// documented, with no method beyond the documented ones, its path parameters, its request
/// body exactly when the handler reads one, and a typed `data` in its 200 envelope. A route
/// added without documentation fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_route_is_documented() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812345679").await;
    let doc = app.get("/openapi.json", None).await.body;
    let paths = doc["paths"].as_object().unwrap();
    let served = served_paths(&app);
    assert!(served.len() >= 19, "{served:?}");
    let documented: BTreeSet<String> = paths.keys().cloned().collect();
    assert_eq!(served, documented, "served vs documented paths");

    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut all_refs = Vec::new();
    refs(&doc, &mut all_refs);
    for r in all_refs {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or(r);
        assert!(schemas.contains_key(name), "dangling {r}");
    }

    let mut checked = 0;
    for (path, ops) in paths {
        let concrete = concrete(path);
        // A method that is not documented is not served either.
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            if ops.get(method.to_lowercase()).is_some() {
                continue;
            }
            for prefix in ["", "/api"] {
                let url = app.url(&format!("{prefix}{concrete}"));
                let method = Method::from_bytes(method.as_bytes()).unwrap();
                let r = app.send(app.client.request(method.clone(), &url)).await;
                assert_eq!(
                    r.status, 405,
                    "{method} {prefix}{concrete} is served: {r:?}"
                );
            }
        }
        for (method, op) in ops.as_object().unwrap() {
            let what = format!("{method} {path}");
            assert!(
                op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{what}"
            );
            // Each path parameter is documented.
            for name in path.split('{').skip(1).map(|s| &s[..s.find('}').unwrap()]) {
                let params = op["parameters"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                assert!(
                    params
                        .iter()
                        .any(|p| p["name"] == name && p["in"] == "path"),
                    "{what}: path parameter {name}"
                );
            }
            // The 200 answer: the success envelope with typed data, or a refusal.
            let options = &op["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"];
            assert_eq!(options[1]["$ref"], "#/components/schemas/Failure", "{what}");
            let data = &options[0]["properties"]["data"];
            if NO_DATA.contains(&(method.as_str(), path.as_str())) {
                assert!(data.is_null(), "{what} documents data: {data}");
            } else {
                assert!(typed(data), "{what}: data is {data}");
            }
            // A request body is documented exactly when the handler reads one: malformed JSON
            // is refused as such by those, and ignored by the others.
            if method == "post" || method == "put" {
                let body = &op["requestBody"]["content"]["application/json"]["schema"];
                let mut url = app.url(&concrete);
                for p in op["parameters"].as_array().into_iter().flatten() {
                    if p["in"] == "query" && p["required"] == true {
                        url += &format!("?{}=13800000000", p["name"].as_str().unwrap());
                    }
                }
                let mut req = app
                    .client
                    .request(
                        Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                        &url,
                    )
                    .header("content-type", "application/json")
                    .header("authorization", &token)
                    .header("x-admin-token", ADMIN_TOKEN)
                    .body("{");
                // A signed route reads its body only once the signature holds.
                let signed = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["in"] == "header" && p["name"] == "x-pay-signature");
                if signed {
                    req = req.header("x-pay-signature", signature(b"{"));
                }
                let r = app.send(req).await;
                if body.is_null() {
                    assert_ne!(r.status, 400, "{what} reads a body: {r:?}");
                } else {
                    assert!(body.get("$ref").is_some(), "{what}: body {body}");
                    assert_eq!(r.status, 400, "{what} ignores its body: {r:?}");
                    assert_eq!(r.code(), "invalid_request", "{what}");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}
