//! `GET /openapi.json`: the OpenAPI 3.1 document of [`super::api`], derived from the code.
//!
//! Each handler declares its operation with `#[utoipa::path]` (path, parameters, body, the type
//! of its `data`, the header it needs) and the types it reads and answers derive `ToSchema`, so
//! the document follows the code. What every operation shares is added here, once: the
//! envelope around each `data`, the error answers (from [`ErrorCode`]), the security schemes and
//! the document's info. A test checks that the router serves exactly the documented operations,
//! CI fuzzes the service with schemathesis from this document, and `/docs` renders it.

use std::collections::BTreeMap;

use axum::{Router, body::Bytes, http::header, routing::get};
use serde_json::{Value, json};
use utoipa::openapi::OpenApi;

use super::{AppState, ErrorCode, docs};

/// `/openapi.json`, and `/docs` rendered from the same document.
pub(super) fn routes(api: OpenApi) -> Router<AppState> {
    let doc = document(api);
    let body = Bytes::from(serde_json::to_vec(&doc).expect("a JSON value serialises"));
    let json = [(header::CONTENT_TYPE, "application/json")];
    Router::new()
        .route(
            "/openapi.json",
            get(move || std::future::ready((json.clone(), body.clone()))),
        )
        .merge(docs::routes(&doc))
}

/// The document of the operations collected in `api`, each answer in the envelope.
fn document(api: OpenApi) -> Value {
    let mut doc = serde_json::to_value(api).expect("an OpenAPI document serialises");
    doc["info"] = json!({
        "title": "hmdp",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "hm-dianping (黑马点评) in Rust. Every route also answers under /api. \
            Business refusals are HTTP 200 with success=false and a code."
    });
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|i| i.values_mut())
        {
            envelope(op);
        }
    }
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    doc["components"]["schemas"]["Failure"] = json!({
        "description": "A refusal (HTTP 200) or an error (4xx, 5xx).",
        "type": "object",
        "required": ["success", "errorMsg", "code"],
        "properties": {
            "success": {"type": "boolean", "enum": [false]},
            "errorMsg": {"type": "string", "description": "for people"},
            "code": {"type": "string", "enum": codes, "description": "stable, machine-readable"},
            "data": {"description": "absent, except on `/health`"}
        }
    });
    doc["components"]["securitySchemes"] = json!({
        "session": {"type": "apiKey", "in": "header", "name": "authorization",
            "description": "the raw session token from /user/login"},
        "admin": {"type": "apiKey", "in": "header", "name": "x-admin-token",
            "description": "the admin token (HMDP_ADMIN_TOKEN)"}
    });
    doc
}

/// Puts the operation's `data` (its 200 body as declared, whatever media type utoipa gave it)
/// into the envelope, and adds the error answers it can get: every status of an [`ErrorCode`]
/// but 200, the login, admin and body-size ones only where they apply.
fn envelope(op: &mut Value) {
    let data = op["responses"]["200"]["content"]
        .as_object_mut()
        .and_then(|media| media.values_mut().next())
        .map(|m| m["schema"].take())
        .unwrap_or_default();
    let mut success = json!({
        "type": "object",
        "required": ["success"],
        "properties": {"success": {"type": "boolean", "enum": [true]}}
    });
    if !data.is_null() {
        success["properties"]["data"] = data;
    }
    let failure = json!({"$ref": "#/components/schemas/Failure"});
    op["responses"]["200"] = json!({
        "description": "the envelope: success with data, or a business refusal with a code",
        "content": {"application/json": {"schema": {"oneOf": [success, failure.clone()]}}}
    });
    let needs = |scheme: &str| {
        op["security"]
            .as_array()
            .is_some_and(|reqs| reqs.iter().any(|r| r.get(scheme).is_some()))
    };
    let (session, admin) = (needs("session"), needs("admin"));
    let body = op.get("requestBody").is_some();
    let upload = op["requestBody"]["content"]
        .get("multipart/form-data")
        .is_some();
    // The payment gateway's notice: its own refusals, on it alone.
    let signed = op["parameters"].as_array().is_some_and(|ps| {
        ps.iter()
            .any(|p| p["in"] == "header" && p["name"] == "x-pay-signature")
    });
    let mut errors: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
    for &code in ErrorCode::ALL {
        let applies = match code {
            ErrorCode::Unauthorized => session,
            ErrorCode::AdminRequired => admin,
            ErrorCode::PayloadTooLarge => body,
            ErrorCode::UploadQuota | ErrorCode::DiskFull => upload,
            ErrorCode::BadSignature
            | ErrorCode::UnknownOrder
            | ErrorCode::UnknownTrade
            | ErrorCode::WrongAmount
            | ErrorCode::UnexpectedNotice => signed,
            _ => code.status().as_u16() != 200,
        };
        if applies {
            errors
                .entry(code.status().as_u16())
                .or_default()
                .push(code.as_str());
        }
    }
    for (status, codes) in errors {
        let reason = axum::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("error");
        op["responses"][status.to_string()] = json!({
            "description": format!("{reason} (`{}`)", codes.join("`, `")),
            "content": {"application/json": {"schema": failure}}
        });
    }
}
