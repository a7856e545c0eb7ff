//! The order's life after the grab, as the tests drive it: the owner's view of an order, a
//! payment opened, the gateway's signed notices.

use std::{collections::HashMap, time::Duration};

use hmdp::{config::Secret, testing::order_life};
use serde_json::{Value, json};

use super::{PAY_SECRET, Patience, Resp, TestApp, db_count, wait_until};

/// `GET /voucher-order/{id}` as its owner: the answer's `data`.
pub async fn order_view(app: &TestApp, token: &str, id: i64) -> Value {
    let r = app
        .get(&format!("/api/voucher-order/{id}"), Some(token))
        .await;
    assert!(r.success(), "order {id}: {r:?}");
    r.body["data"].clone()
}

/// The order's `status` (1–6) as its owner sees it, once written (0 before).
pub async fn order_status(app: &TestApp, token: &str, id: i64) -> i64 {
    order_view(app, token, id).await["status"]
        .as_i64()
        .unwrap_or(0)
}

/// Waits until the owner sees the order in `status`.
pub async fn wait_for_status(app: &TestApp, token: &str, id: i64, status: i64, within: Duration) {
    let what = format!("order {id} in status {status}");
    wait_until(
        Patience::new(within).every(Duration::from_millis(50)),
        &what,
        async || match order_status(app, token, id).await {
            s if s == status => Ok(()),
            s => Err(format!("status {s}")),
        },
    )
    .await;
}

/// `POST /voucher-order/{id}/pay`: the trade number and amount.
pub async fn open_payment(app: &TestApp, token: &str, id: i64) -> (String, i64) {
    let r = app
        .post(&format!("/api/voucher-order/{id}/pay"), Some(token))
        .await;
    assert!(r.success(), "pay {id}: {r:?}");
    (
        r.body["data"]["tradeNo"].as_str().unwrap().to_owned(),
        r.body["data"]["amount"].as_i64().unwrap(),
    )
}

/// A notice's body as the gateway writes it.
pub fn notice(order: i64, trade_no: &str, amount: i64, status: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "orderId": order.to_string(),
        "tradeNo": trade_no,
        "amount": amount,
        "status": status,
    }))
    .unwrap()
}

/// The signature the gateway sends for `body`.
pub fn signature(body: &[u8]) -> String {
    order_life::sign(&Secret::new(PAY_SECRET), body)
}

/// `POST /pay/notify` with `body` as it is and the given signature header (none if `None`).
pub async fn post_notice(app: &TestApp, body: &[u8], signature: Option<&str>) -> Resp {
    let mut req = app
        .client
        .post(app.url("/api/pay/notify"))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(s) = signature {
        req = req.header(order_life::SIGNATURE_HEADER, s);
    }
    app.send(req).await
}

/// A correctly signed notice.
pub async fn signed_notice(
    app: &TestApp,
    order: i64,
    trade_no: &str,
    amount: i64,
    status: &str,
) -> Resp {
    let body = notice(order, trade_no, amount, status);
    post_notice(app, &body, Some(&signature(&body))).await
}

/// Each order of `voucher` with its status, from the database.
pub async fn db_statuses(app: &TestApp, voucher: i64) -> HashMap<i64, i64> {
    let sql = "SELECT id, CAST(status AS SIGNED) FROM tb_voucher_order WHERE voucher_id = ?";
    let rows: Vec<(i64, i64)> = match &app.state.db {
        hmdp::testing::storage::Db::Sqlite(p) => sqlx::query_as(sql)
            .bind(voucher)
            .fetch_all(p)
            .await
            .unwrap(),
        hmdp::testing::storage::Db::MySql(p) => sqlx::query_as(sql)
            .bind(voucher)
            .fetch_all(p)
            .await
            .unwrap(),
    };
    rows.into_iter().collect()
}

/// How many orders of `voucher` are in `status`.
pub async fn db_orders_in(app: &TestApp, voucher: i64, status: i64) -> i64 {
    let sql =
        format!("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND status = {status}");
    db_count(app, &sql, voucher).await
}
