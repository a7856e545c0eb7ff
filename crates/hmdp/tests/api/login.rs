//! SMS-code login, sessions and bad input — against SQLite and MariaDB.

use serde_json::json;

use crate::{
    both_backends,
    helpers::{Backend, client_from, spawn_app, spawn_app_with, wait_until},
};

both_backends!(
    login_end_to_end,
    the_session_ttl_slides_with_use,
    an_expired_session_is_a_401,
    a_code_is_single_use,
    five_wrong_tries_stop_that_address_until_it_asks_again,
    codes_are_rate_limited_per_phone,
    the_daily_code_cap_applies,
    a_third_party_cannot_use_up_a_phones_codes_from_one_address,
    earlier_codes_stay_valid_until_one_is_used,
    wrong_tries_from_another_address_do_not_void_the_owners_code,
    guessing_from_many_addresses_is_bounded_per_phone,
    bad_input_gets_a_clear_error,
    a_first_login_creates_the_user_once,
    the_code_lives_at_the_original_key,
    user_lookups_follow_the_original,
);

async fn login_end_to_end(backend: Backend) {
    let app = spawn_app(backend).await;
    let phone = "13812345678";

    let r = app.send_code(phone).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"success": true}));

    let code = app.sms.last_code_for(phone).unwrap();
    let r = app.login_with(phone, &code).await;
    assert!(r.success(), "{r:?}");
    let token = r.body["data"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 32);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));

    let me = app.get("/api/user/me", Some(&token)).await;
    assert!(me.success(), "{me:?}");
    assert!(me.body["data"]["id"].as_i64().unwrap() > 0);
    assert!(
        me.body["data"]["nickName"]
            .as_str()
            .unwrap()
            .starts_with("user_")
    );
    // The routes answer without the /api prefix too.
    let me2 = app.get("/user/me", Some(&token)).await;
    assert_eq!(me.body, me2.body);

    let out = app.post("/api/user/logout", Some(&token)).await;
    assert_eq!(out.body, json!({"success": true}));

    let after = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(after.status, 401);
    assert_eq!(after.code(), "unauthorized");
    assert_eq!(after.body["success"], false);

    // No token at all, and a token of the wrong shape: 401 as well.
    assert_eq!(app.get("/api/user/me", None).await.status, 401);
    assert_eq!(app.get("/api/user/me", Some("Bearer x")).await.status, 401);
}

/// With the session cache off, every request slides the TTL (the original's behaviour; with it
/// on, at most once per window: `a_session_cache_trusts_a_session_for_its_window_only`).
async fn the_session_ttl_slides_with_use(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.session_ttl = std::time::Duration::from_secs(600);
        c.session_cache = std::time::Duration::ZERO;
    })
    .await;
    let token = app.login("13912345678").await;
    let key = format!("{}login:token:{token}", app.prefix);
    let ttl = app.pttl(&key).await;
    assert!(ttl > 590_000 && ttl <= 600_000, "fresh session ttl {ttl}");

    // Let most of the TTL "pass", then use the session: the TTL is back to full.
    let _: () = redis::AsyncCommands::pexpire(&mut app.redis().await, &key, 5_000)
        .await
        .unwrap();
    assert!(app.pttl(&key).await <= 5_000);
    let r = app.get("/api/user/me", Some(&token)).await;
    assert!(r.success());
    let ttl = app.pttl(&key).await;
    assert!(ttl > 590_000, "refreshed ttl {ttl}");

    // Any route refreshes it, even a public one (the original's RefreshTokenInterceptor).
    let _: () = redis::AsyncCommands::pexpire(&mut app.redis().await, &key, 5_000)
        .await
        .unwrap();
    assert!(app.get("/api/shop-type/list", Some(&token)).await.success());
    assert!(app.pttl(&key).await > 590_000);
}

async fn an_expired_session_is_a_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13712345678").await;
    let key = format!("{}login:token:{token}", app.prefix);
    let _: () = redis::AsyncCommands::pexpire(&mut app.redis().await, &key, 1)
        .await
        .unwrap();
    wait_until(
        std::time::Duration::from_secs(5),
        "the session expired in Redis",
        async || app.pttl(&key).await == -2,
    )
    .await;
    let r = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.code(), "unauthorized");
}

async fn a_code_is_single_use(backend: Backend) {
    let app = spawn_app(backend).await;
    let phone = "15012345678";
    app.send_code(phone).await;
    let code = app.sms.last_code_for(phone).unwrap();
    assert!(app.login_with(phone, &code).await.success());
    let again = app.login_with(phone, &code).await;
    assert_eq!(again.status, 200);
    assert!(!again.success());
    assert_eq!(again.code(), "code_expired");
}

async fn five_wrong_tries_stop_that_address_until_it_asks_again(backend: Backend) {
    let app = spawn_app_with(backend, |c| c.code.min_interval = std::time::Duration::ZERO).await;
    let phone = "18612345678";
    app.send_code(phone).await;
    let code = app.sms.last_code_for(phone).unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    for i in 1..=4 {
        let r = app.login_with(phone, wrong).await;
        assert_eq!(r.code(), "wrong_code", "try {i}: {r:?}");
        assert!(r.msg().contains("验证码错误"), "{r:?}");
        assert!(r.msg().contains(&format!("{} tries left", 5 - i)), "{r:?}");
    }
    let fifth = app.login_with(phone, wrong).await;
    assert_eq!(fifth.code(), "code_void", "{fifth:?}");
    // This address gets no sixth guess, not even with the right code...
    let right = app.login_with(phone, &code).await;
    assert!(!right.success());
    assert_eq!(right.code(), "code_void", "{right:?}");
    // ...until it asks for a new code, which gives it fresh tries.
    assert!(app.send_code(phone).await.success());
    let new = app.sms.last_code_for(phone).unwrap();
    assert!(app.login_with(phone, &new).await.success());
}

async fn codes_are_rate_limited_per_phone(backend: Backend) {
    let app = spawn_app(backend).await;
    assert!(app.send_code("13512345678").await.success());
    let second = app.send_code("13512345678").await;
    assert_eq!(second.status, 429);
    assert_eq!(second.code(), "rate_limited");
    assert!(second.msg().contains("retry in"), "{second:?}");
    let retry: u64 = second.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    assert_eq!(app.sms.count(), 1, "the refused request sent nothing");
    // Another phone is not affected.
    assert!(app.send_code("13612345678").await.success());
}

async fn the_daily_code_cap_applies(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.code.min_interval = std::time::Duration::ZERO;
        c.code.daily_limit = 3;
    })
    .await;
    for _ in 0..3 {
        assert!(app.send_code("17712345678").await.success());
    }
    let fourth = app.send_code("17712345678").await;
    assert_eq!(fourth.status, 429);
    assert!(fourth.msg().contains("daily"), "{fourth:?}");
    assert_eq!(app.sms.count(), 3);
}

/// Ten code requests from one address used to use up the phone's day.
/// Now each (phone, address) has its own cap, under a much higher one for the phone.
async fn a_third_party_cannot_use_up_a_phones_codes_from_one_address(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.code.min_interval = std::time::Duration::ZERO;
        c.code.phone_ip_daily_limit = 2;
        c.code.daily_limit = 5;
    })
    .await;
    let phone = "13912345678";
    let attacker = client_from([127, 0, 0, 2]);
    for _ in 0..2 {
        assert!(app.send_code_via(&attacker, phone).await.success());
    }
    let r = app.send_code_via(&attacker, phone).await;
    assert_eq!((r.status, r.code()), (429, "rate_limited"), "{r:?}");
    assert!(r.msg().contains("from this address"), "{r:?}");
    // The owner, at another address, still gets a code and logs in with it.
    let token = app.login(phone).await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());
    // Only many addresses together reach the phone's own cap (5: 2 + 1 + 2).
    let second = client_from([127, 0, 0, 3]);
    for _ in 0..2 {
        assert!(app.send_code_via(&second, phone).await.success());
    }
    let r = app.send_code_via(&client_from([127, 0, 0, 4]), phone).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.msg().contains("daily code limit reached"), "{r:?}");
    assert_eq!(app.sms.count(), 5);
}

/// A new code does not void the one the owner is typing: every code stays valid until it
/// expires or one of them logs in (at most the newest five are kept).
async fn earlier_codes_stay_valid_until_one_is_used(backend: Backend) {
    let app = spawn_app_with(backend, |c| c.code.min_interval = std::time::Duration::ZERO).await;
    let phone = "13812340000";
    let mut codes = Vec::new();
    for _ in 0..6 {
        assert!(app.send_code(phone).await.success());
        codes.push(app.sms.last_code_for(phone).unwrap());
    }
    // The original's key holds the newest code.
    let key = format!("{}login:code:{phone}", app.prefix);
    let stored: String = redis::AsyncCommands::get(&mut app.redis().await, &key)
        .await
        .unwrap();
    assert_eq!(stored, codes[5]);
    // The oldest of six fell out (unless a later one happens to be the same six digits).
    if !codes[1..].contains(&codes[0]) {
        let r = app.login_with(phone, &codes[0]).await;
        assert_eq!(r.code(), "wrong_code", "{r:?}");
    }
    let r = app.login_with(phone, &codes[1]).await;
    assert!(r.success(), "an earlier code logs in: {r:?}");
    // One login uses them all up.
    let r = app.login_with(phone, &codes[5]).await;
    assert_eq!(r.code(), "code_expired", "{r:?}");
}

/// Someone else guessing from another address runs out of tries there; the owner's code stays
/// valid (before, five wrong tries from anywhere voided it).
async fn wrong_tries_from_another_address_do_not_void_the_owners_code(backend: Backend) {
    let app = spawn_app(backend).await;
    let phone = "15012340000";
    assert!(app.send_code(phone).await.success());
    let code = app.sms.last_code_for(phone).unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let attacker = client_from([127, 0, 0, 2]);
    for _ in 0..4 {
        let r = app.login_via(&attacker, phone, wrong).await;
        assert_eq!(r.code(), "wrong_code", "{r:?}");
    }
    let r = app.login_via(&attacker, phone, wrong).await;
    assert_eq!(r.code(), "code_void", "{r:?}");
    // Out of tries: even the right code is refused from there.
    let r = app.login_via(&attacker, phone, &code).await;
    assert_eq!(r.code(), "code_void", "{r:?}");
    let r = app.login_with(phone, &code).await;
    assert!(r.success(), "the owner logs in: {r:?}");
}

/// Guessing from many addresses is bounded per phone: after `HMDP_CODE_MAX_ATTEMPTS` ×
/// `HMDP_CODE_DAILY_LIMIT` wrong tries a day, every wrong try voids all the phone's codes.
async fn guessing_from_many_addresses_is_bounded_per_phone(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.code.min_interval = std::time::Duration::ZERO;
        c.code.max_attempts = 2;
        c.code.daily_limit = 2;
    })
    .await;
    let phone = "17712340000";
    assert!(app.send_code(phone).await.success());
    let code = app.sms.last_code_for(phone).unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    // 2 × 2 = 4 wrong tries for the day, from two addresses.
    let (a, b) = (client_from([127, 0, 0, 2]), client_from([127, 0, 0, 3]));
    let a1 = app.login_via(&a, phone, wrong).await;
    assert_eq!(a1.code(), "wrong_code", "{a1:?}");
    let a2 = app.login_via(&a, phone, wrong).await;
    assert_eq!(a2.code(), "code_void", "{a2:?}");
    assert!(a2.msg().contains("from this address"), "{a2:?}");
    let b1 = app.login_via(&b, phone, wrong).await;
    assert_eq!(b1.code(), "wrong_code", "{b1:?}");
    let b2 = app.login_via(&b, phone, wrong).await;
    assert_eq!(b2.code(), "code_void", "{b2:?}");
    assert!(b2.msg().contains("for this phone"), "{b2:?}");
    let r = app.login_with(phone, &code).await;
    assert_eq!(r.code(), "code_expired", "the code is gone: {r:?}");
    // From now on one wrong try, from a fresh address, voids a new code too.
    assert!(app.send_code(phone).await.success());
    let code = app.sms.last_code_for(phone).unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let r = app
        .login_via(&client_from([127, 0, 0, 4]), phone, wrong)
        .await;
    assert_eq!(r.code(), "code_void", "{r:?}");
    let r = app.login_with(phone, &code).await;
    assert_eq!(r.code(), "code_expired", "{r:?}");
}

async fn bad_input_gets_a_clear_error(backend: Backend) {
    let app = spawn_app(backend).await;

    // A phone that breaks the rule: the original's business failure (HTTP 200).
    let r = app.send_code("12345").await;
    assert_eq!((r.status, r.code()), (200, "invalid_phone"));
    assert_eq!(r.msg(), "手机号格式错误");
    let r = app.login_with("12345", "123456").await;
    assert_eq!((r.status, r.code()), (200, "invalid_phone"));

    // Missing query parameter: 400.
    let r = app.post("/api/user/code", None).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    assert!(r.msg().contains("phone"), "{r:?}");

    // Malformed JSON, a missing field, a wrong type, no JSON at all: 400 naming the problem.
    let raw = |body: &'static str| {
        app.client
            .post(app.url("/api/user/login"))
            .header("content-type", "application/json")
            .body(body)
    };
    let r = app.send(raw("{\"phone\":")).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = app.send(raw("{\"code\":\"123456\"}")).await;
    assert_eq!(r.status, 400);
    assert!(r.msg().contains("phone"), "{r:?}");
    let r = app
        .send(raw("{\"phone\":13812345678,\"code\":\"123456\"}"))
        .await;
    assert_eq!(r.status, 400);
    assert!(r.msg().contains("phone"), "{r:?}");
    let r = app
        .send(app.client.post(app.url("/api/user/login")).body("phone=1"))
        .await;
    assert_eq!(r.status, 400);
    assert!(r.msg().contains("Content-Type"), "{r:?}");
    let r = app
        .post_json("/api/user/login", &json!({"phone": "13812345678"}), None)
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = app
        .post_json(
            "/api/user/login",
            &json!({"phone": "13812345678", "code": "12ab56"}),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (200, "invalid_code"));
    let r = app
        .post_json(
            "/api/user/login",
            &json!({"phone": "13812345678", "password": "x"}),
            None,
        )
        .await;
    assert_eq!(r.code(), "password_login_unsupported");

    // A body over the limit: 413 in the envelope.
    let huge = format!("{{\"phone\":\"{}\"}}", "1".repeat(200_000));
    let r = app.send(raw_owned(&app, huge)).await;
    assert_eq!((r.status, r.code()), (413, "payload_too_large"));
    assert_eq!(
        r.headers["connection"], "close",
        "the unread body ends the connection"
    );

    // Unknown ids and routes.
    let token = app.login("13812345678").await;
    let r = app.get("/api/user/abc", Some(&token)).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = app.get("/api/user/0", Some(&token)).await;
    assert_eq!(r.status, 400);
    let r = app.get("/api/no/such/route", None).await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let r = app.send(app.client.delete(app.url("/api/user/me"))).await;
    assert_eq!((r.status, r.code()), (405, "method_not_allowed"));

    // Nothing was lost: the session still works after all that.
    assert!(app.get("/api/user/me", Some(&token)).await.success());
}

fn raw_owned(app: &crate::helpers::TestApp, body: String) -> reqwest::RequestBuilder {
    app.client
        .post(app.url("/api/user/login"))
        .header("content-type", "application/json")
        .body(body)
}

async fn a_first_login_creates_the_user_once(backend: Backend) {
    let app = spawn_app_with(backend, |c| c.code.min_interval = std::time::Duration::ZERO).await;
    let t1 = app.login("13312345678").await;
    let me1 = app.get("/api/user/me", Some(&t1)).await.body["data"].clone();
    let nick = me1["nickName"].as_str().unwrap();
    assert_eq!(nick.len(), 15, "{nick}");
    assert!(
        nick[5..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );

    let t2 = app.login("13312345678").await;
    assert_ne!(t1, t2, "every login gets its own token");
    let me2 = app.get("/api/user/me", Some(&t2)).await.body["data"].clone();
    assert_eq!(me1, me2, "the second login finds the same user");
}

async fn the_code_lives_at_the_original_key(backend: Backend) {
    let app = spawn_app(backend).await;
    app.send_code("13012345678").await;
    let code = app.sms.last_code_for("13012345678").unwrap();
    let key = format!("{}login:code:13012345678", app.prefix);
    let stored: String = redis::AsyncCommands::get(&mut app.redis().await, &key)
        .await
        .unwrap();
    assert_eq!(stored, code);
    let ttl = app.pttl(&key).await;
    assert!(ttl > 100_000 && ttl <= 120_000, "code ttl {ttl}");
}

async fn user_lookups_follow_the_original(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13212345678").await;
    let me = app.get("/api/user/me", Some(&token)).await.body["data"].clone();
    let id = me["id"].as_i64().unwrap();

    let r = app.get(&format!("/api/user/{id}"), Some(&token)).await;
    assert_eq!(r.body["data"], me);
    // A missing user is `{"success":true}` with no data, as the original answers.
    let r = app.get("/api/user/999999", Some(&token)).await;
    assert_eq!(r.body, json!({"success": true}));
    let r = app.get(&format!("/api/user/info/{id}"), Some(&token)).await;
    assert_eq!(r.body, json!({"success": true}));
    // Both need login.
    assert_eq!(app.get(&format!("/api/user/{id}"), None).await.status, 401);
    assert_eq!(
        app.get(&format!("/api/user/info/{id}"), None).await.status,
        401
    );
}

/// The session cache is on by default, and a logout through one instance ends the session on
/// every instance at once: well inside the 5 s window, so the message did it, not the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logout_on_one_instance_ends_the_session_on_every_instance() {
    let a = spawn_app(Backend::Sqlite).await;
    assert_eq!(
        a.state.config.session_cache,
        std::time::Duration::from_secs(5)
    );
    let b = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_prefix = a.prefix.clone();
        c.database_url = a.state.config.database_url.clone();
    })
    .await;
    let token = a.login("13612340001").await;
    // B reads the session once and then trusts its copy: deleting the hash behind its back
    // does not end it there.
    assert!(b.get("/api/user/me", Some(&token)).await.success());
    let key = format!("{}login:token:{token}", a.prefix);
    let fields: std::collections::HashMap<String, String> =
        redis::AsyncCommands::hgetall(&mut a.redis().await, &key)
            .await
            .unwrap();
    let _: i64 = redis::AsyncCommands::del(&mut a.redis().await, &key)
        .await
        .unwrap();
    assert!(
        b.get("/api/user/me", Some(&token)).await.success(),
        "B trusts its copy"
    );
    let pairs: Vec<(String, String)> = fields.into_iter().collect();
    let _: () = redis::AsyncCommands::hset_multiple(&mut a.redis().await, &key, &pairs)
        .await
        .unwrap();
    // The logout through A reaches B by pub/sub.
    assert!(a.post("/api/user/logout", Some(&token)).await.success());
    wait_until(
        std::time::Duration::from_secs(2),
        "B refusing the logged-out session",
        async || b.get("/api/user/me", Some(&token)).await.status == 401,
    )
    .await;
    assert_eq!(a.get("/api/user/me", Some(&token)).await.status, 401);
}

/// `HMDP_SESSION_CACHE_MS`: a session read from Redis is trusted for that long and no longer;
/// a logout through this instance ends it at once; unknown tokens are never cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cache_trusts_a_session_for_its_window_only() {
    let window = std::time::Duration::from_millis(1500);
    let app = spawn_app_with(Backend::Sqlite, |c| c.session_cache = window).await;
    let mut redis = app.redis().await;

    let token = app.login("13612345678").await;
    let key = format!("{}login:token:{token}", app.prefix);
    assert!(app.get("/api/user/me", Some(&token)).await.success());
    // Deleted behind this instance's back (as a logout through another instance would):
    // still trusted within the window...
    let _: i64 = redis::AsyncCommands::del(&mut redis, &key).await.unwrap();
    let r = app.get("/api/user/me", Some(&token)).await;
    assert!(r.success(), "trusted within the window: {r:?}");
    assert_eq!(
        r.body["data"]["id"],
        app.get("/api/user/me", Some(&token)).await.body["data"]["id"]
    );
    // ...and refused once it has passed (not a wait: the window runs out).
    tokio::time::sleep(window + std::time::Duration::from_millis(200)).await;
    let r = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(r.status, 401, "{r:?}");

    // A logout through this instance takes effect at once.
    let token = app.login("13612345679").await;
    assert!(app.get("/api/user/me", Some(&token)).await.success());
    assert!(app.post("/api/user/logout", Some(&token)).await.success());
    assert_eq!(app.get("/api/user/me", Some(&token)).await.status, 401);

    // "No such session" is not remembered: a session that appears in Redis (created by another
    // instance) is accepted on the next request.
    let token = app.login("13612345670").await;
    let key = format!("{}login:token:{token}", app.prefix);
    let aside = format!("{key}:aside");
    let _: () = redis::AsyncCommands::rename(&mut redis, &key, &aside)
        .await
        .unwrap();
    assert_eq!(app.get("/api/user/me", Some(&token)).await.status, 401);
    let _: () = redis::AsyncCommands::rename(&mut redis, &aside, &key)
        .await
        .unwrap();
    assert!(app.get("/api/user/me", Some(&token)).await.success());
}

/// A read of a session that was under way when its logout landed does not put the session back
/// into the in-memory cache: the logout's tombstone is checked when the read stores its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_racing_a_logout_does_not_bring_the_session_back() {
    let app = spawn_app(Backend::Sqlite).await;
    assert!(!app.state.config.session_cache.is_zero(), "the cache is on");
    let token = app.login("13612340010").await;
    let parsed = hmdp::testing::domain::SessionToken::parse(&token).unwrap();
    let read = app
        .state
        .sessions
        .touch_racing(&parsed, async {
            let r = app.post("/api/user/logout", Some(&token)).await;
            assert!(r.success(), "{r:?}");
        })
        .await
        .unwrap();
    assert!(read.is_some(), "the read saw the session before the logout");
    let r = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(r.status, 401, "the logged-out session came back: {r:?}");
}

/// `HMDP_SESSION_MAX_AGE_SECS`: a session in constant use still ends that long after its login;
/// its TTL never slides past that instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_use_ends_at_its_maximum_age() {
    assert_eq!(
        hmdp::Config::default().session_max_age,
        std::time::Duration::from_secs(30 * 24 * 3600)
    );
    let max_age = std::time::Duration::from_secs(3);
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.session_max_age = max_age;
        c.session_cache = std::time::Duration::ZERO;
    })
    .await;
    let token = app.login("13612340011").await;
    let logged_in = std::time::Instant::now();
    let key = format!("{}login:token:{token}", app.prefix);
    let ttl = app.pttl(&key).await;
    assert!(
        ttl > 0 && ttl <= 3_000,
        "the TTL stops at the maximum age: {ttl}"
    );
    // Used all along, as a busy client would.
    wait_until(
        std::time::Duration::from_secs(10),
        "the session ending",
        async || app.get("/api/user/me", Some(&token)).await.status == 401,
    )
    .await;
    let lived = logged_in.elapsed();
    assert!(
        lived >= max_age - std::time::Duration::from_millis(200),
        "{lived:?}"
    );
}

/// `POST /user/logout/all` ends every session of the user, on every instance at once, one made
/// before sessions were listed included, and no one else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logout_all_ends_every_session_of_the_user_everywhere() {
    let a = spawn_app_with(Backend::Sqlite, |c| {
        c.code.min_interval = std::time::Duration::ZERO
    })
    .await;
    let b = spawn_app_with(Backend::Sqlite, |c| {
        c.redis_prefix = a.prefix.clone();
        c.database_url = a.state.config.database_url.clone();
        c.code.min_interval = std::time::Duration::ZERO;
    })
    .await;
    let phone = "13612340012";
    let (t1, t2) = (a.login(phone).await, b.login(phone).await);
    let me = a.get("/api/user/me", Some(&t1)).await.body["data"].clone();
    // A session written before sessions were listed: the original's hash alone.
    let older = "0123456789abcdef0123456789abcdef".to_owned();
    let key = format!("{}login:token:{older}", a.prefix);
    let fields = [
        ("id", me["id"].to_string()),
        ("nickName", me["nickName"].as_str().unwrap().to_owned()),
        ("icon", String::new()),
    ];
    let mut redis = a.redis().await;
    let _: () = redis::AsyncCommands::hset_multiple(&mut redis, &key, &fields)
        .await
        .unwrap();
    let _: () = redis::AsyncCommands::pexpire(&mut redis, &key, 600_000)
        .await
        .unwrap();
    let someone_else = a.login("13612340013").await;
    let mine = [&t1, &t2, &older];
    for token in mine.into_iter().chain([&someone_else]) {
        for app in [&a, &b] {
            let r = app.get("/api/user/me", Some(token)).await;
            assert!(r.success(), "{r:?}");
        }
    }

    let r = b.post("/api/user/logout/all", Some(&t2)).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.body["data"], 3, "{r:?}");
    for token in mine {
        for app in [&a, &b] {
            wait_until(
                std::time::Duration::from_secs(2),
                "every instance refusing the user's sessions",
                async || app.get("/api/user/me", Some(token)).await.status == 401,
            )
            .await;
        }
    }
    for app in [&a, &b] {
        let r = app.get("/api/user/me", Some(&someone_else)).await;
        assert!(r.success(), "another user's session lives on: {r:?}");
    }
}
