//! Hiding credentials in URLs before they are shown (`hmdp config`, the banner, error messages).

use std::sync::LazyLock;

/// Hides what a URL may carry as a credential: the password of every `scheme://user:password@host`
/// (a user name alone, which some gateways take as their key, too), and the query and fragment,
/// where gateways take API keys. `HMDP_REDIS_URL` may list several URLs, separated by `,` before
/// a scheme; any other `,` may be part of a password (RFC 3986 allows it there unencoded).
/// The user information ends at the last `@`, so an unencoded `@`, `/` or `,` in a password is
/// hidden too. When a `?` or `#` comes before that `@`, nothing tells a password containing one
/// (`root:a?b@db`) from a query containing an `@` (`/send?to=a@b`): everything after the scheme
/// is hidden then.
pub fn redact_url(url: &str) -> String {
    static NEXT_URL: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r",[A-Za-z][A-Za-z0-9+.-]*://").expect("a valid pattern")
    });
    let mut out = String::with_capacity(url.len());
    let mut start = 0;
    let ends = NEXT_URL.find_iter(url).map(|m| m.start());
    for end in ends.chain([url.len()]) {
        if start > 0 {
            out.push(',');
        }
        out.push_str(&redact_one_url(&url[start..end]));
        start = end + 1;
    }
    out
}

/// One URL with its password (or a user name alone) and its query or fragment replaced by `***`.
fn redact_one_url(url: &str) -> String {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let query = url[authority..].find(['?', '#']).map(|i| authority + i);
    let at = url[authority..].rfind('@').map(|i| authority + i);
    let hide_query = |rest: &str| match rest.find(['?', '#']) {
        Some(q) => format!("{}{}***", &rest[..q], &rest[q..q + 1]),
        None => rest.to_owned(),
    };
    match (at, query) {
        (Some(at), Some(q)) if q < at => format!("{}***", &url[..authority]),
        (Some(at), _) => {
            let shown = match url[authority..at].split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None if at == authority => String::new(),
                None => "***".to_owned(),
            };
            format!("{}{shown}{}", &url[..authority], hide_query(&url[at..]))
        }
        (None, _) => hide_query(url),
    }
}
