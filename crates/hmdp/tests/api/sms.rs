//! `HMDP_SMS=http`: login codes POSTed to an SMS gateway (a small receiver on port 0 here), with
//! the secret header, retries and the 503 that lifts the cooldown; and the refusal to write
//! codes to the log on a public address unless chosen.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use hmdp::config::{Secret, SmsMode};
use serde_json::Value;

use crate::helpers::{
    Backend, TestApp, free_port, redis_url, remove_keys, spawn_app_with_configured_sms, test_config,
};

const SECRET: &str = "gateway-secret-0123";

/// How the gateway answers one request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(u16),
    /// Answers only after the sender has given up on this try.
    Hang,
}

/// A fake SMS gateway: answers the scripted answers in turn, then 200; records every request.
#[derive(Default)]
struct Gateway {
    script: Mutex<VecDeque<Answer>>,
    seen: Mutex<Vec<(HeaderMap, Value)>>,
}

impl Gateway {
    /// Starts on port 0; its URL.
    async fn start(script: &[Answer]) -> (Arc<Self>, String) {
        let gateway = Arc::new(Gateway {
            script: Mutex::new(script.iter().copied().collect()),
            ..Gateway::default()
        });
        let app = Router::new()
            .route("/send", post(receive))
            .with_state(gateway.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/send", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (gateway, url)
    }

    fn seen(&self) -> Vec<(HeaderMap, Value)> {
        self.seen.lock().unwrap().clone()
    }
}

async fn receive(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> StatusCode {
    gateway.seen.lock().unwrap().push((headers, body));
    let answer = gateway.script.lock().unwrap().pop_front();
    match answer {
        Some(Answer::Status(s)) => StatusCode::from_u16(s).unwrap(),
        Some(Answer::Hang) => {
            // Not a wait: a gateway that answers too late for any try's timeout.
            tokio::time::sleep(Duration::from_secs(5)).await;
            StatusCode::OK
        }
        None => StatusCode::OK,
    }
}

/// The service sending its codes to `url`, a try timing out after `timeout_ms`.
async fn app_with_gateway(url: &str, timeout_ms: u64, retries: u32) -> TestApp {
    let url = url.to_owned();
    spawn_app_with_configured_sms(Backend::Sqlite, move |c| {
        c.sms.mode = Some(SmsMode::Http);
        c.sms.url = Some(url);
        c.sms.header = "x-sms-key".into();
        c.sms.secret = Some(Secret::new(SECRET));
        c.sms.template = "SMS_LOGIN_1".into();
        c.sms.timeout = Duration::from_millis(timeout_ms);
        c.sms.retries = retries;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_goes_to_the_gateway_with_the_secret_header() {
    let (gateway, url) = Gateway::start(&[]).await;
    let app = app_with_gateway(&url, 2000, 2).await;
    let phone = "13812345678";
    let r = app.send_code(phone).await;
    assert!(r.success(), "{r:?}");

    let seen = gateway.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (headers, body) = &seen[0];
    assert_eq!(headers["x-sms-key"], SECRET);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body["phone"], phone);
    assert_eq!(body["template"], "SMS_LOGIN_1");
    assert_eq!(body["ttlSecs"], 120);
    assert!(
        body["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{body}"
    );
    let code = body["code"].as_str().unwrap();
    assert!(
        code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit()),
        "{body}"
    );
    // The code the gateway got logs the user in.
    let r = app.login_with(phone, code).await;
    assert!(r.success(), "{r:?}");
    assert!(
        app.sms.last_code_for(phone).is_none(),
        "not the capturing sender"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_fails_or_hangs_is_tried_again_but_a_refusal_is_not() {
    let (gateway, url) = Gateway::start(&[
        Answer::Hang,
        Answer::Status(500),
        Answer::Status(200),
        Answer::Status(400),
    ])
    .await;
    let app = app_with_gateway(&url, 300, 2).await;

    // A try that times out, one that gets a 500, and the third is delivered.
    let r = app.send_code("13812345678").await;
    assert!(r.success(), "{r:?}");
    let seen = gateway.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (_, body) in &seen {
        assert_eq!(
            body["id"], seen[0].1["id"],
            "one id for every try of one code"
        );
        assert_eq!(body["code"], seen[0].1["code"]);
    }

    // A 400 is the gateway refusing this message: no retry, a 503.
    let r = app.send_code("13912345678").await;
    assert_eq!((r.status, r.code()), (503, "unavailable"), "{r:?}");
    assert_eq!(gateway.seen().len(), 4);
    // The cooldown was lifted: asking again at once goes to the gateway.
    let r = app.send_code("13912345678").await;
    assert!(r.success(), "{r:?}");
    assert_eq!(gateway.seen().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_is_down_answers_503_and_lifts_the_cooldown() {
    // Nothing listens there.
    let url = format!("http://127.0.0.1:{}/send", free_port());
    let app = app_with_gateway(&url, 500, 1).await;
    for _ in 0..2 {
        let r = app.send_code("13812345678").await;
        assert_eq!((r.status, r.code()), (503, "unavailable"), "{r:?}");
        assert!(
            !r.msg().contains(SECRET) && !r.msg().contains("13812345678"),
            "{r:?}"
        );
    }
    // Neither code went out, so neither used the hourly SMS budget.
    let key = format!("{}login:sms:hour", app.prefix);
    let used: Option<i64> = redis::AsyncCommands::get(&mut app.redis().await, &key)
        .await
        .unwrap();
    assert_eq!(used.unwrap_or(0), 0);
}

/// Codes in the log on an address others reach, by default, would let whoever reads the log log
/// in as anyone: refused, in one line that says what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_in_the_log_on_a_public_address_are_refused_unless_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(
        format!("sqlite://{}", dir.path().join("db.sqlite").display()),
        dir.path(),
    );
    config.listen = "0.0.0.0:0".parse().unwrap();
    let err = match hmdp::Application::build(config.clone()).await {
        Ok(_) => panic!("started with login codes in the log on 0.0.0.0"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("HMDP_SMS=log on purpose"), "{err}");
    assert!(err.contains("0.0.0.0:0"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");

    config.sms.mode = Some(SmsMode::Log);
    let prefix = config.redis_prefix.clone();
    let app = hmdp::Application::build(config)
        .await
        .expect("starts when chosen on purpose");
    assert!(app.local_addr().ip().is_unspecified());
    drop(app);
    remove_keys(&redis_url(), &prefix);
}
