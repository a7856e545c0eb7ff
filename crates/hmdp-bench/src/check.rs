//! The flash sale's invariants, checked after the order worker drained: a fast run that
//! oversold or lost an order is a failed run, whatever its req/s. Pure logic over what the
//! scenario read from the database and Redis, so it is unit tested without servers.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

/// One invariant and whether it held.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check {
        name: name.to_owned(),
        ok,
        detail,
    }
}

/// What a flash-sale run left behind.
#[derive(Debug, Clone, Default)]
pub struct SaleState {
    /// The voucher's initial stock.
    pub stock: i64,
    /// Users who took part (every one of them tried at least once).
    pub users: i64,
    /// `(order id, user id)` of every order of the voucher in the database.
    pub db_orders: Vec<(i64, i64)>,
    /// `tb_seckill_voucher.stock` after the run.
    pub db_stock: i64,
    /// The Redis hash's `stock` after the run; `None` where Redis does not decide (sync mode).
    pub redis_stock: Option<i64>,
    /// `(order id, user id)` of every successful answer the clients got.
    pub returned: Vec<(i64, i64)>,
}

/// Checks every invariant; all must hold.
pub fn check_sale(s: &SaleState) -> Vec<Check> {
    let mut out = Vec::new();
    let expected = s.stock.min(s.users);
    let n = s.db_orders.len() as i64;
    out.push(check(
        "orders = min(stock, users)",
        n == expected,
        format!(
            "{n} orders in the database, stock {}, users {}",
            s.stock, s.users
        ),
    ));

    let mut per_user: HashMap<i64, u32> = HashMap::new();
    for (_, u) in &s.db_orders {
        *per_user.entry(*u).or_default() += 1;
    }
    let doubles = per_user.values().filter(|c| **c > 1).count();
    out.push(check(
        "one order per user",
        doubles == 0,
        format!("{doubles} users with more than one order"),
    ));

    out.push(check(
        "database stock = initial stock − orders",
        s.db_stock == s.stock - n && s.db_stock >= 0,
        format!(
            "tb_seckill_voucher.stock = {}, expected {} − {n} = {}",
            s.db_stock,
            s.stock,
            s.stock - n
        ),
    ));

    match s.redis_stock {
        Some(r) => out.push(check(
            "Redis stock = database stock",
            r == s.db_stock,
            format!("Redis {r}, database {}", s.db_stock),
        )),
        None => out.push(check(
            "Redis stock = database stock",
            true,
            "not applicable: in sync mode the database decides".into(),
        )),
    }

    let db: HashMap<i64, i64> = s.db_orders.iter().copied().collect();
    let missing = s
        .returned
        .iter()
        .filter(|(id, _)| !db.contains_key(id))
        .count();
    let wrong_owner = s
        .returned
        .iter()
        .filter(|(id, u)| db.get(id).is_some_and(|owner| owner != u))
        .count();
    out.push(check(
        "every returned order id persisted (to its buyer)",
        missing == 0 && wrong_owner == 0,
        format!(
            "{} ids returned, {missing} not in the database, {wrong_owner} owned by another user",
            s.returned.len()
        ),
    ));

    let returned: HashSet<i64> = s.returned.iter().map(|(id, _)| *id).collect();
    let unannounced = s
        .db_orders
        .iter()
        .filter(|(id, _)| !returned.contains(id))
        .count();
    out.push(check(
        "every persisted order was answered to a client",
        unannounced == 0 && returned.len() == s.returned.len(),
        format!(
            "{unannounced} orders nobody was told about, {} ids returned twice",
            s.returned.len() - returned.len()
        ),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> SaleState {
        SaleState {
            stock: 3,
            users: 5,
            db_orders: vec![(10, 1), (11, 2), (12, 3)],
            db_stock: 0,
            redis_stock: Some(0),
            returned: vec![(10, 1), (11, 2), (12, 3)],
        }
    }

    fn failed(s: &SaleState) -> Vec<String> {
        check_sale(s)
            .into_iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn a_clean_sale_passes() {
        assert!(failed(&good()).is_empty());
        let mut few_users = good();
        few_users.stock = 10;
        few_users.users = 3;
        few_users.db_stock = 7;
        few_users.redis_stock = Some(7);
        assert!(failed(&few_users).is_empty());
        let mut sync = good();
        sync.redis_stock = None;
        assert!(failed(&sync).is_empty());
    }

    #[test]
    fn oversold_and_doubles_fail() {
        let mut s = good();
        s.db_orders.push((13, 3));
        s.returned.push((13, 3));
        s.db_stock = -1;
        s.redis_stock = Some(-1);
        let f = failed(&s);
        assert!(f.contains(&"orders = min(stock, users)".to_owned()));
        assert!(f.contains(&"one order per user".to_owned()));
        assert!(f.contains(&"database stock = initial stock − orders".to_owned()));
    }

    #[test]
    fn stock_disagreement_fails() {
        let mut s = good();
        s.redis_stock = Some(1);
        assert_eq!(failed(&s), vec!["Redis stock = database stock".to_owned()]);
    }

    #[test]
    fn lost_and_phantom_orders_fail() {
        let mut lost = good();
        lost.returned.push((99, 4));
        assert_eq!(
            failed(&lost),
            vec!["every returned order id persisted (to its buyer)".to_owned()]
        );
        let mut phantom = good();
        phantom.returned.pop();
        assert_eq!(
            failed(&phantom),
            vec!["every persisted order was answered to a client".to_owned()]
        );
        let mut wrong_owner = good();
        wrong_owner.returned[0].1 = 5;
        assert_eq!(
            failed(&wrong_owner),
            vec!["every returned order id persisted (to its buyer)".to_owned()]
        );
    }
}
