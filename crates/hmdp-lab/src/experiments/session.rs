//! 短信登录: where a login lives. Two instances of the service behind a round-robin balancer,
//! and users who ask for a code, log in with it and then use the site. The course's first
//! version keeps the code and the user in the servlet session, in one instance's memory, so a
//! request that lands on the other instance finds neither; its second keeps them in Redis
//! (`login:code:{phone}`, and the user as a hash under `login:token:{token}`), which both
//! instances read.
//!
//! The two instances are two values in this process, each with a session map of its own, as
//! two JVMs would have. No database is involved: the user's id comes from the phone number.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use redis::AsyncCommands;

use super::{Experiment, Text, version};
use crate::{Lab, Outcome};

/// Users, one after the other.
const USERS: u64 = 20;
/// Requests each user makes once logged in.
const VISITS: u64 = 4;
/// The code's and the token's lifetimes, as in the course.
const CODE_TTL: Duration = Duration::from_secs(120);
const TOKEN_TTL: Duration = Duration::from_secs(30 * 60);
const INSTANCES: usize = 2;

pub static EXPERIMENT: Experiment = Experiment {
    name: "session",
    chapter: "短信登录",
    invariant: "a user who logged in stays logged in, whichever instance each request reaches",
    invariant_zh: "用户登录后，不论每个请求落到哪个实例，都一直保持登录",
    lesson: Text {
        zh: "登录状态要放在所有实例都读得到的地方：Redis 里的 token，而不是某个实例内存里的 session。",
        en: "Keep the login where every instance can read it: a token in Redis, not one instance's session.",
    },
    versions: &[
        version!(
            "in-process-session",
            false,
            "the code and the user in each instance's own session map (the servlet HttpSession)",
            "验证码和用户存在各实例自己的 session（Servlet 的 HttpSession）里",
            in_process_session
        ),
        version!(
            "redis-token",
            true,
            "the code under login:code:{phone}, the user as a hash under login:token:{uuid}, TTL refreshed",
            "验证码存 login:code:{phone}，用户以 hash 存 login:token:{uuid}，每次访问刷新 TTL",
            redis_token
        ),
    ],
};

async fn in_process_session(lab: &Lab) -> anyhow::Result<Outcome> {
    visits(lab, Store::Sessions).await
}

async fn redis_token(lab: &Lab) -> anyhow::Result<Outcome> {
    visits(lab, Store::Redis).await
}

#[derive(Clone, Copy, PartialEq)]
enum Store {
    Sessions,
    Redis,
}

/// What an in-process session holds.
#[derive(Default)]
struct Session {
    code: Option<(String, String)>,
    user: Option<i64>,
}

/// What the browser keeps between requests: the session cookie, or the token.
#[derive(Default)]
struct Client {
    session: Option<String>,
    token: Option<String>,
}

/// One instance of the service.
struct Instance<'a> {
    lab: &'a Lab,
    store: Store,
    sessions: Mutex<HashMap<String, Session>>,
}

impl Instance<'_> {
    /// The client's session on this instance: the one its cookie names if this instance has
    /// it, else a new one (and a new cookie), as a servlet container does.
    fn session<R>(&self, client: &mut Client, f: impl FnOnce(&mut Session) -> R) -> R {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let id = match &client.session {
            Some(id) if sessions.contains_key(id) => id.clone(),
            _ => {
                let id = uuid::Uuid::new_v4().simple().to_string();
                sessions.insert(id.clone(), Session::default());
                client.session = Some(id.clone());
                id
            }
        };
        f(sessions
            .get_mut(&id)
            .expect("the session just found or made"))
    }

    /// `POST /user/code`: a new code for `phone`, kept, and "sent" (returned).
    async fn send_code(&self, client: &mut Client, phone: &str) -> anyhow::Result<String> {
        let code = format!("{:06}", rand::random::<u32>() % 1_000_000);
        match self.store {
            Store::Sessions => self.session(client, |s| {
                s.code = Some((phone.to_owned(), code.clone()));
            }),
            Store::Redis => {
                let _: () = self
                    .lab
                    .redis
                    .clone()
                    .set_ex(self.code_key(phone), &code, CODE_TTL.as_secs())
                    .await?;
            }
        }
        Ok(code)
    }

    /// `POST /user/login`: whether the code was accepted.
    async fn login(&self, client: &mut Client, phone: &str, code: &str) -> anyhow::Result<bool> {
        let user = phone.parse::<i64>()?;
        match self.store {
            Store::Sessions => Ok(self.session(client, |s| {
                let right = s
                    .code
                    .as_ref()
                    .is_some_and(|(p, c)| p.as_str() == phone && c.as_str() == code);
                if right {
                    s.user = Some(user);
                }
                right
            })),
            Store::Redis => {
                let mut conn = self.lab.redis.clone();
                let sent: Option<String> = conn.get(self.code_key(phone)).await?;
                if sent.as_deref() != Some(code) {
                    return Ok(false);
                }
                let token = uuid::Uuid::new_v4().simple().to_string();
                let key = self.token_key(&token);
                let _: () = conn
                    .hset_multiple(
                        &key,
                        &[
                            ("id", user.to_string()),
                            ("nickName", format!("user_{phone}")),
                        ],
                    )
                    .await?;
                let _: () = conn.expire(&key, TOKEN_TTL.as_secs() as i64).await?;
                client.token = Some(token);
                Ok(true)
            }
        }
    }

    /// `GET /user/me`: the logged-in user, if this instance knows one.
    async fn me(&self, client: &mut Client) -> anyhow::Result<Option<i64>> {
        match self.store {
            Store::Sessions => Ok(self.session(client, |s| s.user)),
            Store::Redis => {
                let Some(token) = client.token.clone() else {
                    return Ok(None);
                };
                let mut conn = self.lab.redis.clone();
                let key = self.token_key(&token);
                let id: Option<String> = conn.hget(&key, "id").await?;
                if id.is_some() {
                    // The refresh interceptor: every request slides the token's TTL.
                    let _: () = conn.expire(&key, TOKEN_TTL.as_secs() as i64).await?;
                }
                Ok(id.map(|id| id.parse()).transpose()?)
            }
        }
    }

    fn code_key(&self, phone: &str) -> String {
        self.lab.key(&format!("login:code:{phone}"))
    }

    fn token_key(&self, token: &str) -> String {
        self.lab.key(&format!("login:token:{token}"))
    }
}

/// `USERS` users, one after the other, each: ask for a code, log in with it, then `VISITS`
/// requests; every request to the next instance in turn.
async fn visits(lab: &Lab, store: Store) -> anyhow::Result<Outcome> {
    let instances: Vec<Instance> = (0..INSTANCES)
        .map(|_| Instance {
            lab,
            store,
            sessions: Mutex::default(),
        })
        .collect();
    let turn = AtomicUsize::new(0);
    let next = || &instances[turn.fetch_add(1, Ordering::Relaxed) % INSTANCES];
    let mut lost = 0u64;
    let mut refused = 0u64;
    for n in 0..USERS {
        let phone = format!("{}", 13_800_000_000u64 + n);
        let user = phone.parse::<i64>()?;
        let mut client = Client::default();
        let code = next().send_code(&mut client, &phone).await?;
        let mut kept = next().login(&mut client, &phone, &code).await?;
        if !kept {
            refused += 1;
        }
        for _ in 0..VISITS {
            let me = next().me(&mut client).await?;
            if me != Some(user) {
                refused += 1;
                kept = false;
            }
        }
        if !kept {
            lost += 1;
        }
    }
    Ok(Outcome::new(lost == 0)
        .metric("instances", INSTANCES as u64)
        .metric("users", USERS)
        .metric("requests", USERS * (2 + VISITS))
        .metric("refused_requests", refused)
        .metric("lost_logins", lost))
}
