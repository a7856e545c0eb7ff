//! 附近商户: the nearest shops of a type, a page at a time. Without an index of places, the
//! only way to answer is to read every shop of the type out of `tb_shop`, measure each one's
//! distance and sort: every page costs the whole table. The course keeps a GEO set per type
//! (`GEOADD shop:geo:{type}`) and asks it (`GEOSEARCH … BYRADIUS … ASC COUNT <end>`), skipping
//! the earlier pages' shops, then loads only the page's shops from the database.
//!
//! Both versions must give the right page, the shops in order of distance: the shops stand on
//! a spiral around the searcher, each a few metres farther than the one before, so the right
//! order is known without trusting either version.

use std::f64::consts::PI;

use super::{Experiment, Text, version};
use crate::{Lab, Outcome};

/// Shops of the type, all within reach.
const SHOPS: i64 = 2000;
/// The page size of the original's shop list.
const PAGE: usize = 5;
/// Pages read, from the first.
const PAGES: usize = 3;
/// How far to look.
const RADIUS_M: f64 = 10_000.0;
/// Where the searcher stands: 解放碑, Chongqing, where the original's shops are.
const HERE: (f64, f64) = (106.577, 29.557);
/// The i-th shop is `FIRST_M + i × STEP_M` metres away.
const FIRST_M: f64 = 20.0;
const STEP_M: f64 = 2.5;
const EARTH_M: f64 = 6_372_797.560_856;

pub static EXPERIMENT: Experiment = Experiment {
    name: "nearby-shops",
    chapter: "附近商户",
    invariant: "a page of the nearest shops is right and reads from the database only the shops on it",
    invariant_zh: "附近商户的每一页都正确，而且只从数据库读这一页上的商户",
    lesson: Text {
        zh: "按距离查附近要有地理索引：GEOSEARCH 在 Redis 里按距离排好，数据库只按 id 取这一页。",
        en: "Nearest-first needs an index of places: GEOSEARCH orders by distance in Redis, and the database loads only the page's shops by id.",
    },
    versions: &[
        version!(
            "scan-table",
            false,
            "no GEO: SELECT every shop of the type, compute each distance, sort, cut the page",
            "不用 GEO：SELECT 出该类型的全部商户，逐个算距离、排序、截取一页",
            scan_table
        ),
        version!(
            "geosearch",
            true,
            "GEOSEARCH shop:geo:{type} BYRADIUS … ASC COUNT <end>, skip earlier pages, load the page by id",
            "GEOSEARCH shop:geo:{type} BYRADIUS … ASC COUNT <end>，跳过前几页，按 id 只取这一页",
            geosearch
        ),
    ],
};

async fn scan_table(lab: &Lab) -> anyhow::Result<Outcome> {
    pages(lab, false).await
}

async fn geosearch(lab: &Lab) -> anyhow::Result<Outcome> {
    pages(lab, true).await
}

/// The place `metres` from [`HERE`] at `bearing` radians (north = 0, clockwise).
fn place(metres: f64, bearing: f64) -> (f64, f64) {
    let (lon, lat) = (HERE.0.to_radians(), HERE.1.to_radians());
    let d = metres / EARTH_M;
    let lat2 = (lat.sin() * d.cos() + lat.cos() * d.sin() * bearing.cos()).asin();
    let lon2 = lon + (bearing.sin() * d.sin() * lat.cos()).atan2(d.cos() - lat.sin() * lat2.sin());
    (lon2.to_degrees(), lat2.to_degrees())
}

/// Metres between two places (haversine, Redis's own earth radius).
fn distance(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (la1, la2) = (a.1.to_radians(), b.1.to_radians());
    let dlat = la2 - la1;
    let dlon = (b.0 - a.0).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + la1.cos() * la2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_M * h.sqrt().asin()
}

/// A new shop type's [`SHOPS`] shops on the spiral, in `tb_shop` and in its GEO set: the type,
/// the GEO key, the shop ids nearest first.
async fn new_street(lab: &Lab, geo_key: &str) -> anyhow::Result<(i64, Vec<i64>)> {
    let first: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM tb_shop")
        .fetch_one(&lab.db)
        .await?;
    let type_id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(type_id), 0) + 1 FROM tb_shop")
        .fetch_one(&lab.db)
        .await?;
    let ids: Vec<i64> = (first..first + SHOPS).collect();
    let mut redis = lab.redis.clone();
    for chunk in ids.chunks(200) {
        let rows = vec!["(?, ?, ?, ?, ?)"; chunk.len()].join(", ");
        let sql = format!("INSERT INTO tb_shop (id, name, type_id, x, y) VALUES {rows}");
        let mut insert = sqlx::query(&sql);
        let mut geoadd = redis::cmd("GEOADD");
        geoadd.arg(geo_key);
        for id in chunk {
            let i = (id - first) as f64;
            // A golden-angle spiral: neighbours in distance are far apart in direction.
            let (x, y) = place(FIRST_M + i * STEP_M, i * PI * (3.0 - 5f64.sqrt()));
            insert = insert
                .bind(*id)
                .bind(format!("lab-{id}"))
                .bind(type_id)
                .bind(x)
                .bind(y);
            geoadd.arg(x).arg(y).arg(*id);
        }
        insert.execute(&lab.db).await?;
        geoadd.query_async::<()>(&mut redis).await?;
    }
    Ok((type_id, ids))
}

/// Reads [`PAGES`] pages of the nearest shops the version's way; counts the rows read and
/// checks each page against the shops' known order.
async fn pages(lab: &Lab, geo: bool) -> anyhow::Result<Outcome> {
    let geo_key = lab.key(&format!("shop:geo:{}", uuid::Uuid::new_v4().simple()));
    let (type_id, nearest) = new_street(lab, &geo_key).await?;
    let mut redis = lab.redis.clone();
    let mut rows_read = 0_usize;
    let mut right_pages = 0;
    let started = std::time::Instant::now();
    for page in 0..PAGES {
        let (from, end) = (page * PAGE, page * PAGE + PAGE);
        let got: Vec<i64> = if geo {
            let found: Vec<String> = redis::cmd("GEOSEARCH")
                .arg(&geo_key)
                .arg("FROMLONLAT")
                .arg(HERE.0)
                .arg(HERE.1)
                .arg("BYRADIUS")
                .arg(RADIUS_M)
                .arg("m")
                .arg("ASC")
                .arg("COUNT")
                .arg(end)
                .query_async(&mut redis)
                .await?;
            let ids: Vec<i64> = found[from.min(found.len())..]
                .iter()
                .map(|s| s.parse())
                .collect::<Result<_, _>>()?;
            let marks = vec!["?"; ids.len()].join(", ");
            let sql = format!("SELECT id FROM tb_shop WHERE id IN ({marks})");
            let mut q = sqlx::query_scalar::<_, i64>(&sql);
            for id in &ids {
                q = q.bind(id);
            }
            rows_read += q.fetch_all(&lab.db).await?.len();
            ids
        } else {
            let all: Vec<(i64, f64, f64)> =
                sqlx::query_as("SELECT id, x, y FROM tb_shop WHERE type_id = ?")
                    .bind(type_id)
                    .fetch_all(&lab.db)
                    .await?;
            rows_read += all.len();
            let mut near: Vec<(f64, i64)> = all
                .into_iter()
                .map(|(id, x, y)| (distance(HERE, (x, y)), id))
                .filter(|(d, _)| *d <= RADIUS_M)
                .collect();
            near.sort_by(|a, b| a.0.total_cmp(&b.0));
            near.iter()
                .skip(from)
                .take(PAGE)
                .map(|(_, id)| *id)
                .collect()
        };
        if got == nearest[from..end] {
            right_pages += 1;
        }
    }
    let rows_per_page = rows_read / PAGES;
    Ok(Outcome::new(right_pages == PAGES && rows_per_page <= PAGE)
        .metric("shops", SHOPS)
        .metric("page_size", PAGE as u64)
        .metric("pages", PAGES as u64)
        .metric("right_pages", right_pages as u64)
        .metric("db_rows_read", rows_read as u64)
        .metric("db_rows_per_page", rows_per_page as u64)
        .metric("elapsed_ms", started.elapsed().as_millis() as u64))
}
