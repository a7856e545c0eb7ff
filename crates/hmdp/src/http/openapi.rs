//! `GET /openapi.json` (OpenAPI 3.0), `GET /docs` (the same document as a plain HTML page)
//! and `GET /docs/swagger` (Swagger UI, optional).
//!
//! The document is built here by hand from small helpers rather than generated from
//! annotations: the API is small, every operation shares the envelope and the same error
//! statuses, and keeping the whole contract on one screen makes it easy to review against the
//! original's. A test walks every documented operation against the running service, and CI
//! fuzzes the service with schemathesis from this document.
//!
//! `/docs` is rendered on the server from that same document into one self-contained page
//! (inline style, no script, nothing loaded from another host), so it works offline and on
//! an air-gapped machine; its content security policy forbids anything else. Swagger UI is
//! not embedded in the binary: `/docs/swagger` loads it from the unpkg CDN, which needs
//! internet access, and `/docs` links to it as the optional, interactive view.

use std::{fmt::Write as _, sync::LazyLock};

use axum::{
    Json, Router,
    http::{HeaderValue, header},
    response::{Html, IntoResponse, Response},
    routing::get,
};
use serde_json::{Map, Value, json};

use super::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/docs", get(docs))
        .route("/docs/swagger", get(swagger))
}

async fn openapi() -> impl IntoResponse {
    Json(document())
}

/// The document rendered once, on first use.
static DOCS_HTML: LazyLock<String> = LazyLock::new(|| render_docs(&document()));

/// `/docs`: the offline page. Only an inline stylesheet may apply; nothing is fetched.
async fn docs() -> Response {
    let mut resp = Html(DOCS_HTML.as_str()).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; \
             form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// `/docs/swagger`: Swagger UI from its public CDN (the binary embeds no third-party UI); the
/// document itself is served by this instance.
async fn swagger() -> Html<&'static str> {
    Html(
        r##"<!doctype html><html><head><meta charset="utf-8"><title>hmdp API</title>
<link rel="stylesheet" href="https://unpkg.com/swagger-ui-dist@5/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="https://unpkg.com/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});</script>
<noscript>The API document is at <a href="/openapi.json">/openapi.json</a>; a page without
script is at <a href="/docs">/docs</a>.</noscript>
</body></html>"##,
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
fn schema_html(schema: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("<a href=\"#schema-{0}\">{0}</a>", esc(name));
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let parts: Vec<String> = options.iter().map(schema_html).collect();
        return parts.join(" | ");
    }
    let kind = schema["type"].as_str().unwrap_or("any");
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
    ] {
        if let Some(v) = schema.get(key) {
            notes.push(format!("{label} {}", esc(&v.to_string())));
        }
    }
    if schema["nullable"] == true {
        notes.push("nullable".into());
    }
    if !notes.is_empty() {
        let _ = write!(out, "; {}", notes.join(", "));
    }
    out
}

/// One operation of the document: path, method and the operation object.
type Operation<'a> = (String, String, &'a Value);

/// The whole document as one HTML page: operations by tag, then the schemas.
fn render_docs(doc: &Value) -> String {
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
Optional interactive view: <a href="/docs/swagger">Swagger UI</a> (loads its script from
unpkg.com, so it needs internet access).</p>
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
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        html.push_str("<table><tr><th>field</th><th>type</th><th>description</th></tr>");
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
                esc(s["description"].as_str().unwrap_or("")),
            );
        }
        html.push_str("</table></section>\n");
    }
    html.push_str("<p class=\"muted\">* required</p></body></html>\n");
    html
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Auth {
    Public,
    User,
    Admin,
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A path or query parameter.
fn param(name: &str, location: &str, schema: Value, required: bool, description: &str) -> Value {
    json!({"name": name, "in": location, "required": required, "schema": schema, "description": description})
}

fn id_param(name: &str) -> Value {
    param(
        name,
        "path",
        json!({"type": "integer", "format": "int64", "minimum": 1}),
        true,
        "a positive id",
    )
}

/// The envelope of a success with `data` of the given schema (or none).
fn ok_envelope(data: Option<Value>) -> Value {
    let mut props = Map::new();
    props.insert("success".into(), json!({"type": "boolean", "enum": [true]}));
    if let Some(d) = &data {
        props.insert("data".into(), d.clone());
    }
    json!({"type": "object", "required": ["success"], "properties": props})
}

fn operation(
    summary: &str,
    tag: &str,
    auth: Auth,
    parameters: Vec<Value>,
    body: Option<Value>,
    data: Option<Value>,
) -> Value {
    let envelope = |d: Option<Value>| json!({"content": {"application/json": {"schema": {"oneOf": [ok_envelope(d), schema_ref("Failure")]}}}});
    let failure = |text: &str| json!({"description": text, "content": {"application/json": {"schema": schema_ref("Failure")}}});
    let mut responses = Map::new();
    let mut ok = envelope(data);
    ok["description"] = json!("the envelope: success with data, or a business refusal with a code");
    responses.insert("200".into(), ok);
    responses.insert("400".into(), failure("malformed input (`invalid_request`)"));
    if auth == Auth::User {
        responses.insert(
            "401".into(),
            failure("no or expired session (`unauthorized`)"),
        );
    }
    if auth == Auth::Admin {
        responses.insert(
            "403".into(),
            failure("missing or wrong x-admin-token (`admin_required`)"),
        );
    }
    responses.insert("404".into(), failure("no such route (`not_found`)"));
    responses.insert(
        "405".into(),
        failure("method not allowed (`method_not_allowed`)"),
    );
    if body.is_some() {
        responses.insert(
            "413".into(),
            failure("body too large (`payload_too_large`)"),
        );
    }
    responses.insert(
        "429".into(),
        failure("rate limited (`rate_limited`), see Retry-After"),
    );
    responses.insert("500".into(), failure("internal error (`internal`)"));
    responses.insert(
        "503".into(),
        failure("Redis or the database away, or timed out (`unavailable`, `timeout`)"),
    );
    let mut op = json!({"summary": summary, "tags": [tag], "parameters": parameters, "responses": responses});
    match auth {
        Auth::User => op["security"] = json!([{"session": []}]),
        Auth::Admin => op["security"] = json!([{"admin": []}]),
        Auth::Public => {}
    }
    if let Some(b) = body {
        op["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": b}}});
    }
    op
}

/// The whole OpenAPI document.
pub fn document() -> Value {
    let int64 = json!({"type": "integer", "format": "int64"});
    let list = |s: &str| json!({"type": "array", "items": schema_ref(s)});
    let mut paths: Map<String, Value> = Map::new();
    let mut add = |path: &str, method: &str, op: Value| {
        paths
            .entry(path.to_owned())
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("object")
            .insert(method.to_owned(), op);
    };
    use Auth::*;
    add(
        "/health",
        "get",
        operation(
            "Redis and database health",
            "ops",
            Public,
            vec![],
            None,
            Some(schema_ref("Health")),
        ),
    );
    add(
        "/user/code",
        "post",
        operation(
            "Send a 6-digit login code (logged, as the original does)",
            "user",
            Public,
            vec![param(
                "phone",
                "query",
                json!({"type": "string"}),
                true,
                "mainland mobile number",
            )],
            None,
            None,
        ),
    );
    add(
        "/user/login",
        "post",
        operation(
            "Log in with phone and code; data is the session token",
            "user",
            Public,
            vec![],
            Some(schema_ref("LoginForm")),
            Some(json!({"type": "string"})),
        ),
    );
    add(
        "/user/logout",
        "post",
        operation("End the session", "user", User, vec![], None, None),
    );
    add(
        "/user/me",
        "get",
        operation(
            "The logged-in user",
            "user",
            User,
            vec![],
            None,
            Some(schema_ref("User")),
        ),
    );
    add(
        "/user/{id}",
        "get",
        operation(
            "A user's public fields (no data if none)",
            "user",
            User,
            vec![id_param("id")],
            None,
            Some(schema_ref("User")),
        ),
    );
    add(
        "/user/info/{id}",
        "get",
        operation(
            "A user's profile (no data if none)",
            "user",
            User,
            vec![id_param("id")],
            None,
            Some(schema_ref("UserInfo")),
        ),
    );
    add(
        "/shop/{id}",
        "get",
        operation(
            "A shop, cached",
            "shop",
            Public,
            vec![id_param("id")],
            None,
            Some(schema_ref("Shop")),
        ),
    );
    add(
        "/shop",
        "post",
        operation(
            "Create a shop; data is its id",
            "shop",
            Admin,
            vec![],
            Some(schema_ref("ShopInput")),
            Some(int64.clone()),
        ),
    );
    add(
        "/shop",
        "put",
        operation(
            "Update a shop (then its cache entry is deleted)",
            "shop",
            Admin,
            vec![],
            Some(schema_ref("ShopUpdate")),
            None,
        ),
    );
    let page = param(
        "current",
        "query",
        json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 1}),
        false,
        "page number",
    );
    add(
        "/shop/of/type",
        "get",
        operation(
            "Shops of a type, 5 per page; with x and y: within 5 km, nearest first",
            "shop",
            Public,
            vec![
                param("typeId", "query", int64.clone(), true, "shop type"),
                page.clone(),
                param(
                    "x",
                    "query",
                    json!({"type": "number", "minimum": -180, "maximum": 180}),
                    false,
                    "longitude (with y)",
                ),
                param(
                    "y",
                    "query",
                    json!({"type": "number", "minimum": -85.05, "maximum": 85.05}),
                    false,
                    "latitude (with x)",
                ),
            ],
            None,
            Some(list("Shop")),
        ),
    );
    add(
        "/shop/of/name",
        "get",
        operation(
            "Shops whose name contains `name`, 10 per page",
            "shop",
            Public,
            vec![
                param(
                    "name",
                    "query",
                    json!({"type": "string", "maxLength": 128}),
                    false,
                    "part of the name",
                ),
                page,
            ],
            None,
            Some(list("Shop")),
        ),
    );
    add(
        "/shop-type/list",
        "get",
        operation(
            "Shop types by sort order, cached",
            "shop",
            Public,
            vec![],
            None,
            Some(list("ShopType")),
        ),
    );
    add(
        "/voucher",
        "post",
        operation(
            "Create a plain voucher; data is its id",
            "voucher",
            Admin,
            vec![],
            Some(schema_ref("VoucherInput")),
            Some(int64.clone()),
        ),
    );
    add(
        "/voucher/seckill",
        "post",
        operation(
            "Create a flash-sale voucher and load it into Redis; times server-local or with an offset",
            "voucher",
            Admin,
            vec![],
            Some(schema_ref("SeckillVoucherInput")),
            Some(int64.clone()),
        ),
    );
    add(
        "/voucher/list/{shopId}",
        "get",
        operation(
            "A shop's vouchers on sale; flash-sale ones with stock and their window (beginTime/endTime server-local, beginMillis/endMillis as instants)",
            "voucher",
            Public,
            vec![id_param("shopId")],
            None,
            Some(list("Voucher")),
        ),
    );
    add(
        "/voucher/seckill/{id}/stats",
        "get",
        operation(
            "A sale's live state",
            "voucher",
            Public,
            vec![id_param("id")],
            None,
            Some(schema_ref("SaleStats")),
        ),
    );
    add(
        "/voucher-order/seckill/{id}",
        "post",
        operation(
            "Grab a flash-sale voucher; data is the order id (refusals: sold_out, duplicate_order, seckill_not_started, seckill_ended, voucher_not_found)",
            "order",
            User,
            vec![id_param("id")],
            None,
            Some(int64.clone()),
        ),
    );
    add(
        "/voucher-order/{id}",
        "get",
        operation(
            "Your order: pending or created",
            "order",
            User,
            vec![id_param("id")],
            None,
            Some(schema_ref("OrderStatus")),
        ),
    );
    add(
        "/voucher-order/of/me",
        "get",
        operation(
            "Your written orders, newest first",
            "order",
            User,
            vec![],
            None,
            Some(list("Order")),
        ),
    );

    let text = |max: u32| json!({"type": "string", "maxLength": max});
    let opt_text = |max: u32| json!({"type": "string", "maxLength": max, "nullable": true});
    let time = json!({"type": "string", "example": "2026-11-21T10:00:00", "description": "server-local yyyy-MM-ddTHH:mm:ss"});
    // Columns the original schema allows to be NULL are sent as JSON null.
    let opt_int64 = json!({"type": "integer", "format": "int64", "nullable": true});
    let opt_string = json!({"type": "string", "nullable": true});
    let sale_time = json!({"type": "string", "example": "2026-11-21T10:00:00+08:00",
        "description": "server-local yyyy-MM-ddTHH:mm:ss (as the original), or RFC 3339 with an offset or Z (converted to server-local time)"});
    let millis = |of: &str| {
        json!({"type": "integer", "format": "int64",
        "description": format!("{of} as milliseconds since the epoch (UTC): the instant, whatever the zones")})
    };
    let shop_fields = json!({
        "name": {"type": "string", "minLength": 1, "maxLength": 128},
        "typeId": {"type": "integer", "format": "int64", "minimum": 1},
        "images": text(1024), "area": opt_text(128), "address": text(255),
        "x": {"type": "number", "minimum": 0, "maximum": 180},
        "y": {"type": "number", "minimum": 0, "maximum": 85.05},
        "avgPrice": {"type": "integer", "format": "int64", "minimum": 0, "nullable": true},
        "sold": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295_u64},
        "comments": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295_u64},
        "score": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295_u64},
        "openHours": opt_text(32)
    });
    let mut update_fields = shop_fields.clone();
    update_fields["id"] = json!({"type": "integer", "format": "int64", "minimum": 1});
    let mut shop = shop_fields.clone();
    shop["id"] = int64.clone();
    shop["createTime"] = time.clone();
    shop["updateTime"] = time.clone();
    shop["distance"] = json!({"type": "number", "description": "metres, nearby search only"});
    let schemas = json!({
        "Failure": {"type": "object", "required": ["success", "errorMsg", "code"], "properties": {
            "success": {"type": "boolean", "enum": [false]},
            "errorMsg": {"type": "string"},
            "code": {"type": "string", "description": "stable machine-readable code"},
            "data": {}}},
        "Health": {"type": "object", "properties": {"status": {"type": "string"}, "redis": {"type": "string"}, "database": {"type": "string"}}},
        "LoginForm": {"type": "object", "required": ["phone"], "properties": {
            "phone": {"type": "string"}, "code": {"type": "string"}, "password": {"type": "string"}}},
        "User": {"type": "object", "properties": {"id": int64, "nickName": {"type": "string"}, "icon": {"type": "string"}}},
        "UserInfo": {"type": "object", "properties": {"userId": int64, "city": {"type": "string"}, "introduce": {"type": "string"},
            "fans": int64, "followee": int64, "gender": {"type": "boolean"}, "birthday": {"type": "string"}, "credits": int64, "level": {"type": "boolean"}}},
        "Shop": {"type": "object", "properties": shop},
        "ShopInput": {"type": "object", "required": ["name", "typeId", "x", "y"], "properties": shop_fields},
        "ShopUpdate": {"type": "object", "required": ["id", "name", "typeId", "x", "y"], "properties": update_fields},
        "ShopType": {"type": "object", "properties": {"id": int64, "name": opt_string, "icon": opt_string, "sort": opt_int64}},
        "Voucher": {"type": "object", "properties": {"id": int64, "shopId": opt_int64, "title": {"type": "string"}, "subTitle": {"type": "string"},
            "rules": {"type": "string"}, "payValue": int64, "actualValue": int64, "type": {"type": "integer", "enum": [0, 1]},
            "stock": int64, "beginTime": time, "endTime": time,
            "beginMillis": millis("beginTime"), "endMillis": millis("endTime")}},
        "VoucherInput": {"type": "object", "required": ["shopId", "title", "payValue", "actualValue"], "properties": {
            "shopId": {"type": "integer", "format": "int64", "minimum": 1}, "title": text(255), "subTitle": opt_text(255), "rules": opt_text(1024),
            "payValue": {"type": "integer", "format": "int64", "minimum": 0}, "actualValue": {"type": "integer", "format": "int64", "minimum": 0}}},
        "SeckillVoucherInput": {"type": "object", "required": ["shopId", "title", "payValue", "actualValue", "stock", "beginTime", "endTime"], "properties": {
            "shopId": {"type": "integer", "format": "int64", "minimum": 1}, "title": text(255), "subTitle": opt_text(255), "rules": opt_text(1024),
            "payValue": {"type": "integer", "format": "int64", "minimum": 0}, "actualValue": {"type": "integer", "format": "int64", "minimum": 0},
            "stock": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 10_000_000}, "beginTime": sale_time, "endTime": sale_time}},
        "Order": {"type": "object", "properties": {"id": int64, "idStr": {"type": "string"}, "userId": int64, "voucherId": int64,
            "payType": int64, "status": int64, "createTime": time}},
        "OrderStatus": {"type": "object", "properties": {"id": int64, "idStr": {"type": "string"}, "voucherId": int64,
            "state": {"type": "string", "enum": ["pending", "created", "failed"], "description": "pending: accepted, being written; created: in the database; failed: accepted but could not be written (in the dead letters, for an operator)"}, "order": schema_ref("Order")}},
        "SaleStats": {"type": "object", "properties": {"voucherId": int64, "redisStock": opt_int64, "dbStock": int64, "accepted": int64,
            "persisted": int64, "streamLength": int64, "pending": int64, "lag": opt_int64, "beginTime": time, "endTime": time, "nowMillis": int64,
            "beginMillis": millis("beginTime"), "endMillis": millis("endTime"),
            "serverUtcOffsetMinutes": {"type": "integer", "format": "int32", "description": "the server's current offset from UTC in minutes (east positive): the zone of beginTime and endTime"}}}
    });
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "hmdp",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "hm-dianping (黑马点评) in Rust. Every route also answers under /api. Business refusals are HTTP 200 with success=false and a code."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "session": {"type": "apiKey", "in": "header", "name": "authorization", "description": "the raw session token from /user/login"},
                "admin": {"type": "apiKey", "in": "header", "name": "x-admin-token"}
            }
        }
    })
}
