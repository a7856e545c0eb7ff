//! The ten original front-end pages, replayed call for call against hmdp.
//!
//! The bar: "the original pages work unchanged, with no error toast". The pages are
//! not in this repository, so these tests replay what each page's script sends, the way its
//! `js/common.js` sends it: through `/api`, the token in the `authorization` header, query
//! params built by its serializer (falsy values dropped, the rest appended unencoded as
//! `?&k=v…`), the upload as a multipart `file`. Every answer must be HTTP 200 with
//! `success:true` (anything else is a toast or a redirect to the login page) and carry the
//! fields the page reads; every image the page then shows (`'/imgs/' + type.icon`, a note's
//! first photo, an avatar) must load. The one refusal on purpose is login2.html's password
//! login (see `login2_page`). The data is what a fresh database starts with (the demo
//! users 16600000001–5, their notes and follows; see `storage/seed.rs`) plus what the pages
//! create on the way. Another test reads notes from a database in the original's schema; the
//! last two load the type icons at the double-slash path `index.html` really requests
//! (`'/imgs/' + icon` = `/imgs//types/ms.png`), which hmdp routes with the slashes merged, as
//! the original's nginx does.

use std::collections::HashSet;

use chrono::NaiveDateTime;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, Row};

use crate::{
    both_backends,
    helpers::{
        Backend, Resp, SchemaDump, TestApp, TestDatabase, spawn_app, spawn_with_config, test_config,
    },
};

both_backends!(
    the_ten_original_pages_work_unchanged,
    a_note_with_an_uploaded_photo_shows_it_where_the_pages_look,
);

/// Demo users (`storage/seed.rs`): A follows B, C and D; B follows A and C; nobody but D
/// follows E.
const A: &str = "16600000001";
const B: &str = "16600000002";
const C: &str = "16600000003";
const E_NICK: &str = "健身小白";
const C_NICK: &str = "周末去哪儿";

/// The position `shop-list.html` always sends.
const PAGE_X: f64 = 120.149993;
const PAGE_Y: f64 = 30.334229;

// ---- the browser side: common.js ----

/// What a request carries besides its path and params.
enum Body {
    None,
    Json(Value),
    /// One file under the form field `file`, as `FormData.append("file", file)` sends it.
    File(Vec<u8>),
}

/// One browser tab on the original pages: its `sessionStorage.token` and the page it is on
/// (for the messages).
struct Tab<'a> {
    app: &'a TestApp,
    token: Option<String>,
    page: &'static str,
}

/// `common.js`'s `paramsSerializer`: `&k=v` for every truthy value, unencoded; axios appends
/// the result after `?`.
fn serialize(params: &[(&str, Value)]) -> String {
    let truthy = |v: &Value| match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    };
    let mut p = String::new();
    for (k, v) in params.iter().filter(|(_, v)| truthy(v)) {
        let v = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        p.push_str(&format!("&{k}={v}"));
    }
    if p.is_empty() { p } else { format!("?{p}") }
}

/// A browser's multipart body with one file part; the content type and the bytes.
fn form_data(file_name: &str, data: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----WebKitFormBoundaryhmdpPages0123";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
         filename=\"{file_name}\"\r\nContent-Type: image/jpeg\r\n\r\n"
    )
    .into_bytes();
    body.extend(data);
    body.extend(format!("\r\n--{boundary}--\r\n").into_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A small JPEG as a phone would upload it (start, a JFIF segment, a comment with `mark` so
/// the bytes are this photo's own, a 2×2 frame header, end).
fn photo(mark: &str) -> Vec<u8> {
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
    jpeg.extend(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
    let comment = format!("hmdp pages test {mark}");
    jpeg.extend([0xFF, 0xFE]);
    jpeg.extend(((comment.len() + 2) as u16).to_be_bytes());
    jpeg.extend(comment.as_bytes());
    jpeg.extend([
        0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x02, 0x00, 0x02, 0x01, 0x01, 0x11, 0x00,
    ]);
    jpeg.extend([0xFF, 0xD9]);
    jpeg
}

impl<'a> Tab<'a> {
    fn new(app: &'a TestApp, token: Option<&str>) -> Self {
        Tab {
            app,
            token: token.map(str::to_owned),
            page: "(no page)",
        }
    }

    /// `location.href = page`: same tab, same `sessionStorage`.
    fn open(&mut self, page: &'static str) -> &mut Self {
        self.page = page;
        self
    }

    /// One axios call as `common.js` makes it.
    async fn send(&self, method: Method, path: &str, params: &[(&str, Value)], body: Body) -> Resp {
        let url = self.app.url(&format!("/api{path}{}", serialize(params)));
        let mut req = self.app.client.request(method, url);
        if let Some(t) = &self.token {
            req = req.header("authorization", t);
        }
        req = match body {
            Body::None => req,
            Body::Json(v) => req.json(&v),
            Body::File(data) => {
                let (content_type, bytes) = form_data("IMG_0001.jpg", &data);
                req.header("content-type", content_type).body(bytes)
            }
        };
        self.app.send(req).await
    }

    /// A call that must not make the page show an error toast or go to the login page: HTTP
    /// 200 and `success:true`. The page's `data`, if any.
    async fn call(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, Value)],
        body: Body,
    ) -> Option<Value> {
        let r = self.send(method.clone(), path, params, body).await;
        assert_eq!(
            r.status, 200,
            "{}: {method} {path} {params:?}: HTTP {} would not reach the page: {r:?}",
            self.page, r.status
        );
        assert!(
            r.success(),
            "{}: {method} {path} {params:?} would show the toast {:?}: {r:?}",
            self.page,
            r.msg()
        );
        r.body.get("data").filter(|d| !d.is_null()).cloned()
    }

    async fn get(&self, path: &str) -> Option<Value> {
        self.call(Method::GET, path, &[], Body::None).await
    }

    async fn get_with(&self, path: &str, params: &[(&str, Value)]) -> Option<Value> {
        self.call(Method::GET, path, params, Body::None).await
    }

    /// A call whose page reads `data`: it must be there.
    async fn data(&self, path: &str) -> Value {
        self.get(path)
            .await
            .unwrap_or_else(|| panic!("{}: GET {path} answered no data", self.page))
    }

    async fn put(&self, path: &str) -> Option<Value> {
        self.call(Method::PUT, path, &[], Body::None).await
    }

    async fn post(&self, path: &str) -> Option<Value> {
        self.call(Method::POST, path, &[], Body::None).await
    }

    async fn post_json(&self, path: &str, body: Value) -> Option<Value> {
        self.call(Method::POST, path, &[], Body::Json(body)).await
    }

    /// blog-edit.html's `fileSelected`: the photo as the form field `file`; the path the page
    /// keeps, `'/imgs' + data`.
    async fn upload(&self, data: Vec<u8>) -> String {
        let name = self
            .call(Method::POST, "/upload/blog", &[], Body::File(data))
            .await
            .expect("the upload answers the name");
        format!("/imgs{}", name.as_str().expect("a string name"))
    }

    /// `<img src>`: a plain GET of the path (no axios, no `/api`, no token) that must load an
    /// image. Its bytes.
    async fn img(&self, src: &str) -> Vec<u8> {
        assert!(src.starts_with('/'), "{}: image at {src:?}", self.page);
        let (status, content_type, body) = self.app.get_bytes(src).await;
        assert_eq!(status, 200, "{}: the image {src} does not load", self.page);
        assert!(
            content_type.starts_with("image/"),
            "{}: {src} is {content_type}",
            self.page
        );
        body
    }

    /// `b.icon || '/imgs/icons/default-icon.png'`: the default icon is the pages' own file, so
    /// only a set icon is loaded from hmdp.
    async fn avatar(&self, icon: &Value) {
        if let Some(icon) = icon.as_str().filter(|i| !i.is_empty()) {
            self.img(icon).await;
        }
    }
}

// ---- what the pages read ----

fn str_of<'v>(v: &'v Value, field: &str) -> &'v str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("`{field}` is not a string in {v}"))
}

fn num_of(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("`{field}` is not a number in {v}"))
}

fn id_of(v: &Value) -> i64 {
    v["id"].as_i64().unwrap_or_else(|| panic!("no id in {v}"))
}

fn list_of(v: &Value) -> &Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("the page calls .forEach on this: {v}"))
}

/// `new Date(text)` on the original's `yyyy-MM-ddTHH:mm:ss`.
fn assert_page_date(v: &Value, field: &str) {
    let text = str_of(v, field);
    assert!(
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").is_ok(),
        "`{field}` = {text:?} in {v}"
    );
}

/// A `UserDTO`: `id`, `nickName`, `icon` (the pages show `icon || default`).
fn assert_user_dto(u: &Value) {
    id_of(u);
    assert!(!str_of(u, "nickName").is_empty(), "{u}");
    assert!(u.get("icon").is_none_or(Value::is_string), "{u}");
}

/// A note in a list (index, info, other-info): `images.split(',')`, `title`, `liked`.
fn assert_listed_note(b: &Value) {
    id_of(b);
    str_of(b, "images");
    assert!(!str_of(b, "title").is_empty(), "{b}");
    num_of(b, "liked");
}

/// A note where the page also shows the author and the thumb's colour (index.html, the 关注
/// tab): `name`, `icon`, and `isLike` exactly when logged in.
fn assert_shown_note(b: &Value, logged_in: bool) {
    assert_listed_note(b);
    assert!(b["name"].is_string(), "{b}");
    assert!(b.get("icon").is_none_or(Value::is_string), "{b}");
    assert_eq!(
        b.get("isLike").is_some_and(Value::is_boolean),
        logged_in,
        "{b}"
    );
}

// ---- the pages ----

/// login.html: the code, then `{phone, code}`; the token goes to `sessionStorage`.
async fn login_page(app: &TestApp, phone: &str) -> String {
    let mut tab = Tab::new(app, None);
    tab.open("login.html");
    assert_eq!(tab.post(&format!("/user/code?phone={phone}")).await, None);
    let code = app.sms.last_code_for(phone).expect("a code was sent");
    let token = tab
        .post_json("/user/login", json!({"phone": phone, "code": code}))
        .await
        .expect("login.html stores data as the token");
    let token = token.as_str().expect("the token is a string").to_owned();
    assert!(!token.is_empty());
    token
}

/// login2.html posts `{phone, password}`. The original never implemented password login;
/// hmdp refuses it on purpose (`password_login_unsupported`, HTTP 200) with a message saying
/// to log in with an SMS code, so the page's toast tells the user what to do instead. This is
/// the one error toast the ten pages are expected to show.
async fn login2_page(app: &TestApp, phone: &str) {
    let tab = Tab::new(app, None);
    let r = tab
        .send(
            Method::POST,
            "/user/login",
            &[],
            Body::Json(json!({"phone": phone, "password": "123456"})),
        )
        .await;
    assert_eq!(
        r.status, 200,
        "the page shows errorMsg only for HTTP 200: {r:?}"
    );
    assert!(!r.success());
    assert_eq!(r.code(), "password_login_unsupported", "{r:?}");
    assert!(
        r.msg().contains("验证码"),
        "the toast says to use a code: {r:?}"
    );
    assert!(r.body.get("data").is_none(), "no token: {r:?}");
}

/// index.html: the type icons and the hot notes, first page and the next; the hot list.
async fn index_page(tab: &mut Tab<'_>) -> Vec<Value> {
    tab.open("index.html");
    let types = tab.data("/shop-type/list").await;
    assert!(!list_of(&types).is_empty());
    for t in list_of(&types) {
        id_of(t);
        assert!(!str_of(t, "name").is_empty());
        tab.img(&format!("/imgs/{}", str_of(t, "icon"))).await;
    }
    let logged_in = tab.token.is_some();
    let mut hot = Vec::new();
    for current in 1..=2 {
        let page = tab.data(&format!("/blog/hot?current={current}")).await;
        for b in list_of(&page) {
            assert_shown_note(b, logged_in);
            // `b.img = b.images.split(",")[0]`
            let img = str_of(b, "images").split(',').next().unwrap();
            if !img.is_empty() {
                tab.img(img).await;
            }
            tab.avatar(&b["icon"]).await;
        }
        hot.extend(list_of(&page).iter().cloned());
    }
    let likes: Vec<f64> = hot.iter().map(|b| num_of(b, "liked")).collect();
    assert!(
        likes.windows(2).all(|w| w[0] >= w[1]),
        "by likes: {likes:?}"
    );
    hot
}

/// index.html's (and info.html's) thumb: PUT the like, then re-read the note; its `liked` and
/// `isLike`.
async fn like_in_list(tab: &Tab<'_>, blog: i64) -> (i64, bool) {
    tab.put(&format!("/blog/like/{blog}")).await;
    let b = tab.data(&format!("/blog/{blog}")).await;
    (b["liked"].as_i64().unwrap(), b["isLike"].as_bool().unwrap())
}

/// shop-list.html?type=…: the types for the menu, shops near the fixed point, the next page
/// on scroll, then a sort by comments; the first page.
async fn shop_list_page(tab: &mut Tab<'_>, type_id: i64) -> Vec<Value> {
    tab.open("shop-list.html");
    list_of(&tab.data("/shop-type/list").await);
    // `util.getUrlParam("type")` is a string; `sortBy` starts as "" and is not sent.
    let params = |current: i64, sort_by: &str| {
        vec![
            ("typeId", json!(type_id.to_string())),
            ("current", json!(current)),
            ("sortBy", json!(sort_by)),
            ("x", json!(PAGE_X)),
            ("y", json!(PAGE_Y)),
        ]
    };
    let mut first = Vec::new();
    for (current, sort_by) in [(1, ""), (2, ""), (2, "comments")] {
        let Some(shops) = tab
            .get_with("/shop/of/type", &params(current, sort_by))
            .await
        else {
            continue; // `if (!data) return`
        };
        for s in list_of(&shops) {
            id_of(s);
            assert!(!str_of(s, "name").is_empty());
            let img = str_of(s, "images").split(',').next().unwrap();
            if !img.is_empty() {
                tab.img(img).await;
            }
            num_of(s, "score");
            num_of(s, "comments");
            str_of(s, "address");
            let distance = num_of(s, "distance");
            assert!((0.0..=5000.0).contains(&distance), "{s}");
        }
        if current == 1 {
            first = list_of(&shops).clone();
        }
    }
    first
}

/// shop-detail.html?id=…: the shop and its vouchers; the vouchers.
async fn shop_detail_page(tab: &mut Tab<'_>, shop: i64) -> Vec<Value> {
    tab.open("shop-detail.html");
    let s = tab.data(&format!("/shop/{shop}")).await;
    assert_eq!(id_of(&s), shop);
    for img in str_of(&s, "images").split(',').filter(|i| !i.is_empty()) {
        tab.img(img).await;
    }
    str_of(&s, "name");
    num_of(&s, "score");
    num_of(&s, "comments");
    str_of(&s, "address");
    let vouchers = tab.data(&format!("/voucher/list/{shop}")).await;
    for v in list_of(&vouchers) {
        id_of(v);
        str_of(v, "title");
        num_of(v, "payValue");
        assert!(
            num_of(v, "actualValue") > 0.0,
            "the page divides by it: {v}"
        );
        if num_of(v, "type") != 0.0 {
            num_of(v, "stock");
            assert_page_date(v, "beginTime");
            assert_page_date(v, "endTime");
        }
    }
    list_of(&vouchers).clone()
}

/// What blog-detail.html shows and knows after loading.
struct Detail {
    blog: Value,
    likes: Vec<Value>,
    /// `followed`, asked only when the viewer is not the author.
    followed: Option<bool>,
}

/// blog-detail.html?id=…: the note, its shop, its likers, the viewer and whether they follow
/// the author; every photo and avatar is loaded.
async fn blog_detail_page(tab: &mut Tab<'_>, id: i64) -> Detail {
    tab.open("blog-detail.html");
    let blog = tab.data(&format!("/blog/{id}")).await;
    assert_eq!(id_of(&blog), id);
    // `data.images = data.images.split(",")`, one <img> each.
    for img in str_of(&blog, "images").split(',').filter(|i| !i.is_empty()) {
        tab.img(img).await;
    }
    tab.avatar(&blog["icon"]).await;
    assert!(!str_of(&blog, "name").is_empty());
    assert_page_date(&blog, "createTime");
    str_of(&blog, "content");
    num_of(&blog, "liked");
    assert!(blog["isLike"].is_boolean(), "{blog}");
    let author = blog["userId"].as_i64().expect("userId");
    let shop = tab.data(&format!("/shop/{}", blog["shopId"])).await;
    // `data.image = data.images.split(",")[0]`
    let img = str_of(&shop, "images").split(',').next().unwrap();
    if !img.is_empty() {
        tab.img(img).await;
    }
    let likes = tab.data(&format!("/blog/likes/{id}")).await;
    for u in list_of(&likes) {
        assert_user_dto(u);
        tab.avatar(&u["icon"]).await;
    }
    let me = tab.data("/user/me").await;
    assert_user_dto(&me);
    let followed = if id_of(&me) != author {
        let f = tab.data(&format!("/follow/or/not/{author}")).await;
        Some(f.as_bool().expect("followed is a boolean"))
    } else {
        None
    };
    Detail {
        blog,
        likes: list_of(&likes).clone(),
        followed,
    }
}

/// blog-detail.html's thumb: PUT the like, re-read the note and its likers.
async fn like_in_detail(tab: &Tab<'_>, id: i64) -> Detail {
    tab.put(&format!("/blog/like/{id}")).await;
    let blog = tab.data(&format!("/blog/{id}")).await;
    let likes = tab.data(&format!("/blog/likes/{id}")).await;
    Detail {
        blog,
        likes: list_of(&likes).clone(),
        followed: None,
    }
}

/// The follow button (blog-detail.html, other-info.html): `PUT /follow/{id}/{!followed}`.
async fn follow_button(tab: &Tab<'_>, user: i64, followed: bool) {
    tab.put(&format!("/follow/{user}/{}", !followed)).await;
}

/// blog-edit.html: log-in check and shop search, photos uploaded (one taken back), the note
/// posted; its id and the photo paths as the page put them into `images`.
async fn blog_edit_page(tab: &mut Tab<'_>, title: &str, photos: &[Vec<u8>]) -> (i64, Vec<String>) {
    tab.open("blog-edit.html");
    assert_user_dto(&tab.data("/user/me").await);
    // `"/shop/of/name?name=" + this.shopName`: built by hand, so the empty name is sent.
    let shops = tab.data("/shop/of/name?name=").await;
    assert!(!list_of(&shops).is_empty(), "the dialog lists shops");
    for s in list_of(&shops) {
        id_of(s);
        str_of(s, "name");
    }
    let shop = list_of(&shops)[0].clone();

    // A photo added and taken back again (`deletePic`): gone afterwards.
    let dropped = tab.upload(photo("dropped")).await;
    tab.img(&dropped).await;
    tab.get(&format!("/upload/blog/delete?name={dropped}"))
        .await;
    let gone = tab
        .app
        .client
        .get(tab.app.url(&dropped))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404, "{dropped} was deleted");

    let mut file_list = Vec::new();
    for data in photos {
        let src = tab.upload(data.clone()).await;
        assert_eq!(&tab.img(&src).await, data, "the preview shows the photo");
        file_list.push(src);
    }
    let id = tab
        .post_json(
            "/blog",
            json!({
                "title": title,
                "content": format!("{title}：写给去过和想去的人"),
                "images": file_list.join(","),
                "shopId": id_of(&shop),
            }),
        )
        .await
        .expect("data is the new note's id");
    (id.as_i64().expect("a numeric id"), file_list)
}

/// What info.html shows.
struct Info {
    me: Value,
    info: Option<Value>,
    notes: Vec<Value>,
    /// The 关注 tab, scrolled to its end.
    feed: Vec<Value>,
}

/// info.html: the user, their profile and notes, and the 关注 tab scrolled to the end the way
/// the page scrolls it.
async fn info_page(tab: &mut Tab<'_>) -> Info {
    tab.open("info.html");
    let me = tab.data("/user/me").await;
    assert_user_dto(&me);
    tab.avatar(&me["icon"]).await;
    // `if (!data) return`: a user without a profile row gets no data.
    let info = tab.get(&format!("/user/info/{}", id_of(&me))).await;
    if let Some(info) = &info {
        assert_eq!(info["userId"], me["id"], "{info}");
    }
    let notes = tab.data("/blog/of/me").await;
    for b in list_of(&notes) {
        assert_listed_note(b);
        let img = str_of(b, "images").split(',').next().unwrap();
        if !img.is_empty() {
            tab.img(img).await;
        }
    }
    let feed = scroll_feed(tab).await;
    Info {
        me,
        info,
        notes: list_of(&notes).clone(),
        feed,
    }
}

/// info.html's `queryBlogsOfFollow`: `{offset, lastId: minTime || now + 1}` (so the first
/// request sends only `lastId`), then the answer's `{minTime, offset}` until no data comes.
async fn scroll_feed(tab: &Tab<'_>) -> Vec<Value> {
    let now_plus_one = chrono::Utc::now().timestamp_millis() + 1;
    let (mut min_time, mut offset) = (now_plus_one, 0_i64);
    let mut shown = Vec::new();
    for _ in 0..50 {
        let params = [("offset", json!(offset)), ("lastId", json!(min_time))];
        let Some(page) = tab.get_with("/blog/of/follow", &params).await else {
            return shown;
        };
        let list = list_of(&page["list"]);
        if list.is_empty() {
            return shown;
        }
        assert!(list.len() <= 2, "two a page: {page}");
        for b in list {
            assert_shown_note(b, true);
            tab.avatar(&b["icon"]).await;
        }
        shown.extend(list.iter().cloned());
        min_time = page["minTime"].as_i64().expect("minTime");
        offset = page["offset"].as_i64().expect("offset");
    }
    panic!("{}: the feed did not end", tab.page);
}

/// info-edit.html: `/user/me` only (the profile comes from `sessionStorage`).
async fn info_edit_page(tab: &mut Tab<'_>) -> Value {
    tab.open("info-edit.html");
    let me = tab.data("/user/me").await;
    assert_user_dto(&me);
    tab.avatar(&me["icon"]).await;
    me
}

/// What other-info.html shows.
struct OtherInfo {
    user: Value,
    notes: Vec<Value>,
    followed: bool,
    common: Vec<Value>,
}

/// other-info.html?id=…: the user, the viewer, the profile, the notes, the follow state and
/// the 共同关注 tab.
async fn other_info_page(tab: &mut Tab<'_>, id: i64) -> OtherInfo {
    tab.open("other-info.html");
    let user = tab.data(&format!("/user/{id}")).await;
    assert_user_dto(&user);
    assert_eq!(id_of(&user), id);
    tab.avatar(&user["icon"]).await;
    assert_user_dto(&tab.data("/user/me").await);
    tab.get(&format!("/user/info/{id}")).await;
    let notes = tab
        .get_with("/blog/of/user", &[("current", json!(1)), ("id", json!(id))])
        .await
        .expect("the notes");
    for b in list_of(&notes) {
        assert_listed_note(b);
        let img = str_of(b, "images").split(',').next().unwrap();
        if !img.is_empty() {
            tab.img(img).await;
        }
    }
    let followed = tab.data(&format!("/follow/or/not/{id}")).await;
    let common = tab.data(&format!("/follow/common/{id}")).await;
    for u in list_of(&common) {
        assert_user_dto(u);
    }
    OtherInfo {
        user,
        notes: list_of(&notes).clone(),
        followed: followed.as_bool().expect("a boolean"),
        common: list_of(&common).clone(),
    }
}

/// The note's `images` are `stored`, and each loads with its photo's bytes.
async fn assert_photos(tab: &Tab<'_>, note: &Value, stored: &str, photos: &[Vec<u8>]) {
    assert_eq!(str_of(note, "images"), stored, "{}", tab.page);
    let shown: Vec<&str> = stored.split(',').collect();
    assert_eq!(shown.len(), photos.len());
    for (src, bytes) in shown.iter().zip(photos) {
        assert_eq!(&tab.img(src).await, bytes, "{}: {src}", tab.page);
    }
}

fn ids(list: &[Value]) -> Vec<i64> {
    list.iter().map(id_of).collect()
}

// ---- the tests ----

async fn the_ten_original_pages_work_unchanged(backend: Backend) {
    let app = spawn_app(backend).await;

    // login.html for three demo users and one new phone (a new account).
    let a = login_page(&app, A).await;
    let b = login_page(&app, B).await;
    let c = login_page(&app, C).await;
    let newcomer = login_page(&app, "13912345678").await;
    // login2.html: refused on purpose, with a clear message (see `login2_page`).
    login2_page(&app, A).await;

    // index.html, logged out (isLike absent) and logged in.
    let mut anon = Tab::new(&app, None);
    let hot = index_page(&mut anon).await;
    assert_eq!(hot.len(), 10, "the ten demo notes");
    let mut tab_a = Tab::new(&app, Some(&a));
    let hot_a = index_page(&mut tab_a).await;
    assert_eq!(ids(&hot_a), ids(&hot));
    let top = &hot_a[0];
    let (liked, is_like) = like_in_list(&tab_a, id_of(top)).await;
    // The demo counts have no likers behind them: the first like counts the likers.
    assert!(is_like);
    assert_eq!(liked, 1);
    assert_eq!(like_in_list(&tab_a, id_of(top)).await, (0, false));

    // shop-list.html for every type on the index, and shop-detail.html for each shop shown.
    let types = tab_a.data("/shop-type/list").await;
    let mut flash_sale = None;
    for t in list_of(&types) {
        let shops = shop_list_page(&mut tab_a, id_of(t)).await;
        assert!(
            !shops.is_empty(),
            "every demo type has shops near the page's point: {t}"
        );
        for s in &shops {
            for v in shop_detail_page(&mut tab_a, id_of(s)).await {
                if v["type"] == 1 {
                    flash_sale.get_or_insert(id_of(&v));
                }
            }
        }
    }
    // shop-detail.html's 限时抢购 button: the order id as data.
    let voucher = flash_sale.expect("the demo flash sale is on a listed shop");
    let order = tab_a
        .post(&format!("/voucher-order/seckill/{voucher}"))
        .await
        .expect("the order id");
    assert!(order.is_number(), "{order}");

    // blog-edit.html: B and C post notes (A follows both), B's with a photo.
    let mut tab_b = Tab::new(&app, Some(&b));
    let (b_note, b_photos) = blog_edit_page(&mut tab_b, "运河边新开的面馆", &[photo("b")]).await;
    let mut tab_c = Tab::new(&app, Some(&c));
    let (c_first, _) = blog_edit_page(&mut tab_c, "周六带娃去哪儿", &[]).await;
    let (c_second, _) = blog_edit_page(&mut tab_c, "周日的烤鱼", &[photo("c")]).await;

    // blog-detail.html of B's note, read by A: photo, author, followed; like it.
    let d = blog_detail_page(&mut tab_a, b_note).await;
    assert_eq!(str_of(&d.blog, "images"), b_photos.join(","));
    assert_eq!(d.blog["isLike"], false);
    assert_eq!(d.followed, Some(true), "A follows B");
    assert!(d.likes.is_empty());
    let b_me = info_edit_page(&mut tab_b).await;
    assert_eq!(d.blog["name"], b_me["nickName"]);
    let liked = like_in_detail(&tab_a, b_note).await;
    assert_eq!(
        (liked.blog["liked"].clone(), liked.blog["isLike"].clone()),
        (json!(1), json!(true))
    );
    let a_me = info_edit_page(&mut tab_a).await;
    assert_eq!(ids(&liked.likes), vec![id_of(&a_me)]);

    // blog-detail.html of E's note (A does not follow E): the 关注 button follows.
    let e_note = hot
        .iter()
        .find(|n| n["name"] == E_NICK)
        .map(id_of)
        .expect("a demo note by E");
    let d = blog_detail_page(&mut tab_a, e_note).await;
    assert_eq!(d.followed, Some(false));
    let e_id = d.blog["userId"].as_i64().unwrap();
    follow_button(&tab_a, e_id, false).await;
    let d = blog_detail_page(&mut tab_a, e_note).await;
    assert_eq!(d.followed, Some(true));
    // The author's own view asks no follow state.
    let own = blog_detail_page(&mut tab_b, b_note).await;
    assert_eq!(own.followed, None);

    // info.html of A: profile, A's two demo notes, and the 关注 tab with the three new notes
    // newest first (the demo notes were never published, so no inbox has them).
    let info = info_page(&mut tab_a).await;
    assert_eq!(info.me, a_me);
    let profile = info.info.expect("demo users have a profile");
    assert!(!str_of(&profile, "introduce").is_empty());
    assert_eq!(info.notes.len(), 2, "{:?}", info.notes);
    assert_eq!(ids(&info.feed), vec![c_second, c_first, b_note]);
    let shown = &info.feed[2];
    assert_eq!(str_of(shown, "images"), b_photos.join(","));
    assert_eq!(shown["isLike"], true, "A liked it on blog-detail.html");
    let (liked, is_like) = like_in_list(&tab_a, b_note).await;
    assert_eq!(
        (liked, is_like),
        (0, false),
        "info.html's thumb toggles back"
    );

    // other-info.html of B, seen by A: B's note, followed, and C as the common follow.
    let b_id = id_of(&b_me);
    let other = other_info_page(&mut tab_a, b_id).await;
    assert_eq!(other.user, b_me);
    assert!(ids(&other.notes).contains(&b_note), "{:?}", other.notes);
    assert!(other.followed);
    let common: HashSet<&str> = other.common.iter().map(|u| str_of(u, "nickName")).collect();
    assert_eq!(common, HashSet::from([C_NICK]));
    follow_button(&tab_a, b_id, true).await;
    assert!(!other_info_page(&mut tab_a, b_id).await.followed);
    follow_button(&tab_a, b_id, false).await;
    assert!(other_info_page(&mut tab_a, b_id).await.followed);

    // A new account: every page still answers, with nothing to show yet.
    let mut tab_n = Tab::new(&app, Some(&newcomer));
    let info = info_page(&mut tab_n).await;
    assert!(info.me["nickName"].as_str().unwrap().starts_with("user_"));
    assert!(
        info.info.is_none(),
        "no profile row: no data, as the original"
    );
    assert!(info.notes.is_empty() && info.feed.is_empty());
    info_edit_page(&mut tab_n).await;
    let other = other_info_page(&mut tab_n, b_id).await;
    assert!(!other.followed && other.common.is_empty());
    index_page(&mut tab_n).await;

    // info.html's 退出登录: the session ends (the original answered "功能未完成").
    tab_n.open("info.html");
    tab_n.post("/user/logout").await;
    let r = tab_n.send(Method::GET, "/user/me", &[], Body::None).await;
    assert_eq!(r.status, 401, "the token is gone: {r:?}");
}

async fn a_note_with_an_uploaded_photo_shows_it_where_the_pages_look(backend: Backend) {
    let app = spawn_app(backend).await;
    let a = login_page(&app, A).await;
    let b = login_page(&app, B).await;
    let (first, second) = (photo("first"), photo("second"));

    let mut tab_b = Tab::new(&app, Some(&b));
    let (note, srcs) = blog_edit_page(
        &mut tab_b,
        "两张照片的笔记",
        &[first.clone(), second.clone()],
    )
    .await;
    assert_eq!(srcs.len(), 2);
    for src in &srcs {
        assert!(src.starts_with("/imgs/blogs/"), "{src}");
    }
    let stored = srcs.join(",");

    // Every page that shows the note shows its photos at those paths, with these bytes.
    let photos = [first, second];
    // index.html (the new note has no likes: the second page, after the ten demo notes).
    let mut anon = Tab::new(&app, None);
    let hot = index_page(&mut anon).await;
    let listed = hot
        .iter()
        .find(|n| id_of(n) == note)
        .expect("on the hot list");
    assert_photos(&anon, listed, &stored, &photos).await;
    // blog-detail.html.
    let mut tab_a = Tab::new(&app, Some(&a));
    let detail = blog_detail_page(&mut tab_a, note).await;
    assert_photos(&tab_a, &detail.blog, &stored, &photos).await;
    // info.html: the author's notes, and the follower's 关注 tab.
    let mine = info_page(&mut tab_b).await;
    let of_me = mine
        .notes
        .iter()
        .find(|n| id_of(n) == note)
        .expect("on /blog/of/me");
    assert_photos(&tab_b, of_me, &stored, &photos).await;
    let follower = info_page(&mut tab_a).await;
    assert_eq!(ids(&follower.feed), vec![note]);
    assert_photos(&tab_a, &follower.feed[0], &stored, &photos).await;
    // other-info.html.
    let other = other_info_page(&mut tab_a, id_of(&mine.me)).await;
    let of_user = other
        .notes
        .iter()
        .find(|n| id_of(n) == note)
        .expect("on /blog/of/user");
    assert_photos(&tab_a, of_user, &stored, &photos).await;
}

/// A database made by the original project: `/blog/hot` and `/blog/{id}` serve its notes
/// with their authors, and reading them leaves the `liked` counters as they were (the likers
/// behind them were never in Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_original_database_serves_its_notes() {
    SchemaDump::check_each("an_original_database_serves_its_notes", serves_notes_of).await;
}

/// A note row of the dump, with its author.
struct NoteRow {
    id: i64,
    liked: i64,
    title: String,
    name: String,
    icon: String,
}

async fn note_rows(db: &TestDatabase) -> Vec<NoteRow> {
    let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    let rows = sqlx::query(
        "SELECT CAST(b.id AS SIGNED), CAST(COALESCE(b.liked, 0) AS SIGNED), b.title, \
         COALESCE(u.nick_name, ''), COALESCE(u.icon, '') \
         FROM tb_blog b LEFT JOIN tb_user u ON u.id = b.user_id ORDER BY b.id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    rows.iter()
        .map(|r| NoteRow {
            id: r.get(0),
            liked: r.get(1),
            title: r.get(2),
            name: r.get(3),
            icon: r.get(4),
        })
        .collect()
}

async fn serves_notes_of(dump: &SchemaDump) {
    let db = TestDatabase::create().await;
    dump.load_into(&db).await;
    let rows = note_rows(&db).await;
    assert!(rows.len() >= 2, "the dump has notes to serve");
    if let SchemaDump::Fixture = dump {
        let first = rows.iter().find(|r| r.id == 1).expect("note 1");
        assert_eq!((first.liked, first.name.as_str()), (3, "周末探店人"));
    }
    let liked_before: Vec<(i64, i64)> = rows.iter().map(|r| (r.id, r.liked)).collect();
    // A member who logs in: the first user with a phone in the dump.
    let phone: String = {
        let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
        let p = sqlx::query_scalar("SELECT phone FROM tb_user ORDER BY id LIMIT 1")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        p
    };

    let dir = tempfile::tempdir().unwrap();
    let config = test_config(db.url.clone(), dir.path());
    let app = spawn_with_config(config, Backend::MySql, Some(db), dir).await;
    let token = login_page(&app, &phone).await;

    for tab in [Tab::new(&app, None), Tab::new(&app, Some(&token))] {
        let logged_in = tab.token.is_some();
        let hot = tab.data("/blog/hot?current=1").await;
        let hot = list_of(&hot);
        assert_eq!(hot.len(), rows.len().min(10));
        let likes: Vec<i64> = hot.iter().map(|b| b["liked"].as_i64().unwrap()).collect();
        assert!(
            likes.windows(2).all(|w| w[0] >= w[1]),
            "by likes: {likes:?}"
        );
        for b in hot {
            assert_shown_note(b, logged_in);
            let row = rows.iter().find(|r| r.id == id_of(b)).expect("a dump note");
            assert_eq!(b["liked"], row.liked, "{b}");
            assert_eq!(b["title"], row.title.as_str());
            assert_eq!(b["name"], row.name.as_str());
            if row.icon.is_empty() {
                assert!(b["icon"].as_str().unwrap_or("").is_empty(), "{b}");
            } else {
                assert_eq!(b["icon"], row.icon.as_str());
            }
        }
    }
    let tab = Tab::new(&app, Some(&token));
    for row in &rows {
        let b = tab.data(&format!("/blog/{}", row.id)).await;
        assert_eq!(b["liked"], row.liked, "{b}");
        assert_eq!(b["isLike"], false);
        assert_eq!(b["name"], row.name.as_str());
        assert_page_date(&b, "createTime");
    }
    // Reading changed no counter.
    let url = app.state.config.database_url.clone();
    let after: Vec<(i64, i64)> = {
        let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
        let rows = sqlx::query(
            "SELECT CAST(id AS SIGNED), CAST(COALESCE(liked, 0) AS SIGNED) FROM tb_blog ORDER BY id",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    assert_eq!(after, liked_before);
    app.stop().await;
}

/// index.html's type icons at the path the browser really requests, `'/imgs/' + icon` =
/// `/imgs//types/ms.png`, when hmdp serves the original pages' folder (`HMDP_STATIC_DIR`),
/// which ships `imgs/types/*.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_folder_serves_type_icons_at_the_double_slash_path() {
    let site = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(site.path().join("imgs/types")).unwrap();
    std::fs::write(site.path().join("imgs/types/ms.png"), photo("icon")).unwrap();
    let root = site.path().to_owned();
    let app =
        crate::helpers::spawn_app_with(Backend::Sqlite, move |c| c.static_dir = Some(root)).await;
    let mut tab = Tab::new(&app, None);
    tab.open("index.html");
    let types = tab.data("/shop-type/list").await;
    let food = list_of(&types)
        .iter()
        .find(|t| t["icon"] == "/types/ms.png")
        .expect("美食");
    let src = format!("/imgs/{}", str_of(food, "icon"));
    assert_eq!(src, "/imgs//types/ms.png");
    assert_eq!(tab.img(&src).await, photo("icon"), "the folder's own file");
}

/// The same path without a pages folder: our own drawings of the icons, served at
/// `/imgs/types/…`, load at the double slash the page sends (hmdp merges slashes as nginx does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_page_type_icon_path_loads_as_written() {
    let app = spawn_app(Backend::Sqlite).await;
    let mut tab = Tab::new(&app, None);
    tab.open("index.html");
    let types = tab.data("/shop-type/list").await;
    for t in list_of(&types) {
        tab.img(&format!("/imgs/{}", str_of(t, "icon"))).await;
    }
}
