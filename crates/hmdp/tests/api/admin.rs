//! Catalogue-changing routes need `x-admin-token`; reads are public.

use serde_json::json;

use crate::{
    both_backends,
    helpers::{ADMIN_TOKEN, Backend, spawn_app},
};

both_backends!(
    admin_routes_need_the_admin_token,
    the_demo_catalogue_is_served
);

async fn admin_routes_need_the_admin_token(backend: Backend) {
    let app = spawn_app(backend).await;
    let shop = json!({"name": "测试小馆", "typeId": 1, "images": "", "area": "测试区",
        "address": "测试路 1 号", "x": 120.1, "y": 30.2, "avgPrice": 50, "sold": 0,
        "comments": 0, "score": 40, "openHours": "10:00-22:00"});

    // No token, a wrong token, and a user's session token are all refused.
    let r = app.post_json("/api/shop", &shop, None).await;
    assert_eq!((r.status, r.code()), (403, "admin_required"));
    let wrong = app
        .send(
            app.client
                .post(app.url("/api/shop"))
                .header("x-admin-token", "nope")
                .json(&shop),
        )
        .await;
    assert_eq!(wrong.status, 403);
    let user = app.login("13812345678").await;
    let r = app.post_json("/api/shop", &shop, Some(&user)).await;
    assert_eq!(r.status, 403);

    let admin = |req: reqwest::RequestBuilder| req.header("x-admin-token", ADMIN_TOKEN);
    let created = app
        .send(admin(app.client.post(app.url("/api/shop"))).json(&shop))
        .await;
    assert!(created.success(), "{created:?}");
    let id = created.body["data"].as_i64().unwrap();

    let got = app.get(&format!("/api/shop/{id}"), None).await;
    assert_eq!(got.body["data"]["name"], "测试小馆");
    assert_eq!(got.body["data"]["typeId"], 1);
    assert!(
        got.body["data"]["createTime"]
            .as_str()
            .unwrap()
            .contains('T')
    );

    let mut update = shop.clone();
    update["id"] = json!(id);
    update["name"] = json!("改名小馆");
    let r = app
        .send(admin(app.client.put(app.url("/api/shop"))).json(&update))
        .await;
    assert_eq!(r.body, json!({"success": true}));
    let got = app.get(&format!("/api/shop/{id}"), None).await;
    assert_eq!(got.body["data"]["name"], "改名小馆");

    // PUT without an id is the original's business failure; unknown ids too.
    let r = app
        .send(admin(app.client.put(app.url("/api/shop"))).json(&shop))
        .await;
    assert_eq!((r.status, r.code()), (200, "shop_id_required"));
    assert_eq!(r.msg(), "店铺id不能为空");
    let r = app.get("/api/shop/987654", None).await;
    assert_eq!((r.code(), r.msg()), ("shop_not_found", "店铺不存在！"));

    // A voucher for the new shop, then the shop's voucher list.
    let v = json!({"shopId": id, "title": "50元代金券", "subTitle": "周末可用",
        "rules": "全场通用", "payValue": 4750, "actualValue": 5000, "type": 0});
    let r = app.post_json("/api/voucher", &v, None).await;
    assert_eq!(r.status, 403);
    let r = app
        .send(admin(app.client.post(app.url("/api/voucher"))).json(&v))
        .await;
    assert!(r.success(), "{r:?}");
    let list = app.get(&format!("/api/voucher/list/{id}"), None).await;
    let list = list.body["data"].as_array().unwrap().clone();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["title"], "50元代金券");
    assert_eq!(list[0]["payValue"], 4750);
    assert!(
        list[0].get("stock").is_none(),
        "a plain voucher has no stock field"
    );
}

async fn the_demo_catalogue_is_served(backend: Backend) {
    let app = spawn_app(backend).await;
    let types = app.get("/api/shop-type/list", None).await;
    let types = types.body["data"].as_array().unwrap().clone();
    assert!(types.len() >= 3, "{types:?}");
    let sorts: Vec<i64> = types.iter().map(|t| t["sort"].as_i64().unwrap()).collect();
    assert!(
        sorts.windows(2).all(|w| w[0] <= w[1]),
        "sorted by sort: {sorts:?}"
    );
    assert!(
        types[0].get("createTime").is_none(),
        "shop types hide their time stamps"
    );

    let shop = app.get("/api/shop/1", None).await;
    assert!(shop.success(), "{shop:?}");
    let vouchers = app.get("/api/voucher/list/1", None).await;
    let v = &vouchers.body["data"][0];
    assert_eq!(v["type"], 1, "the demo voucher is a flash-sale voucher");
    assert!(v["stock"].as_i64().unwrap() > 0);
    assert!(v["beginTime"].as_str().unwrap() < v["endTime"].as_str().unwrap());
}
