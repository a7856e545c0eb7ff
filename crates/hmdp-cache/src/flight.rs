//! Single-flight: concurrent callers for one key share one load; and claims: at most one
//! background job per key, without parking the callers that find one running.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::{Arc, Mutex},
};

use tokio::sync::watch;

use crate::Result;

type Slot = watch::Receiver<Option<Result<Option<Arc<str>>>>>;

/// Groups concurrent calls by key: the first caller (the leader) runs the work, the others wait
/// for its result. If the leader is cancelled, a waiter takes over.
#[derive(Default)]
pub(crate) struct Flights {
    /// A `std` mutex: it is held only to look up or insert a map entry, never across an await.
    inflight: Mutex<HashMap<String, Slot>>,
}

enum Role {
    Leader(watch::Sender<Option<Result<Option<Arc<str>>>>>),
    Follower(Slot),
}

impl Flights {
    pub(crate) async fn run<F, Fut>(&self, key: &str, work: F) -> Result<Option<Arc<str>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<Arc<str>>>>,
    {
        let mut work = Some(work);
        loop {
            let role = {
                let mut map = self.inflight.lock().expect("flight map poisoned");
                match map.get(key) {
                    Some(rx) => Role::Follower(rx.clone()),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        map.insert(key.to_owned(), rx);
                        Role::Leader(tx)
                    }
                }
            };
            match role {
                Role::Leader(tx) => {
                    // Removes the entry even if this future is dropped mid-flight.
                    let _cleanup = Cleanup { flights: self, key };
                    let work = work.take().expect("a caller leads at most once");
                    let result = work().await;
                    let _ = tx.send(Some(result.clone()));
                    return result;
                }
                Role::Follower(mut rx) => match rx.wait_for(Option::is_some).await {
                    Ok(v) => return v.clone().expect("waited for Some"),
                    // The leader was cancelled before finishing: try to lead.
                    Err(_) => continue,
                },
            }
        }
    }
}

/// Keys with a background job running in this process. Claiming is synchronous (no await),
/// so of many callers that find the same stale entry at once exactly one gets the claim and
/// the others go on without spawning or waiting for anything.
#[derive(Default)]
pub(crate) struct Claims {
    /// A `std` mutex: held only to insert or remove a key.
    keys: Arc<Mutex<HashSet<String>>>,
}

/// A claim on a key; the key is free again when it is dropped.
pub(crate) struct Claim {
    keys: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Claims {
    /// The claim on `key`, or `None` if someone in this process holds it.
    pub(crate) fn claim(&self, key: &str) -> Option<Claim> {
        let mut keys = self.keys.lock().expect("claims poisoned");
        keys.insert(key.to_owned()).then(|| Claim {
            keys: self.keys.clone(),
            key: key.to_owned(),
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.remove(&self.key);
        }
    }
}

struct Cleanup<'a> {
    flights: &'a Flights,
    key: &'a str,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.flights.inflight.lock() {
            map.remove(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    use super::*;

    #[tokio::test]
    async fn concurrent_callers_share_one_run() {
        let flights = Arc::new(Flights::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let (flights, runs) = (flights.clone(), runs.clone());
            tasks.push(tokio::spawn(async move {
                flights
                    .run("k", || async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(Some(Arc::from("v")))
                    })
                    .await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap().as_deref(), Some("v"));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(flights.inflight.lock().unwrap().is_empty());
    }

    #[test]
    fn a_key_is_claimed_once_until_released() {
        let claims = Claims::default();
        let first = claims.claim("k").expect("free");
        assert!(claims.claim("k").is_none(), "held");
        assert!(claims.claim("other").is_some(), "per key");
        drop(first);
        assert!(claims.claim("k").is_some(), "free again");
    }

    #[tokio::test]
    async fn a_cancelled_leader_hands_over() {
        let flights = Arc::new(Flights::default());
        let f2 = flights.clone();
        let leader = tokio::spawn(async move {
            f2.run("k", || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(None)
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let f3 = flights.clone();
        let follower = tokio::spawn(async move {
            f3.run("k", || async { Ok(Some(Arc::from("second"))) })
                .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        leader.abort();
        let got = tokio::time::timeout(Duration::from_secs(2), follower)
            .await
            .expect("the follower took over")
            .unwrap()
            .unwrap();
        assert_eq!(got.as_deref(), Some("second"));
    }
}
