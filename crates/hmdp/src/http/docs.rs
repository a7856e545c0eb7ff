//! `GET /docs`: the OpenAPI document as one plain HTML page, and `GET /docs/swagger` (Swagger
//! UI, optional).
//!
//! `/docs` is rendered on the server from the document `/openapi.json` serves (see
//! [`super::openapi`]) into one self-contained page (inline style, no script, nothing loaded
//! from another host), so it works offline and on an air-gapped machine; its content security
//! policy forbids anything else. Swagger UI is not embedded in the binary: `/docs/swagger`
//! loads it from the unpkg CDN, which needs internet access, and `/docs` links to it as the
//! optional, interactive view. That script runs on the origin that holds the user's session
//! token, so it is pinned: one exact version, each file with its SRI hash (`integrity`; the
//! browser refuses a file whose bytes differ), fetched without a referrer. The hashes are the
//! sha384 of the files of the npm package `swagger-ui-dist@`[`SWAGGER_VERSION`], which the CDN
//! serves byte for byte; another version needs new hashes (`openssl dgst -sha384 -binary FILE
//! | openssl base64 -A` on the package's files).

use std::{fmt::Write as _, sync::LazyLock};

use axum::{
    Router,
    body::Bytes,
    http::{HeaderValue, header},
    response::{Html, IntoResponse},
    routing::get,
};
use serde_json::Value;

use super::AppState;

/// `/docs`, rendered once from `doc`, and `/docs/swagger`.
pub(super) fn routes(doc: &Value) -> Router<AppState> {
    let page = Html(Bytes::from(render(doc)));
    // Only the inline stylesheet may apply; nothing is fetched.
    let headers = [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; \
                 form-action 'none'; frame-ancestors 'none'",
            ),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ];
    Router::new()
        .route(
            "/docs",
            get(move || std::future::ready((headers.clone(), page.clone()))),
        )
        .route("/docs/swagger", get(swagger))
}

/// The Swagger UI release `/docs/swagger` loads, and the SRI hashes of its two files.
const SWAGGER_VERSION: &str = "5.35.0";
const SWAGGER_CSS_SRI: &str =
    "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I";
const SWAGGER_JS_SRI: &str =
    "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9";

/// `/docs/swagger`: Swagger UI from its public CDN, pinned (see the module docs); the document
/// itself is served by this instance.
async fn swagger() -> impl IntoResponse {
    static PAGE: LazyLock<String> = LazyLock::new(|| {
        let base = format!("https://unpkg.com/swagger-ui-dist@{SWAGGER_VERSION}");
        format!(
            r##"<!doctype html><html><head><meta charset="utf-8"><title>hmdp API</title>
<meta name="referrer" content="no-referrer">
<link rel="stylesheet" href="{base}/swagger-ui.css" integrity="{SWAGGER_CSS_SRI}" crossorigin="anonymous"></head>
<body><div id="ui"></div>
<script src="{base}/swagger-ui-bundle.js" integrity="{SWAGGER_JS_SRI}" crossorigin="anonymous"></script>
<script>SwaggerUIBundle({{url: "/openapi.json", dom_id: "#ui"}});</script>
<noscript>The API document is at <a href="/openapi.json">/openapi.json</a>; a page without
script is at <a href="/docs">/docs</a>.</noscript>
</body></html>"##
        )
    });
    (
        [(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        )],
        Html(PAGE.as_str()),
    )
}

/// HTML-escapes text (the document is ours, but summaries contain `<`, `&` and quotes).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A schema in one line of HTML: a link for a `$ref`, else the type and its constraints.
/// OpenAPI 3.1 spells "nullable" as a `null` type or a `null` alternative.
fn schema_html(schema: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("<a href=\"#schema-{0}\">{0}</a>", esc(name));
    }
    let is_null = |s: &&Value| s["type"] == "null";
    for (key, sep) in [("oneOf", " | "), ("allOf", " & ")] {
        if let Some(options) = schema[key].as_array() {
            // A part that only describes (no type, no reference) adds nothing to show.
            let parts = options
                .iter()
                .filter(|s| !is_null(s) && (s.get("type").is_some() || s.get("$ref").is_some()));
            let mut out = parts.map(schema_html).collect::<Vec<_>>().join(sep);
            if options.iter().any(|s| is_null(&s)) {
                out.push_str(", nullable");
            }
            return out;
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let kind = types
        .iter()
        .find(|t| **t != "null")
        .copied()
        .unwrap_or("any");
    let mut out = match kind {
        "array" => format!("array of {}", schema_html(&schema["items"])),
        other => esc(other),
    };
    if let Some(f) = schema["format"].as_str() {
        let _ = write!(out, " ({})", esc(f));
    }
    let mut notes = Vec::new();
    if let Some(e) = schema["enum"].as_array() {
        let values: Vec<String> = e.iter().map(|v| esc(&v.to_string())).collect();
        notes.push(format!("one of {}", values.join(", ")));
    }
    for (key, label) in [
        ("minimum", "min"),
        ("maximum", "max"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("default", "default"),
        ("example", "e.g."),
    ] {
        if let Some(v) = schema.get(key) {
            notes.push(format!("{label} {}", esc(&v.to_string())));
        }
    }
    if types.contains(&"null") {
        notes.push("nullable".into());
    }
    if !notes.is_empty() {
        let _ = write!(out, "; {}", notes.join(", "));
    }
    out
}

/// The rows of an object schema's fields; the parts of an `allOf` in turn, a referenced part
/// as a link to its own table.
fn field_rows(html: &mut String, schema: &Value) {
    if let Some(r) = schema["$ref"].as_str() {
        let _ = write!(
            html,
            "<tr><td colspan=\"3\">every field of {}</td></tr>",
            schema_html(&serde_json::json!({ "$ref": r }))
        );
        return;
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        field_rows(html, part);
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (field, s) in schema["properties"].as_object().into_iter().flatten() {
        let _ = write!(
            html,
            "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td></tr>",
            esc(field),
            if required.contains(&field.as_str()) {
                " *"
            } else {
                ""
            },
            schema_html(s),
            esc(description(s)),
        );
    }
}

/// A schema's description, also when it sits beside a reference in an `allOf` or `oneOf`.
fn description(schema: &Value) -> &str {
    schema["description"].as_str().unwrap_or_else(|| {
        ["allOf", "oneOf"]
            .iter()
            .flat_map(|k| schema[*k].as_array().into_iter().flatten())
            .find_map(|s| s["description"].as_str())
            .unwrap_or("")
    })
}

/// One operation of the document: path, method and the operation object.
type Operation<'a> = (String, String, &'a Value);

/// The whole document as one HTML page: operations by tag, then the schemas.
fn render(doc: &Value) -> String {
    let mut html = String::new();
    let title = doc["info"]["title"].as_str().unwrap_or("API");
    let version = doc["info"]["version"].as_str().unwrap_or("");
    let _ = write!(
        html,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{t} API</title><style>
body{{font:15px/1.5 system-ui,sans-serif;margin:0 auto;max-width:960px;padding:1rem;color:#222}}
h1 small{{color:#888;font-weight:normal;font-size:.6em}}
h2{{border-bottom:2px solid #eee;margin-top:2rem;text-transform:capitalize}}
section{{border:1px solid #e4e4e4;border-radius:8px;padding:.2rem 1rem .6rem;margin:1rem 0}}
h3{{font-size:1.05rem;margin:.6rem 0 .2rem}}
code,.m{{font-family:ui-monospace,monospace}}
.m{{display:inline-block;min-width:3.6em;padding:0 .4em;border-radius:4px;color:#fff;font-size:.85em;text-align:center}}
.get{{background:#2f6fde}}.post{{background:#1a9b50}}.put{{background:#c77c00}}.delete{{background:#c33}}
table{{border-collapse:collapse;width:100%;font-size:.9rem;margin:.3rem 0}}
th,td{{text-align:left;border-bottom:1px solid #eee;padding:.2rem .4rem;vertical-align:top}}
th{{color:#666;font-weight:600}}.muted{{color:#777}}.auth{{color:#a15c00}}
nav a{{margin-right:.2rem}}
</style></head><body>
<h1>{t} API <small>{v}</small></h1>
<p>{d}</p>
<p>This page is the OpenAPI document <a href="/openapi.json">/openapi.json</a> rendered by the
server; it loads nothing from other hosts. Every path also answers under <code>/api</code>.
Optional interactive view: <a href="/docs/swagger">Swagger UI</a> (loads a pinned release
from unpkg.com, so it needs internet access).</p>
"#,
        t = esc(title),
        v = esc(version),
        d = esc(doc["info"]["description"].as_str().unwrap_or("")),
    );

    // Operations grouped by their first tag, in document order.
    let mut groups: Vec<(String, Vec<Operation<'_>>)> = Vec::new();
    for (path, ops) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in ops.as_object().into_iter().flatten() {
            let tag = op["tags"][0].as_str().unwrap_or("other").to_owned();
            let entry = (path.clone(), method.clone(), op);
            match groups.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, list)) => list.push(entry),
                None => groups.push((tag, vec![entry])),
            }
        }
    }
    html.push_str("<nav>");
    for (tag, _) in &groups {
        let _ = write!(html, "<a href=\"#tag-{0}\">{0}</a> ", esc(tag));
    }
    html.push_str("<a href=\"#schemas\">schemas</a></nav>\n");
    let schemes = &doc["components"]["securitySchemes"];
    for (tag, ops) in &groups {
        let _ = writeln!(html, "<h2 id=\"tag-{0}\">{0}</h2>", esc(tag));
        for (path, method, op) in ops {
            let _ = write!(
                html,
                "<section><h3><span class=\"m {m}\">{M}</span> <code>{p}</code></h3><p>{s}</p>",
                m = esc(method),
                M = esc(&method.to_uppercase()),
                p = esc(path),
                s = esc(op["summary"].as_str().unwrap_or("")),
            );
            if let Some(d) = op["description"].as_str().filter(|d| !d.is_empty()) {
                let _ = write!(html, "<p class=\"muted\">{}</p>", esc(d));
            }
            for req in op["security"].as_array().into_iter().flatten() {
                for name in req.as_object().into_iter().flatten().map(|(k, _)| k) {
                    let header = schemes[name]["name"].as_str().unwrap_or(name);
                    let _ = write!(
                        html,
                        "<p class=\"auth\">Needs the <code>{}</code> header ({}).</p>",
                        esc(header),
                        esc(schemes[name]["description"]
                            .as_str()
                            .unwrap_or("admin token")),
                    );
                }
            }
            let params = op["parameters"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            if !params.is_empty() {
                html.push_str(
                    "<table><tr><th>parameter</th><th>in</th><th>type</th><th>description</th></tr>",
                );
                for p in params {
                    let _ = write!(
                        html,
                        "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(p["name"].as_str().unwrap_or("")),
                        if p["required"] == true { " *" } else { "" },
                        esc(p["in"].as_str().unwrap_or("")),
                        schema_html(&p["schema"]),
                        esc(p["description"].as_str().unwrap_or("")),
                    );
                }
                html.push_str("</table>");
            }
            if let Some(body) = op["requestBody"]["content"]["application/json"].get("schema") {
                let _ = write!(html, "<p>JSON body: {}</p>", schema_html(body));
            }
            html.push_str("<table><tr><th>status</th><th>response</th></tr>");
            for (status, resp) in op["responses"].as_object().into_iter().flatten() {
                let schema = &resp["content"]["application/json"]["schema"];
                // A success's `data`, taken out of the envelope.
                let data = schema["oneOf"][0]["properties"]
                    .get("data")
                    .map(|d| format!("; <code>data</code>: {}", schema_html(d)))
                    .unwrap_or_default();
                let _ = write!(
                    html,
                    "<tr><td>{}</td><td>{}{}</td></tr>",
                    esc(status),
                    esc(resp["description"].as_str().unwrap_or("")),
                    data,
                );
            }
            html.push_str("</table></section>\n");
        }
    }

    html.push_str("<h2 id=\"schemas\">schemas</h2>\n");
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(html, "<section id=\"schema-{0}\"><h3>{0}</h3>", esc(name));
        if let Some(d) = schema["description"].as_str() {
            let _ = write!(html, "<p>{}</p>", esc(d));
        }
        if schema.get("properties").is_some() || schema.get("allOf").is_some() {
            html.push_str("<table><tr><th>field</th><th>type</th><th>description</th></tr>");
            field_rows(&mut html, schema);
            html.push_str("</table>");
        } else {
            let _ = write!(html, "<p>{}</p>", schema_html(schema));
        }
        html.push_str("</section>\n");
    }
    html.push_str("<p class=\"muted\">* required</p></body></html>\n");
    html
}
