//! The configuration as a whole: defaults, the file and the environment stacked, the rules, the
//! summary and the table in docs/configuration.md.

use std::{collections::HashMap, path::PathBuf, time::Duration};

use super::{load::file_key, *};

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn no_configuration_gives_the_documented_defaults() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8081");
    assert_eq!(c.database_url, "sqlite://data/hmdp.db");
    assert_eq!(c.redis_url_or_default(), "redis://127.0.0.1:6379");
    assert!(c.redis_url.is_none());
    assert_eq!(c.redis_prefix, "");
    assert_eq!(c.data_dir, PathBuf::from("data"));
    assert_eq!(c.session_ttl, Duration::from_secs(1800));
    assert_eq!(c.code.ttl, Duration::from_secs(120));
    assert_eq!(c.code.ip_per_min, 10);
    assert_eq!(
        (c.code.daily_limit, c.code.phone_ip_daily_limit),
        (50, 10),
        "a phone's day cannot be used up from one address"
    );
    assert!(c.trusted_proxies.is_empty(), "no proxy is trusted");
    assert_eq!(c.max_connections, 10_000);
    assert_eq!(c.max_connections_per_ip, 256);
    assert_eq!(c.max_header_bytes, 16 * 1024);
    assert!(c.redacted_summary().contains("trusted_proxies=\"\" "));
    let c = Config::from_sources(None, &env(&[("HMDP_CODE_IP_PER_MIN", "0")])).unwrap();
    assert_eq!(c.code.ip_per_min, 0, "0 turns the per-IP code quota off");
    assert!(c.redacted_summary().contains("code_ip_per_min=0 "));
}

#[test]
fn the_environment_overrides_the_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hmdp.toml");
    std::fs::write(
        &file,
        "listen = \"0.0.0.0:9000\"\nredis_prefix = \"file:\"\nsession_ttl_secs = 60\n",
    )
    .unwrap();
    let c = Config::from_sources(Some(&file), &env(&[("HMDP_REDIS_PREFIX", "env:")])).unwrap();
    assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(c.redis_prefix, "env:");
    assert_eq!(c.session_ttl, Duration::from_secs(60));
}

#[test]
fn the_managed_redis_fsync_policy_comes_from_the_file_or_the_environment() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.redis_appendfsync, AppendFsync::Everysec);
    assert!(c.redacted_summary().contains("redis_appendfsync=everysec"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hmdp.toml");
    std::fs::write(&file, "redis_appendfsync = \"always\"\n").unwrap();
    let c = Config::from_sources(Some(&file), &env(&[])).unwrap();
    assert_eq!(c.redis_appendfsync, AppendFsync::Always);
    assert!(c.redacted_summary().contains("redis_appendfsync=always"));
    let c = Config::from_sources(Some(&file), &env(&[("HMDP_REDIS_APPENDFSYNC", "no")])).unwrap();
    assert_eq!(c.redis_appendfsync, AppendFsync::No);

    let err =
        Config::from_sources(None, &env(&[("HMDP_REDIS_APPENDFSYNC", "sometimes")])).unwrap_err();
    assert!(err.to_string().contains("HMDP_REDIS_APPENDFSYNC"), "{err}");
    assert!(err.to_string().contains("always, everysec, no"), "{err}");
}

#[test]
fn the_worker_consumer_name_is_optional_and_trimmed() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.seckill.consumer, None);
    assert!(
        c.redacted_summary()
            .contains("worker_consumer=(random per process)")
    );
    let c = Config::from_sources(None, &env(&[("HMDP_WORKER_CONSUMER", " pod-1 ")])).unwrap();
    assert_eq!(c.seckill.consumer.as_deref(), Some("pod-1"));
    let c = Config::from_sources(None, &env(&[("HMDP_WORKER_CONSUMER", "  ")])).unwrap();
    assert_eq!(c.seckill.consumer, None);
}

#[test]
fn the_worker_listener_is_off_unless_set() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.seckill.listen, None);
    assert!(c.redacted_summary().contains("worker_listen=(unset)"));
    let c = Config::from_sources(None, &env(&[("HMDP_WORKER_LISTEN", "127.0.0.1:9464")])).unwrap();
    assert_eq!(c.seckill.listen, Some("127.0.0.1:9464".parse().unwrap()));
    assert!(
        c.redacted_summary()
            .contains("worker_listen=127.0.0.1:9464")
    );
    let err = Config::from_sources(None, &env(&[("HMDP_WORKER_LISTEN", "9464")])).unwrap_err();
    assert!(err.to_string().contains("HMDP_WORKER_LISTEN"), "{err}");
}

#[test]
fn the_session_cache_is_on_by_default_and_bounded() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.session_cache, Duration::from_secs(5));
    assert!(c.redacted_summary().contains("session_cache_ms=5000 "));
    let c = Config::from_sources(None, &env(&[("HMDP_SESSION_CACHE_MS", "500")])).unwrap();
    assert_eq!(c.session_cache, Duration::from_millis(500));
    for bad in [
        vec![("HMDP_SESSION_CACHE_MS", "60001")],
        vec![
            ("HMDP_SESSION_CACHE_MS", "5000"),
            ("HMDP_SESSION_TTL_SECS", "5"),
        ],
        vec![("HMDP_SESSION_CACHE_MS", "soon")],
    ] {
        let err = Config::from_sources(None, &env(&bad)).unwrap_err();
        assert!(err.to_string().contains("HMDP_SESSION_CACHE_MS"), "{err}");
    }
}

#[test]
fn replica_waits_are_off_by_default_and_refused_on_a_cluster() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.seckill.wait_replicas, 0);
    let c = Config::from_sources(
        None,
        &env(&[
            ("HMDP_REDIS_WAIT_REPLICAS", "2"),
            ("HMDP_REDIS_WAIT_TIMEOUT_MS", "50"),
        ]),
    )
    .unwrap();
    assert_eq!(c.seckill.wait_replicas, 2);
    assert_eq!(c.seckill.wait_timeout, Duration::from_millis(50));
    for bad in [
        vec![
            ("HMDP_REDIS_WAIT_REPLICAS", "1"),
            ("HMDP_REDIS_URL", "redis://a:7000,redis://b:7001"),
        ],
        vec![("HMDP_REDIS_WAIT_REPLICAS", "17")],
        vec![("HMDP_REDIS_WAIT_TIMEOUT_MS", "0")],
    ] {
        let err = Config::from_sources(None, &env(&bad)).unwrap_err();
        assert!(err.to_string().contains("HMDP_REDIS_WAIT_"), "{err}");
    }
}

#[test]
fn sentinel_replaces_the_url_needs_a_master_and_allows_replica_waits() {
    let c = Config::from_sources(
        None,
        &env(&[
            (
                "HMDP_REDIS_SENTINELS",
                "10.0.0.1:26379, sentinel-b:26379,sentinel-c:26380",
            ),
            ("HMDP_REDIS_SENTINEL_MASTER", " mymaster "),
            ("HMDP_REDIS_SENTINEL_PASSWORD", "sentinel-secret"),
            ("HMDP_REDIS_PASSWORD", "data-secret"),
            ("HMDP_REDIS_WAIT_REPLICAS", "1"),
        ]),
    )
    .unwrap();
    let spec = c.redis_sentinel().expect("on Sentinel");
    assert_eq!(spec.master, "mymaster");
    assert_eq!(spec.sentinels.addrs().len(), 3);
    assert_eq!(spec.sentinels.addrs()[2], ("sentinel-c".to_owned(), 26380));
    assert_eq!(
        spec.password.as_ref().map(Secret::expose),
        Some("data-secret")
    );
    assert_eq!(c.seckill.wait_replicas, 1);
    let summary = c.redacted_summary();
    assert!(!summary.contains("data-secret"), "{summary}");
    assert!(!summary.contains("sentinel-secret"), "{summary}");
    assert!(
        Config::from_sources(None, &env(&[]))
            .unwrap()
            .redis_sentinel()
            .is_none()
    );

    let refused = |pairs: &[(&str, &str)], name: &str, says: &str| {
        let err = Config::from_sources(None, &env(pairs))
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(says), "{err}");
    };
    let sentinels = ("HMDP_REDIS_SENTINELS", "127.0.0.1:26379");
    let master = ("HMDP_REDIS_SENTINEL_MASTER", "mymaster");
    refused(
        &[
            sentinels,
            master,
            ("HMDP_REDIS_URL", "redis://127.0.0.1:6379"),
        ],
        "HMDP_REDIS_SENTINELS",
        "HMDP_REDIS_URL",
    );
    refused(&[sentinels], "HMDP_REDIS_SENTINEL_MASTER", "must be set");
    refused(
        &[master],
        "HMDP_REDIS_SENTINEL_MASTER",
        "only with HMDP_REDIS_SENTINELS",
    );
    refused(
        &[("HMDP_REDIS_PASSWORD", "x")],
        "HMDP_REDIS_PASSWORD",
        "put the password in the URL",
    );
    refused(
        &[sentinels, master, ("HMDP_REDIS_MANAGED", "always")],
        "HMDP_REDIS_MANAGED",
        "HMDP_REDIS_SENTINELS",
    );
    refused(
        &[("HMDP_REDIS_SENTINELS", "sentinel-a")],
        "HMDP_REDIS_SENTINELS",
        "host:port",
    );
}

#[test]
fn sentinels_off_loopback_need_their_password() {
    let on = |sentinels: &str, password: Option<&str>| {
        let mut pairs = vec![
            ("HMDP_REDIS_SENTINELS", sentinels),
            ("HMDP_REDIS_SENTINEL_MASTER", "mymaster"),
        ];
        pairs.extend(password.map(|p| ("HMDP_REDIS_SENTINEL_PASSWORD", p)));
        Config::from_sources(None, &env(&pairs))
    };
    for local in [
        "127.0.0.1:26379,127.0.0.2:26380",
        "[::1]:26379,localhost:26380",
    ] {
        assert!(on(local, None).is_ok(), "{local}");
    }
    for remote in [
        "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379",
        "127.0.0.1:26379,sentinel-b:26379",
        "127.0.0.1:26379,[fd00::1]:26379",
        "0.0.0.0:26379",
    ] {
        let err = on(remote, None).unwrap_err().to_string();
        assert!(
            err.contains("HMDP_REDIS_SENTINEL_PASSWORD") && err.contains("loopback"),
            "{remote}: {err}"
        );
        assert!(on(remote, Some("s3cret")).is_ok(), "{remote}");
    }
}

#[test]
fn trusted_proxies_are_cidrs_or_addresses() {
    let c = Config::from_sources(
        None,
        &env(&[
            ("HMDP_TRUSTED_PROXIES", "127.0.0.1, 10.1.2.3/8 fd00::/8"),
            ("HMDP_SMS", "log"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.trusted_proxies.to_string(),
        "127.0.0.1/32,10.0.0.0/8,fd00::/8"
    );
    assert!(
        c.redacted_summary()
            .contains("trusted_proxies=127.0.0.1/32,10.0.0.0/8,fd00::/8 ")
    );
    for (ip, trusted) in [
        ("127.0.0.1", true),
        ("127.0.0.2", false),
        ("10.200.0.1", true),
        ("::ffff:10.0.0.1", true),
        ("fd12::1", true),
        ("2001:db8::1", false),
    ] {
        assert_eq!(
            c.trusted_proxies.contains(ip.parse().unwrap()),
            trusted,
            "{ip}"
        );
    }
    let err =
        Config::from_sources(None, &env(&[("HMDP_TRUSTED_PROXIES", "10.0.0.0/33")])).unwrap_err();
    assert!(err.to_string().contains("HMDP_TRUSTED_PROXIES"), "{err}");
    assert!(err.to_string().contains("10.0.0.0/33"), "{err}");
}

#[test]
fn the_data_dir_moves_the_default_database() {
    let c = Config::from_sources(None, &env(&[("HMDP_DATA_DIR", "/var/lib/hmdp")])).unwrap();
    assert_eq!(c.database_url, "sqlite:///var/lib/hmdp/hmdp.db");
}

#[test]
fn unknown_file_keys_are_rejected_with_the_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "lisen = \"x\"\n").unwrap();
    let err = Config::from_sources(Some(&file), &env(&[])).unwrap_err();
    assert!(err.to_string().contains("bad.toml"), "{err}");
}

#[test]
fn bad_values_name_the_variable() {
    let err = Config::from_sources(None, &env(&[("HMDP_LISTEN", "nope")])).unwrap_err();
    assert!(err.to_string().contains("HMDP_LISTEN"), "{err}");
    let err = Config::from_sources(None, &env(&[("HMDP_REDIS_PREFIX", "{x}")])).unwrap_err();
    assert!(err.to_string().contains("HMDP_REDIS_PREFIX"), "{err}");
    let err = Config::from_sources(None, &env(&[("HMDP_ADMIN_TOKEN", "short")])).unwrap_err();
    assert!(err.to_string().contains("HMDP_ADMIN_TOKEN"), "{err}");
}

#[test]
fn secrets_never_show_in_debug_output_or_the_summary() {
    let c = Config::from_sources(
        None,
        &env(&[
            ("HMDP_ADMIN_TOKEN", "super-secret-admin-token"),
            ("HMDP_DATABASE_URL", "mysql://root:hunter2@db:3306/hmdp"),
            ("HMDP_SMS", "http"),
            ("HMDP_SMS_URL", "https://relay:sesame@sms.example/send"),
            ("HMDP_SMS_SECRET", "Bearer gateway-key-42"),
        ]),
    )
    .unwrap();
    let shown = format!("{c:?} {}", c.redacted_summary());
    assert!(!shown.contains("super-secret-admin-token"));
    assert!(!shown.contains("hunter2"));
    assert!(shown.contains("mysql://root:***@db:3306/hmdp"));
    assert!(
        !shown.contains("gateway-key-42") && !shown.contains("sesame"),
        "{shown}"
    );
    assert!(shown.contains("sms_secret=*** "), "{shown}");
}

#[test]
fn behind_trusted_proxies_the_sms_setting_must_be_given() {
    let proxied = ("HMDP_TRUSTED_PROXIES", "127.0.0.1/32");
    // The deploy shape: loopback listen address, nginx in front.
    for listen in ["127.0.0.1:8081", "0.0.0.0:8081"] {
        let err = Config::from_sources(None, &env(&[proxied, ("HMDP_LISTEN", listen)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HMDP_SMS") && err.contains("HMDP_TRUSTED_PROXIES"),
            "{err}"
        );
    }
    for mode in [SmsMode::Log, SmsMode::Http] {
        let mut given = vec![
            proxied,
            (
                "HMDP_SMS",
                if mode == SmsMode::Log { "log" } else { "http" },
            ),
        ];
        if mode == SmsMode::Http {
            given.extend([
                ("HMDP_SMS_URL", "https://sms.example/send"),
                ("HMDP_SMS_SECRET", "k"),
            ]);
        }
        let c = Config::from_sources(None, &env(&given)).unwrap();
        assert_eq!(c.sms.mode, Some(mode));
    }
    // Without proxies a loopback service may still leave it unset (a developer's machine).
    assert!(Config::from_sources(None, &env(&[("HMDP_LISTEN", "127.0.0.1:8081")])).is_ok());
}

#[test]
fn the_sms_gateway_needs_a_url_and_a_secret_and_must_fit_in_a_request() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.sms.mode, None);
    assert!(
        c.redacted_summary()
            .contains("sms=(log on loopback without proxies, else required)")
    );
    let c = Config::from_sources(None, &env(&[("HMDP_SMS", "LOG")])).unwrap();
    assert_eq!(c.sms.mode, Some(SmsMode::Log));

    let gateway = [
        ("HMDP_SMS", "http"),
        ("HMDP_SMS_URL", "https://sms.example/send"),
        ("HMDP_SMS_SECRET", "k"),
    ];
    let c = Config::from_sources(None, &env(&gateway)).unwrap();
    assert_eq!(c.sms.header, "authorization");
    assert_eq!(
        c.sms.worst_case(),
        Duration::from_millis(3 * 2000 + 200 + 400)
    );
    for (missing, name) in [(1, "HMDP_SMS_URL"), (2, "HMDP_SMS_SECRET")] {
        let mut given = gateway.to_vec();
        given.remove(missing);
        let err = Config::from_sources(None, &env(&given)).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
    for (bad, name) in [
        (("HMDP_SMS_URL", "ftp://x"), "HMDP_SMS_URL"),
        (("HMDP_SMS_HEADER", "not a header"), "HMDP_SMS_HEADER"),
        (("HMDP_SMS_RETRIES", "11"), "HMDP_SMS_RETRIES"),
        (("HMDP_SMS_TIMEOUT_MS", "4000"), "HMDP_SMS_TIMEOUT_MS"),
        (("HMDP_SMS", "carrier-pigeon"), "HMDP_SMS"),
    ] {
        let mut given = gateway.to_vec();
        given.push(bad);
        let err = Config::from_sources(None, &env(&given)).unwrap_err();
        assert!(err.to_string().contains(name), "{bad:?}: {err}");
    }
    // Three tries of 4 s fit in a request of 15 s.
    let mut given = gateway.to_vec();
    given.extend([
        ("HMDP_SMS_TIMEOUT_MS", "4000"),
        ("HMDP_REQUEST_TIMEOUT_MS", "15000"),
    ]);
    assert!(Config::from_sources(None, &env(&given)).is_ok());
}

#[test]
fn the_metrics_listener_is_off_unless_set() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.metrics_listen, None);
    assert!(c.redacted_summary().contains("metrics_listen=(off)"));
    let c = Config::from_sources(None, &env(&[("HMDP_METRICS_LISTEN", "10.0.0.5:9464")])).unwrap();
    assert_eq!(c.metrics_listen, Some("10.0.0.5:9464".parse().unwrap()));
}

#[test]
fn passwords_with_commas_and_query_strings_are_hidden() {
    for (url, shown) in [
        ("redis://:p,w@a:1", "redis://:***@a:1"),
        (
            "redis://:p,w@a:1,redis://u:x,redis:y@b:2",
            "redis://:***@a:1,redis://u:***@b:2",
        ),
        (
            "mysql://root:p@ss/w,rd@db:3306/hmdp",
            "mysql://root:***@db:3306/hmdp",
        ),
        (
            "https://sms.example/send?key=k3y&to=a",
            "https://sms.example/send?***",
        ),
        ("https://sms.example/send?key=k3y&to=a@b", "https://***"),
        ("mysql://root:ab?cd@db/hmdp", "mysql://***"),
        ("mysql://root:ab#cd@db/hmdp", "mysql://***"),
        (
            "redis://:a@h:1?k=v,redis://:b@h:2",
            "redis://:***@h:1?***,redis://:***@h:2",
        ),
        (
            "https://sms.example/send#k3y",
            "https://sms.example/send#***",
        ),
        (
            "https://k3y@sms.example/send",
            "https://***@sms.example/send",
        ),
        (
            "https://:k3y@sms.example/send",
            "https://:***@sms.example/send",
        ),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
    let c = Config::from_sources(
        None,
        &env(&[
            ("HMDP_SMS", "http"),
            (
                "HMDP_SMS_URL",
                "https://sms.example/send?apikey=gateway-key-42",
            ),
            ("HMDP_SMS_SECRET", "s"),
            ("HMDP_REDIS_URL", "redis://:hunter,2@r:6379"),
            ("HMDP_DATABASE_URL", "mysql://root:a,b@db:3306/hmdp"),
        ]),
    )
    .unwrap();
    let shown = format!("{c:?} {}", c.redacted_summary());
    for secret in ["gateway-key-42", "hunter", ",2@", "a,b"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        shown.contains("sms_url=https://sms.example/send?*** "),
        "{shown}"
    );
}

#[test]
fn urls_without_passwords_are_left_alone() {
    assert_eq!(
        redact_url("redis://127.0.0.1:6379"),
        "redis://127.0.0.1:6379"
    );
    assert_eq!(
        redact_url("redis://:pw@a:1,redis://:pw@b:2"),
        "redis://:***@a:1,redis://:***@b:2"
    );
}

#[test]
fn the_documented_table_is_the_declared_one() {
    let doc = include_str!("../../../../docs/configuration.md");
    let start = doc
        .find("| variable | default | meaning |")
        .expect("docs/configuration.md has a configuration table");
    let end = doc[start..]
        .find("\n\n")
        .map_or(doc.len(), |i| start + i + 1);
    let generated = Config::markdown_table();
    assert!(
        doc[start..end] == generated,
        "docs/configuration.md's configuration table differs from the settings declared in \
         config/mod.rs; the declared one is:\n{generated}"
    );
}

#[test]
fn the_summary_shows_every_setting_in_file_keys_and_units() {
    let c = Config::from_sources(None, &env(&[("HMDP_REDIS_URL", "redis://:pw@r:6379")])).unwrap();
    let summary = c.redacted_summary();
    let keys: Vec<&str> = summary
        .split(' ')
        .filter_map(|part| part.split_once('=').map(|(k, _)| k))
        .filter(|k| !k.is_empty() && !k.contains(['(', ')']))
        .collect();
    let table = Config::markdown_table();
    assert_eq!(keys.len(), table.lines().count() - 2, "{summary}");
    for (key, row) in keys.iter().zip(table.lines().skip(2)) {
        let var = format!("`HMDP_{}`", key.to_ascii_uppercase());
        assert!(row.starts_with(&format!("| {var} |")), "{key} vs {row}");
    }
    for shown in [
        "listen=127.0.0.1:8081 ",
        "redis_url=redis://:***@r:6379 ",
        "redis_prefix=\"\" ",
        "admin_token=(generated) ",
        "session_ttl_secs=1800 ",
        "cache_l1_ttl_ms=1000 ",
        "shop_cache=mutex ",
        "worker_claim_idle_ms=30000 ",
    ] {
        assert!(summary.contains(shown), "{shown} in {summary}");
    }
}

#[test]
fn every_setting_reads_back_what_the_summary_shows() {
    // Each shown value, written to a file under its key, gives the same configuration.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hmdp.toml");
    let defaults = Config::from_sources(None, &env(&[])).unwrap();
    let toml: String = defaults
        .all_rows()
        .into_iter()
        .filter_map(|row| Some(format!("{} = {:?}\n", file_key(row.var), row.value?)))
        .collect();
    std::fs::write(&file, toml).unwrap();
    let read = Config::from_sources(Some(&file), &env(&[])).unwrap();
    assert_eq!(read.redacted_summary(), defaults.redacted_summary());
}

#[test]
fn empty_variables_are_unset_except_an_empty_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hmdp.toml");
    std::fs::write(
        &file,
        "listen = \"0.0.0.0:9000\"\nredis_prefix = \"file:\"\n",
    )
    .unwrap();
    let c = Config::from_sources(
        Some(&file),
        &env(&[("HMDP_LISTEN", " "), ("HMDP_REDIS_PREFIX", "")]),
    )
    .unwrap();
    assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(c.redis_prefix, "");
}

#[test]
fn names_are_case_insensitive_and_numbers_may_be_padded() {
    let c = Config::from_sources(
        None,
        &env(&[
            ("HMDP_SECKILL_MODE", "SYNC"),
            ("HMDP_ID_MODE", "Compatible"),
            ("HMDP_SECKILL_SHARDS", " 4 "),
            ("HMDP_CACHE_JITTER", "0.25"),
        ]),
    )
    .unwrap();
    assert_eq!(c.seckill.mode, SeckillMode::Sync);
    assert_eq!(c.seckill.id_mode, IdMode::Compatible);
    assert_eq!(c.seckill.shards, 4);
    assert_eq!(c.cache.jitter, 0.25);
    let err = Config::from_sources(None, &env(&[("HMDP_SECKILL_MODE", "later")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value for HMDP_SECKILL_MODE: \"later\": expected one of: async, sync"
    );
}

#[test]
fn the_log_filter_falls_back_to_rust_log_below_the_file() {
    let c = Config::from_sources(None, &env(&[("RUST_LOG", "debug")])).unwrap();
    assert_eq!(c.log_filter, "debug");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hmdp.toml");
    std::fs::write(&file, "log = \"warn\"\n").unwrap();
    let c = Config::from_sources(Some(&file), &env(&[("RUST_LOG", "debug")])).unwrap();
    assert_eq!(c.log_filter, "warn");
    let c = Config::from_sources(
        Some(&file),
        &env(&[("RUST_LOG", "debug"), ("HMDP_LOG", "error")]),
    )
    .unwrap();
    assert_eq!(c.log_filter, "error");
}

#[test]
fn file_values_are_checked_and_bad_ones_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("odd.toml");
    std::fs::write(&file, "seckill_shards = 0\n").unwrap();
    let err = Config::from_sources(Some(&file), &env(&[])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value for HMDP_SECKILL_SHARDS: must be between 1 and 1024"
    );
    std::fs::write(&file, "session_ttl_secs = \"long\"\n").unwrap();
    let err = Config::from_sources(Some(&file), &env(&[])).unwrap_err();
    assert!(err.to_string().contains("odd.toml"), "{err}");
    assert!(err.to_string().contains("session_ttl_secs"), "{err}");
    let err = Config::from_sources(Some(&dir.path().join("missing.toml")), &env(&[])).unwrap_err();
    assert!(err.to_string().contains("missing.toml"), "{err}");
}

#[test]
fn an_unknown_hmdp_variable_is_an_error_naming_the_nearest_setting() {
    let err = Config::from_sources(None, &env(&[("HMDP_REDIS_SENTINEL", "a:26379")])).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("unknown environment variable HMDP_REDIS_SENTINEL"),
        "{text}"
    );
    let err = Config::from_sources(None, &env(&[("HMDP_SECKIL_MODE", "sync")])).unwrap_err();
    assert!(
        err.to_string().contains("did you mean HMDP_SECKILL_MODE?"),
        "{err}"
    );
    // The tools' own variables, and anything outside the prefix, are not the service's.
    let tools = [
        ("HMDP_TEST_REDIS_URL", "redis://x"),
        ("HMDP_FUZZ_SEED", "1"),
        ("HMDP_LAB_DATABASE_URL", "sqlite://x"),
        ("HMDP_BENCH_ANYTHING", "1"),
        ("HMDP_ORIGINAL_SQL", "/x.sql"),
        ("HMDPX_NOT_OURS", "1"),
        ("PATH", "/bin"),
    ];
    assert!(Config::from_sources(None, &env(&tools)).is_ok());
}
