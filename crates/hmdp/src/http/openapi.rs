//! `GET /openapi.json`: the OpenAPI 3.1 document of [`super::api`], derived from the code.
//!
//! Each handler declares its operation with `#[utoipa::path]` (path, parameters, body, the type
//! of its `data`, the header it needs) and the types it reads and answers derive `ToSchema`, so
//! the document follows the code. What every operation shares is added here, once: the
//! envelope around each `data`, the error answers (each operation those the codes' table names
//! for it, see [`ErrorCode::operations`]), the security schemes and the document's info. A test checks that the router serves exactly the documented operations,
//! CI fuzzes the service with schemathesis from this document, and `/docs` renders it.

use std::collections::BTreeMap;

use axum::{Router, body::Bytes, http::header, routing::get};
use serde_json::{Value, json};
use utoipa::openapi::OpenApi;

use super::{AppState, ErrorCode, docs};
use crate::domain::Operations;

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
    for (path, item) in doc["paths"].as_object_mut().into_iter().flatten() {
        for (method, op) in item.as_object_mut().into_iter().flatten() {
            envelope(&operation_name(method, path), op);
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

/// An operation as the codes' table names it: `"POST /voucher-order/seckill/{id}"`.
fn operation_name(method: &str, path: &str) -> String {
    format!("{} {path}", method.to_ascii_uppercase())
}

/// Puts the operation's `data` (its 200 body as declared, whatever media type utoipa gave it)
/// into the envelope, and adds the error answers it can get: the codes whose
/// [`ErrorCode::operations`] name it, the refusals (200) in the envelope's description, the
/// others each under its status.
fn envelope(name: &str, op: &mut Value) {
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
    let needs = |scheme: &str| {
        op["security"]
            .as_array()
            .is_some_and(|reqs| reqs.iter().any(|r| r.get(scheme).is_some()))
    };
    let (session, admin) = (needs("session"), needs("admin"));
    let body = op.get("requestBody").is_some();
    let mut errors: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
    for &code in ErrorCode::ALL {
        let applies = match code.operations() {
            Operations::Any => true,
            Operations::Session => session,
            Operations::Admin => admin,
            Operations::Body => body,
            Operations::Only(ops) => ops.contains(&name),
        };
        if applies {
            errors
                .entry(code.status().as_u16())
                .or_default()
                .push(code.as_str());
        }
    }
    let refusals = match errors.remove(&200) {
        Some(codes) => format!(", here `{}`", codes.join("`, `")),
        None => String::new(),
    };
    let failure = json!({"$ref": "#/components/schemas/Failure"});
    op["responses"]["200"] = json!({
        "description": format!(
            "the envelope: success with data, or a business refusal with a code{refusals}"
        ),
        "content": {"application/json": {"schema": {"oneOf": [success, failure.clone()]}}}
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation the codes' table names is one the router serves: a renamed route or a
    /// typo in the table fails here instead of dropping a code from the document.
    #[test]
    fn every_operation_the_codes_name_is_documented() {
        let config = crate::config::Config::default();
        let (_, api) = super::super::api(&config).split_for_parts();
        let doc = document(api);
        let mut documented = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for method in item.as_object().into_iter().flatten().map(|(m, _)| m) {
                documented.insert(operation_name(method, path));
            }
        }
        for code in ErrorCode::ALL {
            if let Operations::Only(ops) = code.operations() {
                for op in ops {
                    assert!(
                        documented.contains(*op),
                        "{} names {op}, which is no documented operation",
                        code.as_str()
                    );
                }
            }
        }
    }

    #[test]
    fn a_refusal_is_listed_on_its_operations_only() {
        let config = crate::config::Config::default();
        let (_, api) = super::super::api(&config).split_for_parts();
        let doc = document(api);
        let grab = &doc["paths"]["/voucher-order/seckill/{id}"]["post"]["responses"]["200"];
        let text = grab["description"].as_str().unwrap();
        assert!(text.contains("`sold_out`"), "{text}");
        let shop = &doc["paths"]["/shop/{id}"]["get"]["responses"]["200"];
        let text = shop["description"].as_str().unwrap();
        assert!(
            !text.contains("sold_out") && text.contains("`shop_not_found`"),
            "{text}"
        );
        let notify = &doc["paths"]["/pay/notify"]["post"]["responses"];
        assert!(
            notify["409"]["description"]
                .as_str()
                .unwrap()
                .contains("wrong_amount")
        );
        assert!(doc["paths"]["/shop/{id}"]["get"]["responses"]["409"].is_null());
    }
}
