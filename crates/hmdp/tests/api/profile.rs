//! One's own profile: `GET`/`PUT /user/info` on both back ends: every field, partial changes,
//! refusals (each with its code, changing nothing), a photo as the icon, sessions showing the new
//! nickname (on every instance), and concurrent changes.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};

use crate::{
    both_backends,
    helpers::{
        Backend, Resp, TestApp, multipart, spawn_app, spawn_app_with, square_png, wait_until,
    },
};

both_backends!(
    every_field_is_stored_and_shown,
    a_partial_change_leaves_the_other_fields,
    bad_fields_are_refused_and_change_nothing,
    the_icon_is_a_photo_of_ones_own,
    concurrent_changes_do_not_mix,
    others_see_only_the_public_profile,
);

async fn put_info(app: &TestApp, body: &Value, token: Option<&str>) -> Resp {
    let mut req = app.client.put(app.url("/api/user/info")).json(body);
    if let Some(t) = token {
        req = req.header("authorization", t);
    }
    app.send(req).await
}

async fn profile(app: &TestApp, token: &str) -> Value {
    let r = app.get("/api/user/info", Some(token)).await;
    assert!(r.success(), "{r:?}");
    r.body["data"].clone()
}

/// Uploads a small PNG as the user of `token`; its name (`/blogs/…`).
async fn upload(app: &TestApp, token: &str) -> String {
    let (content_type, body) = multipart("file", "me.png", "image/png", &square_png(2, [9, 9, 9]));
    let req = app
        .client
        .post(app.url("/api/upload/blog"))
        .header("content-type", content_type)
        .header("authorization", token)
        .body(body);
    let r = app.send(req).await;
    assert!(r.success(), "upload: {r:?}");
    r.body["data"].as_str().unwrap().to_owned()
}

async fn every_field_is_stored_and_shown(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812340101").await;
    let me = app.get("/api/user/me", Some(&token)).await.body["data"].clone();
    let id = me["id"].as_i64().unwrap();

    // Before any change: the user's fields only.
    let before = profile(&app, &token).await;
    assert_eq!(before["userId"], id);
    assert_eq!(before["nickName"], me["nickName"]);
    assert_eq!(before["icon"], "");
    assert!(before.get("city").is_none(), "{before}");

    let hostile = "<img src=x onerror=alert(1)>\nhi";
    let r = put_info(
        &app,
        &json!({"nickName": " 小明 ", "city": "杭州", "introduce": hostile, "gender": true,
                "birthday": "1990-05-06"}),
        Some(&token),
    )
    .await;
    assert!(r.success(), "{r:?}");
    let expected = json!({"userId": id, "nickName": "小明", "icon": "", "city": "杭州",
        "introduce": hostile, "gender": true, "birthday": "1990-05-06", "fans": 0,
        "followee": 0, "credits": 0, "level": false});
    assert_eq!(r.body["data"], expected);
    assert_eq!(profile(&app, &token).await, expected);
    // The public view of the same row (see `others_see_only_the_public_profile`), and the
    // session.
    let public = app.get(&format!("/api/user/info/{id}"), Some(&token)).await;
    assert_eq!(public.body["data"]["introduce"], hostile);
    let me = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(me.body["data"]["nickName"], "小明");

    // The column's tinyint is accepted as well.
    let r = put_info(&app, &json!({"gender": 0}), Some(&token)).await;
    assert_eq!(r.body["data"]["gender"], false, "{r:?}");
}

/// `GET /user/info/{id}` is anyone's to read (ids are sequential): it carries the public
/// fields only, for the owner as for everyone else; city, gender and birthday stay in the
/// owner's `GET /user/info`.
async fn others_see_only_the_public_profile(backend: Backend) {
    let app = spawn_app(backend).await;
    let owner = app.login("13812340111").await;
    let other = app.login("13812340112").await;
    let id = app.get("/api/user/me", Some(&owner)).await.body["data"]["id"]
        .as_i64()
        .unwrap();
    let r = put_info(
        &app,
        &json!({"city": "杭州", "introduce": "hi", "gender": true, "birthday": "1990-05-06"}),
        Some(&owner),
    )
    .await;
    assert!(r.success(), "{r:?}");

    let public = json!({"userId": id, "introduce": "hi", "fans": 0, "followee": 0,
        "credits": 0, "level": false});
    for token in [&other, &owner] {
        let r = app.get(&format!("/api/user/info/{id}"), Some(token)).await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.body["data"], public);
    }
    let mine = profile(&app, &owner).await;
    assert_eq!(
        (&mine["city"], &mine["gender"], &mine["birthday"]),
        (&json!("杭州"), &json!(true), &json!("1990-05-06"))
    );

    // The documented answer is the public one.
    let doc = app.get("/openapi.json", None).await.body;
    let data = &doc["paths"]["/user/info/{id}"]["get"]["responses"]["200"]["content"]["application/json"]
        ["schema"]["oneOf"][0]["properties"]["data"];
    let name = data.to_string();
    let name = name
        .split("#/components/schemas/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("a named schema: {data}"));
    let props = &doc["components"]["schemas"][name]["properties"];
    assert!(props["introduce"].is_object(), "{name}: {props}");
    for private in ["city", "gender", "birthday"] {
        assert!(
            props[private].is_null(),
            "{private} documented in {name}: {props}"
        );
    }
}

async fn a_partial_change_leaves_the_other_fields(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812340102").await;
    let set = async |body: Value| {
        let r = put_info(&app, &body, Some(&token)).await;
        assert!(r.success(), "{body}: {r:?}");
        r.body["data"].clone()
    };
    set(json!({"city": "上海"})).await;
    let p = set(json!({"introduce": "hello"})).await;
    assert_eq!(
        (p["city"].as_str(), p["introduce"].as_str()),
        (Some("上海"), Some("hello"))
    );
    let p = set(json!({"nickName": "new-name", "city": null})).await;
    assert_eq!(p["city"], "上海");
    assert_eq!(p["introduce"], "hello");
    assert_eq!(p["nickName"], "new-name");
    let p = set(json!({"birthday": "2000-02-29", "gender": 1})).await;
    assert_eq!(
        (p["birthday"].as_str(), p["gender"].as_bool()),
        (Some("2000-02-29"), Some(true))
    );
    assert_eq!(p["nickName"], "new-name");
    // Empty clears a text; an empty body changes nothing.
    let p = set(json!({"city": ""})).await;
    assert_eq!(p["city"], "");
    assert_eq!(p["introduce"], "hello");
    let same = set(json!({})).await;
    assert_eq!(same, p);
    assert_eq!(
        app.get("/api/user/me", Some(&token)).await.body["data"]["nickName"],
        "new-name"
    );
}

async fn bad_fields_are_refused_and_change_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812340103").await;
    let r = put_info(
        &app,
        &json!({"city": "北京", "introduce": "x"}),
        Some(&token),
    )
    .await;
    assert!(r.success(), "{r:?}");
    let before = profile(&app, &token).await;
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(2))
        .format("%Y-%m-%d")
        .to_string();
    let cases = [
        (json!({"nickName": ""}), "invalid_nickname"),
        (json!({"nickName": "  "}), "invalid_nickname"),
        (json!({"nickName": "好".repeat(33)}), "invalid_nickname"),
        (json!({"nickName": "a\u{7}b"}), "invalid_nickname"),
        (json!({"city": "城".repeat(65)}), "invalid_profile"),
        (json!({"introduce": "介".repeat(129)}), "invalid_profile"),
        (json!({"city": "a\nb"}), "invalid_profile"),
        (json!({"birthday": "2000-13-01"}), "invalid_profile"),
        (json!({"birthday": "2001-02-29"}), "invalid_profile"),
        (json!({"birthday": "1899-12-31"}), "invalid_profile"),
        (json!({"birthday": tomorrow}), "invalid_profile"),
        (json!({"birthday": "1990/01/01"}), "invalid_profile"),
        (json!({"gender": 2}), "invalid_profile"),
        (json!({"icon": "/imgs/icons/someone.jpg"}), "invalid_icon"),
        (json!({"icon": "javascript:alert(1)"}), "invalid_icon"),
        (json!({"gender": "female"}), "invalid_request"),
        (json!({"city": 5}), "invalid_request"),
        (json!({"birthday": 19900101}), "invalid_request"),
        (json!({"nickName": ["a"]}), "invalid_request"),
        // One bad field refuses the good ones beside it.
        (json!({"city": "深圳", "nickName": ""}), "invalid_nickname"),
        (
            json!({"nickName": "ok", "birthday": "x"}),
            "invalid_profile",
        ),
    ];
    for (body, code) in cases {
        let r = put_info(&app, &body, Some(&token)).await;
        assert_eq!((r.status, r.code()), (400, code), "{body}: {r:?}");
        assert!(!r.success());
    }
    assert_eq!(profile(&app, &token).await, before);
    // A body that is not JSON, and no login.
    let req = app
        .client
        .put(app.url("/api/user/info"))
        .header("authorization", &token)
        .header("content-type", "application/json")
        .body("{city:");
    assert_eq!(app.send(req).await.code(), "invalid_request");
    let r = put_info(&app, &json!({"city": "x"}), None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    let r = put_info(&app, &json!({"city": "x"}), Some("not-a-session")).await;
    assert_eq!(r.status, 401);
    assert_eq!(app.get("/api/user/info", None).await.status, 401);
    assert_eq!(profile(&app, &token).await, before);
}

async fn the_icon_is_a_photo_of_ones_own(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812340104").await;
    let other = app.login("13812340105").await;
    let photo = upload(&app, &token).await;
    let theirs = upload(&app, &other).await;

    let r = put_info(
        &app,
        &json!({"icon": format!("/imgs{theirs}")}),
        Some(&token),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, "invalid_icon"), "{r:?}");
    let r = put_info(
        &app,
        &json!({"icon": format!("/imgs{photo}")}),
        Some(&token),
    )
    .await;
    assert!(r.success(), "{r:?}");
    let icon = format!("/imgs{photo}");
    assert_eq!(r.body["data"]["icon"], icon.as_str());
    let me = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(me.body["data"]["icon"], icon.as_str());
    // Kept for good: served, not the uploader's to delete any more, and setting it again (or
    // another field beside it) is fine.
    let (status, _, _) = app.get_bytes(&icon).await;
    assert_eq!(status, 200);
    let r = app
        .send(
            app.client
                .get(app.url("/api/upload/blog/delete"))
                .query(&[("name", photo.as_str())])
                .header("authorization", &token),
        )
        .await;
    assert_eq!(r.code(), "not_your_file", "{r:?}");
    let r = put_info(&app, &json!({"icon": icon, "city": "c"}), Some(&token)).await;
    assert!(r.success(), "{r:?}");
    // Someone else cannot take it either.
    let r = put_info(&app, &json!({"icon": icon}), Some(&other)).await;
    assert_eq!(r.code(), "invalid_icon");
    // Empty removes it.
    let r = put_info(&app, &json!({"icon": ""}), Some(&token)).await;
    assert_eq!(r.body["data"]["icon"], "");
    assert_eq!(
        app.get("/api/user/me", Some(&token)).await.body["data"]["icon"],
        ""
    );
}

async fn concurrent_changes_do_not_mix(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |c| c.code.min_interval = Duration::ZERO).await);
    let token = app.login("13812340106").await;
    let second = app.login("13812340106").await;
    let n = 12;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (app, token) = (app.clone(), token.clone());
            tokio::spawn(async move {
                let body = json!({"nickName": format!("n{i}"), "city": format!("c{i}"),
                                  "introduce": format!("i{i}")});
                put_info(&app, &body, Some(&token)).await
            })
        })
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.success(), "{r:?}");
    }
    // One change won whole: its three fields together.
    let p = profile(&app, &token).await;
    let nick = p["nickName"].as_str().unwrap();
    let i = nick.strip_prefix('n').unwrap();
    assert_eq!(p["city"], format!("c{i}"), "{p}");
    assert_eq!(p["introduce"], format!("i{i}"), "{p}");
    // Every session of the user shows the nickname the database holds.
    for t in [&token, &second] {
        let me = app.get("/api/user/me", Some(t)).await;
        assert_eq!(me.body["data"]["nickName"], nick, "{me:?}");
    }
}

/// A nickname change through one instance reaches a session another instance trusts from
/// memory, well inside its cache window: the published invalidation did it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nickname_change_reaches_every_instance() {
    let a = spawn_app_with(Backend::Sqlite, |c| c.code.min_interval = Duration::ZERO).await;
    let b = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_prefix = a.prefix.clone();
        c.database_url = a.state.config.database_url.clone();
        c.session_cache = Duration::from_secs(60);
    })
    .await;
    let token = a.login("13812340107").await;
    let old = b.get("/api/user/me", Some(&token)).await.body["data"]["nickName"].clone();
    assert!(old.is_string());
    let r = put_info(&a, &json!({"nickName": "renamed"}), Some(&token)).await;
    assert!(r.success(), "{r:?}");
    wait_until(
        Duration::from_secs(5),
        "the other instance shows the new nickname",
        async || b.get("/api/user/me", Some(&token)).await.body["data"]["nickName"] == "renamed",
    )
    .await;
    // An ended session is not brought back by a change.
    assert!(a.post("/api/user/logout", Some(&token)).await.success());
    let fresh = a.login("13812340107").await;
    assert!(
        put_info(&a, &json!({"nickName": "again"}), Some(&fresh))
            .await
            .success()
    );
    let key = format!("{}login:token:{token}", a.prefix);
    let exists: bool = redis::AsyncCommands::exists(&mut a.redis().await, &key)
        .await
        .unwrap();
    assert!(!exists, "the ended session stays ended");
}
