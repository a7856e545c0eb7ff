//! `GET /openapi.json` (OpenAPI 3.0) and `GET /docs` (Swagger UI).
//!
//! The document is built here by hand from small helpers rather than generated from
//! annotations: the API is small, every operation shares the envelope and the same error
//! statuses, and keeping the whole contract on one screen makes it easy to review against the
//! original's. A test walks every documented operation against the running service, and CI
//! fuzzes the service with schemathesis from this document.

use axum::{
    Json, Router,
    response::{Html, IntoResponse},
    routing::get,
};
use serde_json::{Map, Value, json};

use super::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/docs", get(docs))
}

async fn openapi() -> impl IntoResponse {
    Json(document())
}

/// Swagger UI from its public CDN (the binary embeds no third-party UI); the document itself is
/// served by this instance.
async fn docs() -> Html<&'static str> {
    Html(
        r##"<!doctype html><html><head><meta charset="utf-8"><title>hmdp API</title>
<link rel="stylesheet" href="https://unpkg.com/swagger-ui-dist@5/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="https://unpkg.com/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});</script>
<noscript>The API document is at <a href="/openapi.json">/openapi.json</a>.</noscript>
</body></html>"##,
    )
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
        "ShopType": {"type": "object", "properties": {"id": int64, "name": {"type": "string"}, "icon": {"type": "string"}, "sort": int64}},
        "Voucher": {"type": "object", "properties": {"id": int64, "shopId": int64, "title": {"type": "string"}, "subTitle": {"type": "string"},
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
            "state": {"type": "string", "enum": ["pending", "created"]}, "order": schema_ref("Order")}},
        "SaleStats": {"type": "object", "properties": {"voucherId": int64, "redisStock": int64, "dbStock": int64, "accepted": int64,
            "persisted": int64, "streamLength": int64, "pending": int64, "lag": int64, "beginTime": time, "endTime": time, "nowMillis": int64,
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
