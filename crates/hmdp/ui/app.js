// hmdp web UI: a small single-page app on hash routes, no dependencies, no build step.
//
// Safety rule: every piece of server or user text reaches the DOM through textContent or
// setAttribute (see h()); nothing is ever assigned to innerHTML. A note's content (HTML the
// server sanitized) is parsed inertly and rebuilt from text and plain tags (see richText()).
//
// Sections that need routes a server may not have (notes, sign-in, visitors) stay hidden when
// the route answers 404/405, without an error; each says how it ended in data-state.
'use strict';

(() => {
  // Uncaught errors and CSP violations are kept for the browser test (and for curious users).
  const errors = (window.__hmdpErrors = []);
  window.addEventListener('error', (e) => errors.push('error: ' + e.message));
  window.addEventListener('unhandledrejection', (e) => errors.push('rejection: ' + String(e.reason)));
  document.addEventListener('securitypolicyviolation', (e) =>
    errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI));

  const TOKEN_KEY = 'hmdp.token';
  const LANG_KEY = 'hmdp.lang';
  const ADMIN_KEY = 'hmdp.adminToken';

  // ---------------------------------------------------------------- text (中文 / English)

  const I18N = {
    zh: {
      'nav.home': '首页', 'nav.orders': '订单', 'nav.dash': '看板', 'nav.admin': '管理', 'nav.me': '我的',
      'lang.other': 'EN',
      'who.guest': '未登录',
      'err.network': '网络错误，请稍后重试',
      'loading': '加载中…',
      'login.title': '手机号登录',
      'login.phone': '手机号',
      'login.code': '验证码',
      'login.send': '发送验证码',
      'login.resend': '{0} 秒后重发',
      'login.submit': '登录',
      'login.sent': '验证码已发送到 {0}。',
      'login.ok': '登录成功',
      'home.search': '搜索店铺名',
      'home.go': '搜索',
      'home.types': '分类',
      'home.tip': '选一个分类看看附近的店铺和秒杀券。',
      'type.more': '加载更多',
      'type.end': '没有更多了',
      'type.none': '这个分类还没有店铺',
      'type.nearby': '按距离排序',
      'type.nogeo': '无法获取位置',
      'search.none': '没有找到店铺',
      'shop.perPerson': '人均 ¥{0}',
      'shop.sold': '已售 {0}',
      'shop.comments': '{0} 条评价',
      'shop.hours': '营业时间',
      'shop.address': '地址',
      'shop.vouchers': '优惠券',
      'shop.noVouchers': '暂无优惠券',
      'shop.notFound': '店铺不存在',
      'v.seckill': '限时秒杀',
      'v.regular': '普通券',
      'v.stock': '剩余 {0} 张',
      'v.startsIn': '距开始 {0}',
      'v.endsIn': '距结束 {0}',
      'v.ended': '已结束',
      'v.grab': '立即抢购',
      'v.notStarted': '未开始',
      'v.grabbing': '抢购中…',
      'v.dash': '实时看板',
      'v.success': '抢购成功！订单号 {0}',
      'v.state': '订单状态：',
      'state.pending': '排队写入中 (pending)',
      'state.failed': '下单失败，请联系客服 (failed)',
      'state.created': '已创建 (created)',
      'state.unknown': '查询中…',
      'orders.title': '我的订单',
      'orders.none': '还没有订单',
      'orders.note': '刚抢到的订单写入数据库后才会出现在这里。',
      'orders.id': '订单号', 'orders.voucher': '券', 'orders.status': '状态', 'orders.time': '下单时间',
      'status.1': '未支付', 'status.2': '已支付', 'status.3': '已核销', 'status.4': '已取消', 'status.5': '退款中', 'status.6': '已退款',
      'order.pay': '支付',
      'order.cancel': '取消',
      'order.refund': '退款',
      'order.closesIn': '{0} 后自动关闭',
      'order.closing': '已到支付期限，正在关闭…',
      'order.waiting': '等待支付…',
      'order.tradeNo': '交易号',
      'order.amount': '金额',
      'me.title': '我的',
      'me.logout': '退出登录',
      'me.login': '去登录',
      'me.guest': '你还没有登录。',
      'profile.title': '个人资料',
      'profile.nick': '昵称',
      'profile.city': '城市',
      'profile.intro': '个人介绍',
      'profile.gender': '性别',
      'profile.male': '男',
      'profile.female': '女',
      'profile.birthday': '生日',
      'profile.save': '保存',
      'profile.saved': '已保存',
      'admin.title': '管理：创建秒杀券',
      'admin.token': '管理员令牌 (x-admin-token)',
      'admin.tokenNote': '只保存在当前标签页 (sessionStorage)，关闭即清除。',
      'admin.shop': '店铺 ID',
      'admin.title2': '标题',
      'admin.sub': '副标题',
      'admin.rules': '使用规则',
      'admin.pay': '售价 (元)',
      'admin.actual': '面值 (元)',
      'admin.stock': '库存',
      'admin.begin': '开始时间（本机时间：{0}）',
      'admin.end': '结束时间（本机时间）',
      'admin.stored': '已保存：服务器本地时间 {0} 至 {1}（服务器 {2}），即本机时间 {3} 至 {4}。',
      'admin.submit': '创建秒杀券',
      'admin.created': '创建成功：秒杀券 #{0}',
      'admin.denied': '管理员令牌不正确',
      'admin.openDash': '打开实时看板',
      'admin.openShop': '查看店铺',
      'dash.title': '秒杀实时看板',
      'dash.voucher': '秒杀券 ID',
      'dash.go': '查看',
      'dash.stock': '剩余库存 (Redis)',
      'dash.db': '数据库库存',
      'dash.accepted': '已抢到',
      'dash.persisted': '已落库',
      'dash.backlog': '待写入',
      'dash.paid': '已支付',
      'dash.paidNote': '含已核销 {0} · 退款中 {1} · 已退款 {2}',
      'dash.unpaid': '待支付',
      'dash.released': '已释放',
      'dash.releasedNote': '取消或超时关闭，库存已退回',
      'dash.stream': '队列长度',
      'dash.rate': '抢到/秒',
      'dash.wrate': '落库/秒',
      'dash.req': '抢购请求/秒',
      'dash.chart': '实时曲线',
      'dash.reqNote': '含被拒绝的，本实例',
      'dash.noMetrics': '需要 /metrics（管理员令牌）',
      'dash.legendR': '请求/秒',
      'dash.peak': '峰值 {0}/秒',
      'dash.notStarted': '未开始，{0} 后开抢',
      'dash.running': '进行中，{0} 后结束',
      'dash.ended': '已结束',
      'dash.legendA': '抢到/秒',
      'dash.legendP': '落库/秒',
      'dash.legendS': '剩余库存比例',
      'dash.window': '最近 30 秒，每 0.5 秒刷新',
      'notFound': '页面不存在',
      'day': '天',
      'notes.hot': '热门笔记',
      'notes.feed': '关注动态',
      'notes.post': '写笔记',
      'notes.none': '还没有笔记',
      'note.like': '点赞',
      'note.likers': '{0} 人赞过',
      'note.follow': '关注',
      'note.following': '已关注',
      'note.shop': '去过的店',
      'note.unavailable': '笔记暂时看不了',
      'note.self': '我',
      'feed.title': '关注动态',
      'feed.more': '更多',
      'feed.end': '没有更多了',
      'feed.none': '你关注的人还没有发新笔记。',
      'feed.unavailable': '关注动态暂不可用',
      'post.title': '写笔记',
      'post.shop': '店铺',
      'post.shopSearch': '搜索店铺名，然后选一家',
      'post.noShop': '还没选店铺',
      'post.chosen': '已选：{0}',
      'post.noteTitle': '标题',
      'post.content': '正文',
      'post.photos': '照片',
      'post.uploading': '上传中…',
      'post.remove': '删除',
      'post.submit': '发布',
      'post.needShop': '请先选择店铺',
      'post.needTitle': '请填写标题',
      'sign.title': '每日签到',
      'sign.do': '签到',
      'sign.done': '今日已签到',
      'sign.streak': '已连续签到 {0} 天',
      'sign.streakOpen': '已连续签到 {0} 天，今天还没签',
      'sign.weekdays': '一,二,三,四,五,六,日',
      'sign.month': '{0} 年 {1} 月',
      'shop.uv': '近 7 天 {0} 位访客',
      'shop.post': '写一篇笔记',
    },
    en: {
      'nav.home': 'Home', 'nav.orders': 'Orders', 'nav.dash': 'Live', 'nav.admin': 'Admin', 'nav.me': 'Me',
      'lang.other': '中文',
      'who.guest': 'not logged in',
      'err.network': 'Network error, please retry',
      'loading': 'Loading…',
      'login.title': 'Log in with your phone',
      'login.phone': 'Phone number',
      'login.code': 'Code',
      'login.send': 'Send code',
      'login.resend': 'Resend in {0}s',
      'login.submit': 'Log in',
      'login.sent': 'A code was sent to {0}.',
      'login.ok': 'Logged in',
      'home.search': 'Search shops by name',
      'home.go': 'Search',
      'home.types': 'Categories',
      'home.tip': 'Pick a category to see shops and their flash-sale vouchers.',
      'type.more': 'Load more',
      'type.end': 'No more shops',
      'type.none': 'No shops in this category yet',
      'type.nearby': 'Sort by distance',
      'type.nogeo': 'Location unavailable',
      'search.none': 'No shop found',
      'shop.perPerson': '¥{0} per person',
      'shop.sold': '{0} sold',
      'shop.comments': '{0} reviews',
      'shop.hours': 'Opening hours',
      'shop.address': 'Address',
      'shop.vouchers': 'Vouchers',
      'shop.noVouchers': 'No vouchers',
      'shop.notFound': 'No such shop',
      'v.seckill': 'Flash sale',
      'v.regular': 'Voucher',
      'v.stock': '{0} left',
      'v.startsIn': 'Starts in {0}',
      'v.endsIn': 'Ends in {0}',
      'v.ended': 'Ended',
      'v.grab': 'Grab it',
      'v.notStarted': 'Not started',
      'v.grabbing': 'Grabbing…',
      'v.dash': 'Live dashboard',
      'v.success': 'Got it! Order {0}',
      'v.state': 'Order status: ',
      'state.pending': 'queued (pending)',
      'state.failed': 'could not be written: please contact support (failed)',
      'state.created': 'created',
      'state.unknown': 'checking…',
      'orders.title': 'My orders',
      'orders.none': 'No orders yet',
      'orders.note': 'A new order shows up here once it is written to the database.',
      'orders.id': 'Order', 'orders.voucher': 'Voucher', 'orders.status': 'Status', 'orders.time': 'Created',
      'status.1': 'unpaid', 'status.2': 'paid', 'status.3': 'used', 'status.4': 'cancelled', 'status.5': 'refunding', 'status.6': 'refunded',
      'order.pay': 'Pay',
      'order.cancel': 'Cancel',
      'order.refund': 'Refund',
      'order.closesIn': 'closes in {0}',
      'order.closing': 'payment time is up; closing…',
      'order.waiting': 'waiting for the payment…',
      'order.tradeNo': 'Trade no.',
      'order.amount': 'Amount',
      'me.title': 'Me',
      'me.logout': 'Log out',
      'me.login': 'Log in',
      'me.guest': 'You are not logged in.',
      'profile.title': 'Profile',
      'profile.nick': 'Nickname',
      'profile.city': 'City',
      'profile.intro': 'About me',
      'profile.gender': 'Gender',
      'profile.male': 'Male',
      'profile.female': 'Female',
      'profile.birthday': 'Birthday',
      'profile.save': 'Save',
      'profile.saved': 'Saved',
      'admin.title': 'Admin: create a flash-sale voucher',
      'admin.token': 'Admin token (x-admin-token)',
      'admin.tokenNote': 'Kept in this tab only (sessionStorage); gone when the tab closes.',
      'admin.shop': 'Shop id',
      'admin.title2': 'Title',
      'admin.sub': 'Subtitle',
      'admin.rules': 'Rules',
      'admin.pay': 'Price (yuan)',
      'admin.actual': 'Face value (yuan)',
      'admin.stock': 'Stock',
      'admin.begin': 'Begins (your time: {0})',
      'admin.end': 'Ends (your time)',
      'admin.stored': 'Stored as {0} to {1} server time (server {2}), i.e. {3} to {4} your time.',
      'admin.submit': 'Create flash-sale voucher',
      'admin.created': 'Created flash-sale voucher #{0}',
      'admin.denied': 'Wrong admin token',
      'admin.openDash': 'Open the live dashboard',
      'admin.openShop': 'View the shop',
      'dash.title': 'Flash sale, live',
      'dash.voucher': 'Flash-sale voucher id',
      'dash.go': 'Show',
      'dash.stock': 'Stock left (Redis)',
      'dash.db': 'Stock in database',
      'dash.accepted': 'Accepted',
      'dash.persisted': 'Persisted',
      'dash.backlog': 'Backlog',
      'dash.paid': 'Paid',
      'dash.paidNote': 'incl. used {0} · refunding {1} · refunded {2}',
      'dash.unpaid': 'Unpaid',
      'dash.released': 'Released',
      'dash.releasedNote': 'cancelled or closed unpaid; units back on sale',
      'dash.stream': 'Stream length',
      'dash.rate': 'Accepted/s',
      'dash.wrate': 'Persisted/s',
      'dash.req': 'Grab requests/s',
      'dash.chart': 'Live chart',
      'dash.reqNote': 'refusals included, this instance',
      'dash.noMetrics': 'needs /metrics (admin token)',
      'dash.legendR': 'requests/s',
      'dash.peak': 'peak {0}/s',
      'dash.notStarted': 'Not started; opens in {0}',
      'dash.running': 'Running; ends in {0}',
      'dash.ended': 'Ended',
      'dash.legendA': 'accepted/s',
      'dash.legendP': 'persisted/s',
      'dash.legendS': 'stock left (share)',
      'dash.window': 'Last 30 s, refreshed every 0.5 s',
      'notFound': 'No such page',
      'day': 'd',
      'notes.hot': 'Popular notes',
      'notes.feed': 'Following',
      'notes.post': 'Write a note',
      'notes.none': 'No notes yet',
      'note.like': 'Like',
      'note.likers': '{0} likes',
      'note.follow': 'Follow',
      'note.following': 'Following',
      'note.shop': 'The place',
      'note.unavailable': 'This note cannot be shown right now',
      'note.self': 'me',
      'feed.title': 'Notes from people you follow',
      'feed.more': 'More',
      'feed.end': 'No more notes',
      'feed.none': 'Nobody you follow has posted a new note yet.',
      'feed.unavailable': 'The feed is not available',
      'post.title': 'Write a note',
      'post.shop': 'Shop',
      'post.shopSearch': 'Search a shop by name, then pick one',
      'post.noShop': 'No shop picked yet',
      'post.chosen': 'Picked: {0}',
      'post.noteTitle': 'Title',
      'post.content': 'Text',
      'post.photos': 'Photos',
      'post.uploading': 'Uploading…',
      'post.remove': 'Remove',
      'post.submit': 'Publish',
      'post.needShop': 'Pick a shop first',
      'post.needTitle': 'Give the note a title',
      'sign.title': 'Daily check-in',
      'sign.do': 'Check in',
      'sign.done': 'Checked in today',
      'sign.streak': '{0}-day streak',
      'sign.streakOpen': '{0}-day streak; check in today to keep it',
      'sign.weekdays': 'Mo,Tu,We,Th,Fr,Sa,Su',
      'sign.month': '{1}/{0}',
      'shop.uv': '{0} visitors in the last 7 days',
      'shop.post': 'Write a note about it',
    },
  };

  let lang = localStorage.getItem(LANG_KEY) === 'en' ? 'en' : 'zh';

  function t(key, ...args) {
    let s = I18N[lang][key] ?? I18N.zh[key] ?? key;
    args.forEach((a, i) => { s = s.replace('{' + i + '}', String(a)); });
    return s;
  }

  // ---------------------------------------------------------------- DOM helpers

  /** Builds an element; strings become text nodes, never markup. */
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    setProps(el, props);
    append(el, kids);
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function s(tag, props, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    setProps(el, props);
    append(el, kids);
    return el;
  }

  function setProps(el, props) {
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = String(v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function append(el, kids) {
    for (const kid of kids.flat()) {
      if (kid == null || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
  }

  function notice(kind, ...kids) {
    return h('div', { class: 'notice ' + kind, role: kind === 'bad' ? 'alert' : 'status' }, ...kids);
  }

  function go(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  // ---------------------------------------------------------------- API

  function token() {
    return localStorage.getItem(TOKEN_KEY);
  }

  /** Calls the API; resolves to {status, text, json, ok}. Never throws. */
  async function api(method, path, body, headers) {
    const hs = Object.assign({}, headers);
    const tok = token();
    if (tok) hs.authorization = tok;
    const form = body instanceof FormData;
    if (body !== undefined && !form) hs['content-type'] = 'application/json';
    let resp;
    try {
      resp = await fetch('/api' + path, {
        method,
        headers: hs,
        body: body === undefined || form ? body : JSON.stringify(body),
      });
    } catch (e) {
      return { status: 0, text: '', ok: false, json: { success: false, errorMsg: t('err.network') } };
    }
    const text = await resp.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch (e) {
      json = { success: false, errorMsg: text || resp.statusText };
    }
    if (json === null || typeof json !== 'object') json = { success: false, errorMsg: String(text) };
    if (resp.status === 401 && tok) {
      // The session expired: forget it and ask for a new login.
      localStorage.removeItem(TOKEN_KEY);
      me = null;
      renderWho();
    }
    noteServerClock(resp.headers.get('date'));
    return { status: resp.status, text, json, ok: json.success === true };
  }

  // The server's clock minus ours, from the Date header of its answers (whole seconds, so
  // only a gap above 1.5 s counts): a pay deadline is an instant on the server's clock.
  let serverSkew = 0;
  function noteServerClock(date) {
    const at = Date.parse(date || '');
    if (!Number.isFinite(at)) return;
    const skew = at + 500 - Date.now();
    serverSkew = Math.abs(skew) > 1500 ? skew : 0;
  }

  /** A route this server does not have (yet): its section stays hidden, no error shown. */
  function missing(r) {
    return (r.status === 404 && r.json.code === 'not_found') ||
      (r.status === 405 && r.json.code === 'method_not_allowed');
  }

  function errorText(r) {
    const msg = r.json.errorMsg || ('HTTP ' + r.status);
    return r.json.code ? msg + ' [' + r.json.code + ']' : msg;
  }

  function needLogin() {
    go('#/login?next=' + encodeURIComponent(location.hash || '#/'));
  }

  // ---------------------------------------------------------------- formatting

  function yuan(fen) {
    const n = Number(fen) || 0;
    return '¥' + (n % 100 === 0 ? String(n / 100) : (n / 100).toFixed(2));
  }

  // Times: the server returns a sale's window as its own local time without a zone
  // (beginTime/endTime, as the original) and as instants (beginMillis/endMillis). The page
  // computes only with the instants and shows them in this browser's zone, so a user in
  // another zone than the server sees the right countdown.

  function pad(n) {
    return String(n).padStart(2, '0');
  }

  /** "+08:00" for an offset in minutes east of UTC. */
  function isoOffset(minutes) {
    const m = Math.abs(minutes);
    return (minutes < 0 ? '-' : '+') + pad(Math.floor(m / 60)) + ':' + pad(m % 60);
  }

  /** This browser's zone, e.g. "Asia/Shanghai (UTC+08:00)". */
  function browserZone() {
    let name = '';
    try {
      name = Intl.DateTimeFormat().resolvedOptions().timeZone || '';
    } catch (e) { /* no Intl: the offset alone */ }
    const off = 'UTC' + isoOffset(-new Date().getTimezoneOffset());
    return name ? name + ' (' + off + ')' : off;
  }

  /**
   * A datetime-local value ("yyyy-MM-ddTHH:mm[:ss]", this browser's zone) as RFC 3339 with
   * this browser's offset at that moment; the server converts it to its own zone.
   */
  function withOffset(value) {
    const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?$/.exec(value);
    if (!m) return value; // the server says what is wrong with it
    const d = new Date(+m[1], m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
    return localInput(d) + isoOffset(-d.getTimezoneOffset());
  }

  /** An instant (epoch ms) in this browser's zone, "yyyy-MM-dd HH:mm". */
  function localText(ms) {
    return Number.isFinite(ms) ? localInput(new Date(ms)).slice(0, 16).replace('T', ' ') : '–';
  }

  function duration(ms) {
    let sec = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(sec / 86400);
    sec %= 86400;
    const hms = pad(Math.floor(sec / 3600)) + ':' + pad(Math.floor((sec % 3600) / 60)) + ':' + pad(sec % 60);
    return d > 0 ? d + t('day') + ' ' + hms : hms;
  }

  function localInput(date) {
    return date.getFullYear() + '-' + pad(date.getMonth() + 1) + '-' + pad(date.getDate()) +
      'T' + pad(date.getHours()) + ':' + pad(date.getMinutes()) + ':' + pad(date.getSeconds());
  }

  /** The score (×10, as the original stores it) as five drawn stars and the number. */
  function stars(score) {
    const n = Math.round((Number(score) || 0) / 10);
    const star = (on) => s('svg', { class: 'star' + (on ? ' on' : ''), viewBox: '0 0 24 24', 'aria-hidden': 'true' },
      s('path', { d: 'M12 2.5l2.9 6.1 6.6.8-4.9 4.6 1.3 6.6L12 17.3l-5.9 3.3 1.3-6.6-4.9-4.6 6.6-.8z' }));
    return [...[0, 1, 2, 3, 4].map((i) => star(i < n)), ' ' + ((Number(score) || 0) / 10).toFixed(1)];
  }

  // ---------------------------------------------------------------- icons and images

  // Inline SVG icons (24×24, stroked with the text colour): no emoji font needed.
  const ICONS = {
    home: [['path', 'M3 11l9-8 9 8M5 9.5V20h5v-6h4v6h5V9.5']],
    orders: [['path', 'M6 3h12v18l-3-2-3 2-3-2-3 2zM9 8h6M9 12h6M9 16h4']],
    chart: [['path', 'M3 20h18M6 16v-5M11 16V6M16 16v-8M21 4l-5 4-5-2-5 5']],
    admin: [['path', 'M4 6h9M17 6h3M4 12h3M11 12h9M4 18h11M19 18h1'], ['circle', 15, 6, 2], ['circle', 9, 12, 2], ['circle', 17, 18, 2]],
    user: [['circle', 12, 8, 4], ['path', 'M4 21c0-4 3.6-7 8-7s8 3 8 7']],
    search: [['circle', 11, 11, 7], ['path', 'M16.5 16.5L21 21']],
    heart: [['path', 'M12 20s-7.5-4.9-7.5-10.2A4.3 4.3 0 0 1 12 7.1a4.3 4.3 0 0 1 7.5 2.7C19.5 15.1 12 20 12 20z']],
    plus: [['path', 'M12 5v14M5 12h14']],
    feed: [['path', 'M5 19h.01M5 12a7 7 0 0 1 7 7M5 5a14 14 0 0 1 14 14']],
    calendar: [['rect', 3, 5, 18, 16, 2], ['path', 'M3 10h18M8 3v4M16 3v4']],
    eye: [['path', 'M2 12s3.6-7 10-7 10 7 10 7-3.6 7-10 7S2 12 2 12z'], ['circle', 12, 12, 3]],
    photo: [['rect', 3, 5, 18, 14, 2], ['circle', 9, 10, 2], ['path', 'M21 16l-5-5-9 8']],
    pin: [['path', 'M12 21s-7-6.1-7-11.2a7 7 0 0 1 14 0C19 14.9 12 21 12 21z'], ['circle', 12, 10, 2.5]],
    check: [['path', 'M5 12.5l4.5 4.5L19 7']],
    tag: [['path', 'M3 12V4h8l10 10-8 8z'], ['circle', 7.5, 8, 1.5]],
    edit: [['path', 'M4 20h4L19 9l-4-4L4 16zM13.5 6.5l4 4']],
  };

  function icon(name, cls) {
    const el = s('svg', {
      class: 'icon' + (cls ? ' ' + cls : ''), viewBox: '0 0 24 24', 'aria-hidden': 'true', focusable: 'false',
      fill: 'none', stroke: 'currentColor', 'stroke-width': 2, 'stroke-linecap': 'round', 'stroke-linejoin': 'round',
    });
    for (const [tag, ...a] of ICONS[name] || ICONS.tag) {
      if (tag === 'path') el.append(s('path', { d: a[0] }));
      else if (tag === 'circle') el.append(s('circle', { cx: a[0], cy: a[1], r: a[2] }));
      else el.append(s('rect', { x: a[0], y: a[1], width: a[2], height: a[3], rx: a[4] || 0 }));
    }
    return el;
  }

  /**
   * A picture path as the data has it, as a URL we show: `/imgs/…` (notes, avatars, demo data),
   * an upload's `/blogs/…` or a type's `/types/…` (the original pages prefix those with
   * `/imgs`), or a remote http(s) URL (the original's shop photos). Anything else: none.
   */
  function imgUrl(path) {
    const p = String(path || '').trim();
    if (/^https?:\/\//i.test(p) || p.startsWith('/imgs/')) return p;
    if (/^\/(blogs|types|icons)\//.test(p)) return '/imgs' + p;
    return null;
  }

  function imgUrls(list) {
    return String(list || '').split(',').map(imgUrl).filter(Boolean);
  }

  function picture(src, cls) {
    const img = h('img', { src, alt: '', loading: 'lazy', referrerpolicy: 'no-referrer', class: cls });
    img.addEventListener('error', () => img.remove());
    return img;
  }

  /** A type's icon: its picture when we can show it, else a tag drawn in CSS colours. */
  function typeIcon(type) {
    const box = h('span', { class: 'type-icon', 'aria-hidden': 'true' });
    const src = imgUrl(type.icon);
    if (src) {
      const img = h('img', { src, alt: '' });
      img.addEventListener('error', () => img.replaceWith(icon('tag')));
      box.append(img);
    } else {
      box.append(icon('tag'));
    }
    return box;
  }

  /** A user's round avatar: the icon, else the first letter of the name on a colour. */
  function avatar(user, size) {
    const box = h('span', { class: 'avatar ' + (size || '') });
    const name = String(user.nickName || user.name || '');
    box.style.background = 'hsl(' + ((Number(user.id) * 47) % 360) + ', 55%, 62%)';
    const letter = () => { box.textContent = Array.from(name || '?')[0]; };
    const src = imgUrl(user.icon);
    if (src) {
      const img = h('img', { src, alt: '', loading: 'lazy', referrerpolicy: 'no-referrer' });
      img.addEventListener('error', () => { img.remove(); letter(); });
      box.append(img);
    } else {
      letter();
    }
    return box;
  }

  /**
   * A note's content. The server sanitizes it, and the original pages show it as HTML; here it
   * is parsed (inert: DOMParser runs and loads nothing) and rebuilt from text and a few plain
   * formatting tags, without any attribute, so no markup of a note can do more than that.
   */
  const RICH_TAGS = new Set(['P', 'BR', 'B', 'STRONG', 'I', 'EM', 'U', 'S', 'SPAN', 'DIV', 'UL', 'OL', 'LI', 'BLOCKQUOTE']);
  const DROP_TAGS = new Set(['SCRIPT', 'STYLE', 'TEMPLATE', 'NOSCRIPT', 'IFRAME', 'OBJECT']);

  function richText(html) {
    const out = h('div', { class: 'rich' });
    const doc = new DOMParser().parseFromString('<!doctype html><body>' + String(html || ''), 'text/html');
    const copy = (from, to, depth) => {
      for (const n of from.childNodes) {
        if (n.nodeType === Node.TEXT_NODE) {
          to.append(document.createTextNode(n.nodeValue));
        } else if (n.nodeType === Node.ELEMENT_NODE && !DROP_TAGS.has(n.tagName)) {
          if (depth < 16 && RICH_TAGS.has(n.tagName)) {
            const el = document.createElement(n.tagName.toLowerCase());
            copy(n, el, depth + 1);
            to.append(el);
          } else {
            copy(n, to, depth + 1);
          }
        }
      }
    };
    copy(doc.body, out, 0);
    return out;
  }

  /** "yyyy-MM-ddTHH:mm:ss" (server time, as the original sends it) as "yyyy-MM-dd HH:mm". */
  function when(text) {
    return String(text || '').slice(0, 16).replace('T', ' ');
  }

  function thumb(shop) {
    const box = h('div', { class: 'thumb' });
    box.style.background = 'hsl(' + ((Number(shop.id) * 57) % 360) + ', 60%, 55%)';
    // The first letter, covered by the shop's picture when there is one that loads.
    box.textContent = Array.from(String(shop.name || '?'))[0];
    const first = imgUrls(shop.images)[0];
    if (first) box.append(picture(first));
    return box;
  }

  // ---------------------------------------------------------------- session (who am I)

  let me = null;

  async function loadMe() {
    if (!token()) {
      me = null;
    } else {
      const r = await api('GET', '/user/me');
      me = r.ok ? r.json.data : null;
    }
    renderWho();
  }

  function renderWho() {
    const who = document.getElementById('who');
    if (who) who.textContent = me ? (me.nickName || ('#' + me.id)) : t('who.guest');
  }

  // ---------------------------------------------------------------- router

  let generation = 0;
  let cleanups = [];

  /** Per-view context: timers registered here stop when the user navigates away. */
  function makeCtx() {
    const gen = ++generation;
    return {
      alive: () => gen === generation,
      every(fn, ms) {
        if (gen !== generation) return;
        const id = setInterval(fn, ms);
        cleanups.push(() => clearInterval(id));
      },
    };
  }

  const ROUTES = {
    '': viewHome, login: viewLogin, type: viewType, search: viewSearch, shop: viewShop,
    orders: viewOrders, me: viewMe, admin: viewAdmin, dash: viewDash,
    blog: viewBlog, post: viewPost, feed: viewFeed,
  };

  function route() {
    cleanups.forEach((f) => f());
    cleanups = [];
    const hash = location.hash.replace(/^#/, '') || '/';
    const q = hash.indexOf('?');
    const path = q < 0 ? hash : hash.slice(0, q);
    const params = new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const view = document.getElementById('view');
    const root = h('div', { class: 'page', 'data-page': parts[0] || 'home' });
    view.replaceChildren(root);
    for (const a of document.querySelectorAll('#tabbar a')) {
      a.classList.toggle('active', a.dataset.tab === (parts[0] || 'home'));
    }
    const fn = ROUTES[parts[0] || ''] || viewNotFound;
    Promise.resolve(fn(root, parts.slice(1), params, makeCtx())).catch((e) => {
      root.append(notice('bad', String(e && e.message ? e.message : e)));
    });
    window.scrollTo(0, 0);
  }

  function applyStaticText() {
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
    for (const el of document.querySelectorAll('[data-t]')) el.textContent = t(el.dataset.t);
    document.getElementById('lang').textContent = t('lang.other');
    renderWho();
  }

  // ---------------------------------------------------------------- views

  function viewNotFound(root) {
    root.append(h('div', { class: 'empty' }, t('notFound')));
  }

  function viewLogin(root, _parts, params) {
    const phone = h('input', { id: 'phone', type: 'tel', inputmode: 'numeric', maxlength: 11, autocomplete: 'tel', placeholder: '13812345678' });
    const code = h('input', { id: 'code', inputmode: 'numeric', maxlength: 6, autocomplete: 'one-time-code', placeholder: '123456' });
    const send = h('button', { id: 'send-code', class: 'btn ghost', type: 'button' }, t('login.send'));
    const submit = h('button', { id: 'login-btn', class: 'btn block', type: 'submit' }, t('login.submit'));
    const msg = h('div', { id: 'login-msg' });
    // Always bilingual: the operator may read either language.
    const hint = notice('info',
      h('p', {}, '演示环境默认不发真短信：点击“发送验证码”后，请在服务器日志里找这一行：'),
      h('p', {}, h('code', {}, 'SMS (simulated, HMDP logs instead of sending): login code for <手机号> is <验证码>')),
      h('p', {}, 'Demo mode: no text message is sent. After "Send code", look in the server log for the line above ("login code for <phone> is <code>").'),
      h('p', {}, '演示数据的用户 / demo users: 16600000001 – 16600000005'));
    hint.id = 'code-hint';

    let timer = null;
    send.addEventListener('click', async () => {
      msg.replaceChildren();
      send.disabled = true;
      const r = await api('POST', '/user/code?phone=' + encodeURIComponent(phone.value.trim()));
      if (!r.ok) {
        send.disabled = false;
        msg.replaceChildren(notice('bad', errorText(r)));
        return;
      }
      msg.replaceChildren(notice('ok', t('login.sent', phone.value.trim())));
      code.focus();
      let left = 60;
      send.textContent = t('login.resend', left);
      timer = setInterval(() => {
        left -= 1;
        if (left <= 0 || !send.isConnected) {
          clearInterval(timer);
          send.disabled = false;
          send.textContent = t('login.send');
        } else {
          send.textContent = t('login.resend', left);
        }
      }, 1000);
      cleanups.push(() => clearInterval(timer));
    });

    const form = h('form', { id: 'login-form', novalidate: true },
      h('label', { for: 'phone' }, t('login.phone')), phone,
      h('label', { for: 'code' }, t('login.code')),
      h('div', { class: 'row' }, h('div', { class: 'grow' }, code), send),
      submit);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      submit.disabled = true;
      const r = await api('POST', '/user/login', { phone: phone.value.trim(), code: code.value.trim() });
      submit.disabled = false;
      if (!r.ok || typeof r.json.data !== 'string') {
        msg.replaceChildren(notice('bad', errorText(r)));
        return;
      }
      localStorage.setItem(TOKEN_KEY, r.json.data);
      await loadMe();
      const next = params.get('next') || '';
      go(next.startsWith('#/') && !next.startsWith('#/login') ? next : '#/');
    });
    root.append(h('div', { class: 'card' }, h('h1', {}, t('login.title')), hint, form, msg));
  }

  async function viewHome(root, _parts, _params, ctx) {
    const q = h('input', { id: 'search', type: 'search', placeholder: t('home.search') });
    const form = h('form', { class: 'row' }, h('div', { class: 'grow' }, q),
      h('button', { class: 'btn', type: 'submit' }, icon('search'), ' ', t('home.go')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (q.value.trim()) go('#/search?name=' + encodeURIComponent(q.value.trim()));
    });
    const types = h('div', { class: 'types', id: 'types' }, h('div', { class: 'muted' }, t('loading')));
    // The notes: hidden until the server answers /blog/hot (the route may not exist).
    const notes = h('div', { class: 'notes', id: 'hot-notes' });
    const more = h('button', { class: 'btn ghost block', type: 'button', id: 'hot-more', hidden: true }, t('type.more'));
    const section = h('section', { id: 'notes-section', hidden: true },
      h('div', { class: 'row section-head' },
        h('h2', { class: 'grow' }, t('notes.hot')),
        h('a', { class: 'btn ghost small', href: '#/feed', id: 'feed-link' }, icon('feed'), ' ', t('notes.feed')),
        h('a', { class: 'btn small', href: '#/post', id: 'post-link' }, icon('edit'), ' ', t('notes.post'))),
      notes, more);
    root.append(h('div', { class: 'card' }, form), h('h2', {}, t('home.types')), types,
      h('p', { class: 'muted small' }, t('home.tip')), section);

    let page = 0;
    async function loadNotes() {
      page += 1;
      more.disabled = true;
      const r = await api('GET', '/blog/hot?current=' + page);
      if (!ctx.alive()) return;
      if (!r.ok) {
        // No notes route on this server, or it failed: the home page simply has no notes.
        if (page === 1) section.dataset.state = 'none';
        more.hidden = true;
        return;
      }
      const list = Array.isArray(r.json.data) ? r.json.data : [];
      section.hidden = false;
      section.dataset.state = 'shown';
      if (page === 1 && list.length === 0) notes.append(h('div', { class: 'empty' }, t('notes.none')));
      notes.append(...list.map(noteCard));
      more.hidden = list.length < 10;
      more.disabled = false;
    }
    more.addEventListener('click', loadNotes);

    const [r] = await Promise.all([api('GET', '/shop-type/list'), loadNotes()]);
    if (!r.ok) {
      types.replaceChildren(notice('bad', errorText(r)));
      return;
    }
    typeCache = r.json.data || [];
    types.replaceChildren(...typeCache.map((ty) =>
      h('a', { class: 'type', href: '#/type/' + Number(ty.id), 'data-type-id': ty.id },
        typeIcon(ty), h('span', {}, ty.name))));
  }

  /** A note in a list: cover, title, author, likes (a like toggles in place). */
  function noteCard(b) {
    const cover = imgUrls(b.images)[0];
    const like = likeButton(b, 'like');
    return h('a', { class: 'note-card', href: '#/blog/' + Number(b.id), 'data-blog-id': b.id },
      h('div', { class: 'cover' }, cover ? picture(cover) : icon('photo')),
      h('div', { class: 'title' }, b.title || ''),
      h('div', { class: 'row small byline' },
        avatar({ id: b.userId, nickName: b.name, icon: b.icon }, 'xs'),
        h('span', { class: 'grow author' }, b.name || ''), like));
  }

  /** A heart with the like count; a click toggles the current user's like of note `b`. */
  function likeButton(b, cls, after) {
    const n = h('span', { class: 'n' });
    const btn = h('button', { class: cls, type: 'button', title: t('note.like') }, icon('heart'), n);
    const show = () => {
      n.textContent = String(Number(b.liked) || 0);
      btn.classList.toggle('on', b.isLike === true);
      btn.setAttribute('aria-pressed', b.isLike === true ? 'true' : 'false');
    };
    show();
    btn.addEventListener('click', async (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      if (!token()) {
        needLogin();
        return;
      }
      btn.disabled = true;
      const r = await api('PUT', '/blog/like/' + Number(b.id));
      btn.disabled = false;
      if (r.status === 401) {
        needLogin();
        return;
      }
      if (!r.ok) return;
      // The original answers nothing; a server that says the new state is believed.
      const d = r.json.data && typeof r.json.data === 'object' ? r.json.data : {};
      b.isLike = typeof d.isLike === 'boolean' ? d.isLike : b.isLike !== true;
      b.liked = typeof d.liked === 'number' ? d.liked : Math.max(0, (Number(b.liked) || 0) + (b.isLike ? 1 : -1));
      show();
      if (after) after();
    });
    btn.refresh = show;
    return btn;
  }

  let typeCache = null;

  function shopCard(shop) {
    const meta = [t('shop.perPerson', shop.avgPrice ?? '-'), shop.area || ''];
    if (shop.distance != null) {
      const d = Number(shop.distance);
      meta.push(d >= 1000 ? (d / 1000).toFixed(1) + ' km' : Math.round(d) + ' m');
    }
    return h('a', { class: 'card shop', href: '#/shop/' + Number(shop.id), 'data-shop-id': shop.id },
      thumb(shop),
      h('div', { class: 'grow' },
        h('div', { class: 'name' }, shop.name),
        h('div', { class: 'small' }, h('span', { class: 'stars' }, stars(shop.score)), ' · ', t('shop.comments', shop.comments ?? 0)),
        h('div', { class: 'muted small' }, meta.filter(Boolean).join(' · ')),
        h('div', { class: 'muted small' }, shop.address || '')));
  }

  async function viewType(root, parts, params) {
    const typeId = Number(parts[0]);
    if (!typeCache) {
      const r = await api('GET', '/shop-type/list');
      typeCache = r.ok ? r.json.data || [] : [];
    }
    const ty = typeCache.find((x) => Number(x.id) === typeId);
    const x = params.get('x');
    const y = params.get('y');
    const nearby = h('button', { class: 'btn ghost small', type: 'button' }, t('type.nearby'));
    const geoMsg = h('span', { class: 'muted small' });
    nearby.addEventListener('click', () => {
      if (!navigator.geolocation) {
        geoMsg.textContent = t('type.nogeo');
        return;
      }
      navigator.geolocation.getCurrentPosition(
        (p) => go('#/type/' + typeId + '?x=' + p.coords.longitude.toFixed(5) + '&y=' + p.coords.latitude.toFixed(5)),
        () => { geoMsg.textContent = t('type.nogeo'); },
        { timeout: 8000 });
    });
    const list = h('div', { id: 'shops' });
    const more = h('button', { class: 'btn ghost block', type: 'button' }, t('type.more'));
    root.append(
      h('div', { class: 'row wrap' }, h('h1', { class: 'grow row' }, ty ? [typeIcon(ty), ty.name] : '#' + typeId), nearby, geoMsg),
      list, more);
    let page = 0;
    async function loadMore() {
      page += 1;
      more.disabled = true;
      let path = '/shop/of/type?typeId=' + typeId + '&current=' + page;
      if (x && y) path += '&x=' + encodeURIComponent(x) + '&y=' + encodeURIComponent(y);
      const r = await api('GET', path);
      if (!r.ok) {
        list.append(notice('bad', errorText(r)));
        return;
      }
      const shops = r.json.data || [];
      list.append(...shops.map(shopCard));
      if (shops.length < 5) {
        more.textContent = page === 1 && shops.length === 0 ? t('type.none') : t('type.end');
      } else {
        more.disabled = false;
      }
    }
    more.addEventListener('click', loadMore);
    await loadMore();
  }

  async function viewSearch(root, _parts, params) {
    const name = params.get('name') || '';
    root.append(h('h1', { class: 'row' }, icon('search'), name));
    const r = await api('GET', '/shop/of/name?name=' + encodeURIComponent(name) + '&current=1');
    if (!r.ok) {
      root.append(notice('bad', errorText(r)));
      return;
    }
    const shops = r.json.data || [];
    if (shops.length === 0) root.append(h('div', { class: 'empty' }, t('search.none')));
    root.append(...shops.map(shopCard));
  }

  async function viewShop(root, parts, _params, ctx) {
    const id = Number(parts[0]);
    const [rs, rv] = await Promise.all([api('GET', '/shop/' + id), api('GET', '/voucher/list/' + id)]);
    if (!rs.ok || !rs.json.data) {
      root.append(notice('bad', rs.json.errorMsg || t('shop.notFound')));
      return;
    }
    const shop = rs.json.data;
    // Sections of routes this server may not have yet stay hidden until they answer.
    const uv = h('p', { class: 'small muted row', id: 'shop-uv', hidden: true });
    const write = h('a', { class: 'btn ghost small', id: 'shop-post', href: '#/post?shop=' + id, hidden: true }, icon('edit'), ' ', t('shop.post'));
    root.append(h('div', { class: 'card' },
      h('div', { class: 'row' }, thumb(shop), h('div', { class: 'grow' },
        h('h1', { id: 'shop-name' }, shop.name),
        h('div', { class: 'small' }, h('span', { class: 'stars' }, stars(shop.score)), ' · ', t('shop.comments', shop.comments ?? 0)),
        h('div', { class: 'muted small' }, t('shop.perPerson', shop.avgPrice ?? '-'), ' · ', t('shop.sold', shop.sold ?? 0)))),
      h('p', { class: 'small' }, h('span', { class: 'muted' }, t('shop.address') + '：'), shop.address || ''),
      h('p', { class: 'small' }, h('span', { class: 'muted' }, t('shop.hours') + '：'), shop.openHours || ''),
      uv, write));
    api('GET', '/shop/' + id + '/uv?days=7').then((r) => {
      if (!r.ok || typeof r.json.data !== 'number') {
        uv.dataset.state = 'none';
        return;
      }
      uv.replaceChildren(icon('eye'), t('shop.uv', r.json.data));
      uv.hidden = false;
      uv.dataset.state = 'shown';
    });
    api('GET', '/blog/hot?current=1').then((r) => { write.hidden = !r.ok; });

    root.append(h('h2', {}, t('shop.vouchers')));
    const vouchers = rv.ok ? rv.json.data || [] : [];
    if (!rv.ok) root.append(notice('bad', errorText(rv)));
    else if (vouchers.length === 0) root.append(h('div', { class: 'empty' }, t('shop.noVouchers')));
    for (const v of vouchers) root.append(voucherCard(v, ctx));
  }

  /** Rules are stored with literal `\n` separators (as in the original data): one line each. */
  function ruleLines(rules) {
    return String(rules).split(/\\n|\n/).flatMap((line, i) => (i ? [h('br'), line] : [line]));
  }

  function voucherCard(v, ctx) {
    const seckill = Number(v.type) === 1;
    const card = h('div', { class: 'card voucher', 'data-voucher-id': v.id },
      h('div', { class: 'row' },
        h('div', { class: 'grow' },
          h('span', { class: 'tag' }, seckill ? t('v.seckill') : t('v.regular')),
          h('div', { class: 'name' }, h('strong', {}, v.title)),
          v.subTitle ? h('div', { class: 'muted small' }, v.subTitle) : null),
        h('div', { class: 'center' }, h('div', { class: 'price' }, yuan(v.payValue)), h('div', { class: 'strike' }, yuan(v.actualValue)))),
      v.rules ? h('p', { class: 'muted small rules' }, ruleLines(v.rules)) : null);
    if (!seckill) return card;

    const stock = h('span', { class: 'stock' }, t('v.stock', v.stock ?? '-'));
    const countdown = h('span', { class: 'countdown muted small' });
    const begin = Number(v.beginMillis);
    const end = Number(v.endMillis);
    const bar = h('span');
    const grab = h('button', { class: 'btn grab', type: 'button' }, t('v.grab'));
    const result = h('div', { class: 'result' });
    card.append(
      h('div', { class: 'bar' }, bar),
      h('div', { class: 'row' }, h('div', { class: 'grow' }, stock, ' · ', countdown), grab),
      h('div', { class: 'muted small window' }, localText(begin) + ' – ' + localText(end)),
      result,
      h('p', { class: 'small' }, h('a', { class: 'tag', href: '#/dash/' + Number(v.id) }, icon('chart'), ' ', t('v.dash'))));

    let skew = 0; // server clock minus ours, from the stats endpoint
    let total = null;
    let busy = false;
    function tick() {
      const now = Date.now() + skew;
      let phase;
      if (now < begin) {
        countdown.textContent = t('v.startsIn', duration(begin - now));
        phase = 'before';
      } else if (now >= end) {
        countdown.textContent = t('v.ended');
        phase = 'after';
      } else {
        countdown.textContent = t('v.endsIn', duration(end - now));
        phase = 'open';
      }
      if (!busy) {
        grab.disabled = phase !== 'open';
        grab.textContent = phase === 'before' ? t('v.notStarted') : phase === 'after' ? t('v.ended') : t('v.grab');
      }
    }
    async function refreshStock() {
      const r = await api('GET', '/voucher/seckill/' + Number(v.id) + '/stats');
      if (!r.ok || !r.json.data) return;
      const st = r.json.data;
      skew = Number(st.nowMillis) - Date.now();
      const left = st.redisStock ?? st.dbStock;
      stock.textContent = t('v.stock', left);
      total = Number(left) + Number(st.accepted);
      bar.style.width = total > 0 ? (100 * Number(left) / total).toFixed(1) + '%' : '0%';
      tick();
    }
    tick();
    refreshStock();
    ctx.every(tick, 1000);
    ctx.every(refreshStock, 2000);

    grab.addEventListener('click', async () => {
      if (!token()) {
        needLogin();
        return;
      }
      busy = true;
      grab.disabled = true;
      grab.textContent = t('v.grabbing');
      const r = await api('POST', '/voucher-order/seckill/' + Number(v.id));
      busy = false;
      tick();
      if (r.status === 401) {
        needLogin();
        return;
      }
      if (!r.ok) {
        result.replaceChildren(notice('bad', errorText(r)));
        refreshStock();
        return;
      }
      // The order id is above 2^53: JSON.parse would round it, so read the digits.
      const m = /"data"\s*:\s*"?(\d+)/.exec(r.text);
      const orderId = m ? m[1] : String(r.json.data);
      const state = h('span', { class: 'state', 'data-state': '' }, t('state.unknown'));
      result.replaceChildren(notice('ok',
        h('div', { class: 'success' }, t('v.success', ''), h('span', { class: 'mono order-id' }, orderId)),
        h('div', {}, t('v.state'), state)));
      refreshStock();
      followOrder(orderId, state, ctx);
    });
    return card;
  }

  /** Polls an order until the worker has written it (pending → created), or gave up on it
   *  (pending → failed: the order is in the dead letters, for an operator). */
  async function followOrder(orderId, el, ctx) {
    for (let i = 0; i < 60 && ctx.alive() && el.isConnected; i += 1) {
      const r = await api('GET', '/voucher-order/' + orderId);
      if (r.ok && r.json.data) {
        const st = r.json.data.state;
        const known = st === 'created' || st === 'failed' ? st : 'pending';
        el.textContent = t('state.' + known);
        el.className = 'state ' + known;
        el.dataset.state = known;
        if (known !== 'pending') return;
      }
      await new Promise((res) => setTimeout(res, 500));
    }
  }

  async function viewOrders(root, _parts, _params, ctx) {
    if (!token()) {
      needLogin();
      return;
    }
    root.append(h('h1', {}, t('orders.title')));
    const r = await api('GET', '/voucher-order/of/me');
    if (r.status === 401) {
      needLogin();
      return;
    }
    if (!r.ok) {
      root.append(notice('bad', errorText(r)));
      return;
    }
    const orders = r.json.data || [];
    const rows = orders.map((o) => orderRows(o, ctx));
    root.append(h('div', { class: 'card' }, orders.length === 0
      ? h('div', { class: 'empty' }, t('orders.none'))
      : h('table', { id: 'orders' },
        h('thead', {}, h('tr', {}, h('th', {}, t('orders.id')), h('th', {}, t('orders.voucher')), h('th', {}, t('orders.status')), h('th', {}, t('orders.time')))),
        rows.map((x) => x.el))),
    h('p', { class: 'muted small' }, t('orders.note')));
    ctx.every(() => rows.forEach((x) => x.tick()), 250);
  }

  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

  /**
   * One order of "my orders" (a tbody): its row, and under it what its owner can do with it:
   * pay or cancel while unpaid (with the countdown to its close), ask for a refund once paid.
   * After paying, and when the countdown runs out, the order is read again every second until
   * the server moved it (paid by the gateway's notice, or closed).
   */
  function orderRows(first, ctx) {
    const el = h('tbody', { class: 'order' });
    let o = first;
    let countdown = null;
    let watching = false;
    let busy = false;
    // Ids above 2^53 lose digits in JSON.parse; idStr carries them intact.
    const id = () => o.idStr || String(o.id);

    function button(cls, key, onclick, ghost) {
      return h('button', { class: 'btn small ' + (ghost ? 'ghost ' : '') + cls, type: 'button', onclick }, t(key));
    }

    function payInfo(pm) {
      return h('div', { class: 'notice info pay-info' },
        h('div', { class: 'waiting' }, t('order.waiting')),
        h('div', { class: 'small' },
          t('order.tradeNo'), ' ', h('span', { class: 'mono trade-no' }, pm.tradeNo),
          ' · ', t('order.amount'), ' ', h('span', { class: 'amount', 'data-fen': pm.amount }, yuan(pm.amount))));
    }

    function render(msg) {
      const status = Number(o.status);
      const unpaid = status === 1;
      const deadline = Number(o.payDeadlineMillis);
      countdown = unpaid && Number.isFinite(deadline) && o.payDeadlineMillis != null
        ? h('span', { class: 'countdown muted small' }) : null;
      const actions = [];
      if (unpaid) actions.push(button('pay', 'order.pay', pay), ' ', button('cancel', 'order.cancel', cancel, true));
      if (status === 2) actions.push(button('refund', 'order.refund', refund, true));
      const info = unpaid && o.payment && o.payment.state === 'open' ? payInfo(o.payment) : null;
      el.dataset.orderId = id();
      el.dataset.status = String(status);
      el.replaceChildren(...[
        h('tr', { 'data-order-id': id() },
          h('td', { class: 'mono' }, id()),
          h('td', {}, h('a', { href: '#/dash/' + Number(o.voucherId) }, '#' + o.voucherId)),
          h('td', {}, h('span', { class: 'status-name s' + status, 'data-status': status }, t('status.' + status))),
          h('td', { class: 'small' }, String(o.createTime || '').replace('T', ' '))),
        actions.length || countdown || info || msg
          ? h('tr', { class: 'order-actions' }, h('td', { colspan: 4 },
            h('div', { class: 'row' }, h('div', { class: 'grow' }, countdown), actions), info, msg))
          : null,
      ].filter(Boolean));
      tick();
      if (info) watch();
    }

    /** Reads the order again (GET /voucher-order/{id}: the order sits under `order`). */
    async function refresh(msg) {
      const r = await api('GET', '/voucher-order/' + id());
      const d = r.ok ? r.json.data : null;
      if (d && d.order) {
        o = Object.assign({}, d.order, { idStr: d.idStr, payDeadlineMillis: d.payDeadlineMillis, payment: d.payment });
      }
      render(msg);
    }

    /** Polls until the order is no longer unpaid (or the user went elsewhere). */
    async function watch() {
      if (watching) return;
      watching = true;
      try {
        for (let i = 0; i < 600 && ctx.alive() && el.isConnected; i += 1) {
          await sleep(1000);
          if (!ctx.alive() || !el.isConnected) return;
          if (busy) continue;
          await refresh();
          if (Number(o.status) !== 1) return;
        }
      } finally {
        watching = false;
      }
    }

    /** POSTs a move; `after` gets the answer's data. A refusal is shown under the order. */
    async function act(path, after) {
      if (busy) return;
      busy = true;
      for (const b of el.querySelectorAll('button')) b.disabled = true;
      const r = await api('POST', '/voucher-order/' + id() + path);
      busy = false;
      if (r.status === 401) {
        needLogin();
        return;
      }
      if (!r.ok) {
        await refresh(notice('bad', errorText(r)));
        return;
      }
      after(r.json.data || {});
    }

    function pay() {
      return act('/pay', (ticket) => {
        o = Object.assign({}, o, {
          payment: { tradeNo: ticket.tradeNo, state: 'open', amount: ticket.amount },
          payDeadlineMillis: ticket.expiresAtMillis ?? o.payDeadlineMillis,
        });
        render();
      });
    }

    // Both answer the order as it is now.
    const moved = (d) => {
      if (d.idStr) o = d;
      render();
    };
    const cancel = () => act('/cancel', moved);
    const refund = () => act('/refund', moved);

    function tick() {
      if (!countdown) return;
      const left = Number(o.payDeadlineMillis) - (Date.now() + serverSkew);
      if (left > 0) {
        countdown.textContent = t('order.closesIn', duration(left + 999));
        return;
      }
      countdown.textContent = t('order.closing');
      const payBtn = el.querySelector('button.pay');
      if (payBtn) payBtn.disabled = true;
      watch();
    }

    render();
    return { el, tick };
  }

  async function viewMe(root) {
    await loadMe();
    root.append(h('h1', {}, t('me.title')));
    if (!me) {
      root.append(h('div', { class: 'card' }, h('p', {}, t('me.guest')),
        h('a', { class: 'btn block', href: '#/login' }, t('me.login'))));
      return;
    }
    const out = h('button', { class: 'btn ghost block', id: 'logout', type: 'button' }, t('me.logout'));
    out.addEventListener('click', async () => {
      await api('POST', '/user/logout');
      localStorage.removeItem(TOKEN_KEY);
      me = null;
      renderWho();
      go('#/login');
    });
    const sign = h('div', { class: 'card', id: 'sign-card', hidden: true });
    root.append(h('div', { class: 'card' },
      h('div', { class: 'row' }, avatar(me, 'lg'),
        h('div', { class: 'grow' }, h('div', { class: 'name', id: 'me-name' }, me.nickName || ''), h('div', { class: 'muted small' }, 'id ' + me.id))),
      h('a', { class: 'btn block', href: '#/orders' }, t('orders.title')),
      out), sign);
    const edit = h('div', { class: 'card', id: 'profile-card', hidden: true });
    root.append(edit);
    await signCard(sign);
    await profileCard(edit);
  }

  /**
   * The profile editor (`GET`/`PUT /user/info`); hidden when the server has no such route.
   * Every value goes into the page as text (`h` builds text nodes), never as markup.
   */
  async function profileCard(card) {
    const r = await api('GET', '/user/info');
    if (!r.ok || !r.json.data) {
      // An older server answers `/user/info` as `/user/{id}` with a bad id: no editor there either.
      card.dataset.state = missing(r) || r.status === 400 ? 'none' : 'failed';
      return;
    }
    const p = r.json.data;
    const field = (id, label, el) => [h('label', { for: id }, label), el];
    const nick = h('input', { id: 'p-nick', maxlength: 32, required: true, value: p.nickName || '' });
    const city = h('input', { id: 'p-city', maxlength: 64, value: p.city || '' });
    const intro = h('textarea', { id: 'p-intro', maxlength: 128, rows: 3 });
    intro.value = p.introduce || '';
    const gender = h('select', { id: 'p-gender' },
      h('option', { value: 'false', selected: p.gender !== true }, t('profile.male')),
      h('option', { value: 'true', selected: p.gender === true }, t('profile.female')));
    const today = new Date();
    const birthday = h('input', { id: 'p-birthday', type: 'date', min: '1900-01-01',
      max: today.getFullYear() + '-' + pad(today.getMonth() + 1) + '-' + pad(today.getDate()), value: p.birthday || '' });
    const result = h('div', { id: 'profile-result' });
    const form = h('form', { id: 'profile-form', novalidate: true },
      field('p-nick', t('profile.nick'), nick), field('p-city', t('profile.city'), city),
      field('p-intro', t('profile.intro'), intro), field('p-gender', t('profile.gender'), gender),
      field('p-birthday', t('profile.birthday'), birthday),
      h('button', { class: 'btn block', id: 'profile-save', type: 'submit' }, t('profile.save')), result);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const body = { nickName: nick.value, city: city.value, introduce: intro.value, gender: gender.value === 'true' };
      if (birthday.value) body.birthday = birthday.value;
      const w = await api('PUT', '/user/info', body);
      if (!w.ok) {
        result.replaceChildren(notice('bad', errorText(w)));
        return;
      }
      me.nickName = w.json.data.nickName;
      nick.value = me.nickName;
      const name = document.getElementById('me-name');
      if (name) name.textContent = me.nickName;
      renderWho();
      result.replaceChildren(notice('ok', t('profile.saved')));
    });
    card.append(h('h2', {}, t('profile.title')), form);
    card.hidden = false;
    card.dataset.state = 'shown';
  }

  // ---------------------------------------------------------------- sign-in

  /** "yyyyMM" of the month before (-1) or after (+1) `month`. */
  function shiftMonth(month, by) {
    const y = Number(month.slice(0, 4));
    const m = Number(month.slice(4, 6)) - 1 + by;
    const d = new Date(y, m, 1);
    return d.getFullYear() + pad(d.getMonth() + 1);
  }

  /**
   * The check-in card: today's button, the streak and the month's calendar (which days were
   * signed). "Today" is the server's (its time zone), so the month shown first is the one the
   * server names; the card stays hidden when the server has no sign-in routes.
   */
  async function signCard(card) {
    const btn = h('button', { class: 'btn', id: 'sign-btn', type: 'button' }, icon('check'), ' ', t('sign.do'));
    const streak = h('div', { class: 'muted small', id: 'sign-streak' });
    const title = h('strong', { class: 'grow center', id: 'sign-month' });
    const prev = h('button', { class: 'btn ghost small', type: 'button', id: 'sign-prev', 'aria-label': '‹' }, '‹');
    const next = h('button', { class: 'btn ghost small', type: 'button', id: 'sign-next', 'aria-label': '›' }, '›');
    const grid = h('div', { class: 'calendar', id: 'sign-calendar' });
    const cal = h('div', { hidden: true }, h('div', { class: 'row' }, prev, title, next), grid);
    const msg = h('div');
    card.append(h('div', { class: 'row' }, icon('calendar'), h('h2', { class: 'grow flat' }, t('sign.title')), btn),
      streak, cal, msg);
    let current = null; // the server's current month, "yyyyMM"
    let shown = null;
    let count = null;

    function render(d) {
      shown = String(d.month);
      const y = Number(shown.slice(0, 4));
      const m = Number(shown.slice(4, 6));
      title.textContent = t('sign.month', y, m);
      const signed = new Set((d.days || []).map(Number));
      const today = shown === current && typeof d.today === 'number' ? d.today : null;
      const lead = (new Date(y, m - 1, 1).getDay() + 6) % 7; // Monday first
      const days = new Date(y, m, 0).getDate();
      const cells = t('sign.weekdays').split(',').map((w) => h('span', { class: 'wd' }, w));
      for (let i = 0; i < lead; i += 1) cells.push(h('span'));
      for (let day = 1; day <= days; day += 1) {
        const cls = ['day', signed.has(day) ? 'signed' : '', day === today ? 'today' : ''].filter(Boolean).join(' ');
        cells.push(h('span', { class: cls, 'data-day': day }, String(day)));
      }
      grid.replaceChildren(...cells);
      grid.dataset.month = shown;
      next.disabled = shown === current;
      cal.hidden = false;
      if (shown === current) {
        const done = d.signedToday === true || (today != null && signed.has(today));
        btn.disabled = done;
        btn.replaceChildren(icon('check'), ' ', t(done ? 'sign.done' : 'sign.do'));
        if (typeof d.streak === 'number') {
          streak.textContent = t(done || d.streak === 0 ? 'sign.streak' : 'sign.streakOpen', d.streak);
        }
      }
    }

    async function loadMonth(month) {
      const r = await api('GET', '/user/sign/month' + (month ? '?month=' + month : ''));
      if (!r.ok || !r.json.data || !r.json.data.month) return false;
      if (!month) current = String(r.json.data.month);
      render(r.json.data);
      return true;
    }

    async function loadCount() {
      const r = await api('GET', '/user/sign/count');
      if (!r.ok || typeof r.json.data !== 'number') return false;
      count = r.json.data;
      streak.textContent = t('sign.streak', count);
      return true;
    }

    const [hasCount, hasMonth] = await Promise.all([loadCount(), loadMonth(null)]);
    if (!hasCount && !hasMonth) {
      card.dataset.state = 'none'; // no sign-in on this server: no card
      return;
    }
    card.hidden = false;
    card.dataset.state = 'shown';
    prev.addEventListener('click', () => loadMonth(shiftMonth(shown, -1)));
    next.addEventListener('click', () => loadMonth(shiftMonth(shown, 1)));
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      const r = await api('POST', '/user/sign');
      if (r.status === 401) {
        needLogin();
        return;
      }
      if (!r.ok) {
        btn.disabled = false;
        msg.replaceChildren(notice('bad', errorText(r)));
        return;
      }
      msg.replaceChildren();
      await loadCount();
      if (hasMonth) await loadMonth(current);
      else btn.replaceChildren(icon('check'), ' ', t('sign.done'));
    });
  }

  // ---------------------------------------------------------------- notes

  async function viewBlog(root, parts) {
    const id = Number(parts[0]);
    if (!token()) {
      needLogin();
      return;
    }
    const r = await api('GET', '/blog/' + id);
    if (r.status === 401) {
      needLogin();
      return;
    }
    if (!r.ok || !r.json.data) {
      root.append(missing(r) ? h('div', { class: 'empty' }, t('note.unavailable')) : notice('bad', errorText(r)));
      return;
    }
    const b = r.json.data;
    if (!me) await loadMe();
    const author = { id: b.userId, nickName: b.name, icon: b.icon };
    const follow = h('button', { class: 'btn ghost small', id: 'follow-btn', type: 'button', hidden: true }, t('note.follow'));
    const likers = h('div', { class: 'likers', id: 'likers' });
    const likersNote = h('span', { class: 'muted small', id: 'likers-count' });
    const shopBox = h('div', { id: 'note-shop' });
    const like = likeButton(b, 'btn ghost like-big', () => refreshLikes());
    like.id = 'like-btn';
    const content = richText(b.content);
    content.id = 'note-content';
    root.append(h('article', { class: 'card note', 'data-blog-id': b.id },
      h('div', { class: 'row' }, avatar(author, 'sm'),
        h('div', { class: 'grow' }, h('div', { class: 'name', id: 'note-author' }, b.name || ''),
          h('div', { class: 'muted small' }, when(b.createTime))),
        follow),
      h('div', { class: 'gallery', id: 'note-images' }, imgUrls(b.images).map((src) => picture(src))),
      h('h1', { id: 'note-title' }, b.title || ''),
      content,
      h('div', { class: 'row likes' }, like, likers, likersNote)),
    h('h2', {}, t('note.shop')), shopBox);

    api('GET', '/shop/' + Number(b.shopId)).then((rs) => {
      if (rs.ok && rs.json.data) shopBox.replaceChildren(shopCard(rs.json.data));
    });

    // The first five likers, in the order they liked; the count and our own like from the note.
    async function refreshLikes() {
      const [rb, rl] = await Promise.all([api('GET', '/blog/' + id), api('GET', '/blog/likes/' + id)]);
      if (rb.ok && rb.json.data) {
        b.liked = rb.json.data.liked;
        b.isLike = rb.json.data.isLike;
        like.refresh();
      }
      if (rl.ok && Array.isArray(rl.json.data)) {
        likers.replaceChildren(...rl.json.data.map((u) => {
          const a = avatar(u, 'xs');
          a.title = u.nickName || '';
          a.dataset.userId = u.id;
          return a;
        }));
      }
      likersNote.textContent = Number(b.liked) > 0 ? t('note.likers', b.liked) : '';
    }
    refreshLikes();

    // Follow the author (not oneself).
    if (me && Number(me.id) !== Number(b.userId)) {
      let following = null;
      const show = () => {
        follow.textContent = t(following ? 'note.following' : 'note.follow');
        follow.classList.toggle('on', following === true);
      };
      const rf = await api('GET', '/follow/or/not/' + Number(b.userId));
      if (rf.ok && typeof rf.json.data === 'boolean') {
        following = rf.json.data;
        show();
        follow.hidden = false;
        follow.addEventListener('click', async () => {
          follow.disabled = true;
          const rt = await api('PUT', '/follow/' + Number(b.userId) + '/' + !following);
          follow.disabled = false;
          if (rt.status === 401) {
            needLogin();
            return;
          }
          if (rt.ok) {
            following = !following;
            show();
          }
        });
      }
    }
  }

  async function viewFeed(root, _parts, _params, ctx) {
    if (!token()) {
      needLogin();
      return;
    }
    const list = h('div', { class: 'notes feed', id: 'feed' });
    const more = h('button', { class: 'btn ghost block', type: 'button', id: 'feed-more' }, t('feed.more'));
    root.append(h('h1', { class: 'row' }, icon('feed'), t('feed.title')), list, more);
    // The original's scroll: newest first from `lastId` (ms), skipping `offset` notes that share
    // the last page's oldest time. A day ahead of our clock, so a server clock ahead of ours
    // still shows its newest notes.
    let lastId = Date.now() + 86400000;
    let offset = 0;
    async function load() {
      more.disabled = true;
      const r = await api('GET', '/blog/of/follow?lastId=' + lastId + (offset ? '&offset=' + offset : ''));
      if (!ctx.alive()) return;
      if (r.status === 401) {
        needLogin();
        return;
      }
      if (!r.ok) {
        more.hidden = true;
        list.append(missing(r) ? h('div', { class: 'empty' }, t('feed.unavailable')) : notice('bad', errorText(r)));
        return;
      }
      const d = r.json.data;
      const items = d && Array.isArray(d.list) ? d.list : [];
      if (items.length > 0) list.append(...items.map(noteCard));
      if (items.length === 0 || d.minTime == null) {
        more.textContent = t('feed.end');
        if (list.childElementCount === 0) list.append(h('div', { class: 'empty', id: 'feed-empty' }, t('feed.none')));
        return;
      }
      lastId = Number(d.minTime);
      offset = Number(d.offset) || 0;
      if (items.length < 2) {
        more.textContent = t('feed.end'); // a short page is the last one
        return;
      }
      more.disabled = false;
    }
    more.addEventListener('click', load);
    await load();
  }

  async function viewPost(root, _parts, params) {
    if (!token()) {
      needLogin();
      return;
    }
    let shopId = Number(params.get('shop')) || null;
    const chosen = h('div', { class: 'small', id: 'post-shop' }, t('post.noShop'));
    const q = h('input', { id: 'post-shop-q', type: 'search', placeholder: t('post.shopSearch') });
    const picks = h('div', { class: 'picks', id: 'post-shop-picks' });
    const title = h('input', { id: 'post-title', maxlength: 255 });
    const text = h('textarea', { id: 'post-content', rows: 6, maxlength: 2048 });
    const file = h('input', { id: 'post-file', type: 'file', accept: 'image/*', multiple: true });
    const photos = h('div', { class: 'photos', id: 'post-photos' });
    const msg = h('div', { id: 'post-msg' });
    const submit = h('button', { class: 'btn block', id: 'post-submit', type: 'submit' }, t('post.submit'));
    const uploaded = []; // what the upload answered: "/blogs/…"

    function choose(shop) {
      shopId = Number(shop.id);
      chosen.replaceChildren(icon('pin'), ' ', t('post.chosen', shop.name));
      picks.replaceChildren();
    }
    if (shopId) {
      api('GET', '/shop/' + shopId).then((r) => { if (r.ok && r.json.data) choose(r.json.data); });
    }
    let searchSeq = 0;
    q.addEventListener('input', async () => {
      const name = q.value.trim();
      const seq = ++searchSeq;
      if (!name) {
        picks.replaceChildren();
        return;
      }
      const r = await api('GET', '/shop/of/name?name=' + encodeURIComponent(name) + '&current=1');
      if (seq !== searchSeq || !r.ok) return;
      picks.replaceChildren(...(r.json.data || []).map((shop) => {
        const b = h('button', { class: 'chip-pick', type: 'button', 'data-shop-id': shop.id }, shop.name);
        b.addEventListener('click', () => choose(shop));
        return b;
      }));
    });

    function showPhotos() {
      photos.replaceChildren(...uploaded.map((name) => {
        const rm = h('button', { class: 'rm', type: 'button', title: t('post.remove'), 'aria-label': t('post.remove') }, '×');
        rm.addEventListener('click', async () => {
          uploaded.splice(uploaded.indexOf(name), 1);
          showPhotos();
          await api('GET', '/upload/blog/delete?name=' + encodeURIComponent(name));
        });
        return h('div', { class: 'photo', 'data-name': name }, picture('/imgs' + name), rm);
      }));
    }
    file.addEventListener('change', async () => {
      msg.replaceChildren();
      for (const f of Array.from(file.files || [])) {
        const status = h('div', { class: 'muted small' }, t('post.uploading'), ' ', f.name);
        msg.append(status);
        const body = new FormData();
        body.append('file', f);
        const r = await api('POST', '/upload/blog', body);
        status.remove();
        if (r.status === 401) {
          needLogin();
          return;
        }
        if (!r.ok || typeof r.json.data !== 'string') {
          msg.append(notice('bad', f.name + ': ' + errorText(r)));
          continue;
        }
        uploaded.push(r.json.data);
        showPhotos();
      }
      file.value = '';
    });

    const form = h('form', { id: 'post-form', novalidate: true },
      h('label', { for: 'post-shop-q' }, t('post.shop')), chosen, q, picks,
      h('label', { for: 'post-title' }, t('post.noteTitle')), title,
      h('label', { for: 'post-content' }, t('post.content')), text,
      h('label', { for: 'post-file' }, t('post.photos')), photos, file,
      submit, msg);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      if (!shopId) {
        msg.replaceChildren(notice('bad', t('post.needShop')));
        return;
      }
      if (!title.value.trim()) {
        msg.replaceChildren(notice('bad', t('post.needTitle')));
        return;
      }
      submit.disabled = true;
      // As blog-edit.html: the photos as the /imgs paths they are shown at, comma-separated.
      const r = await api('POST', '/blog', {
        shopId,
        title: title.value.trim(),
        content: text.value,
        images: uploaded.map((n) => '/imgs' + n).join(','),
      });
      submit.disabled = false;
      if (r.status === 401) {
        needLogin();
        return;
      }
      if (!r.ok) {
        msg.replaceChildren(notice('bad', errorText(r)));
        return;
      }
      go('#/blog/' + Number(r.json.data));
    });
    root.append(h('h1', { class: 'row' }, icon('edit'), t('post.title')), h('div', { class: 'card' }, form));
  }

  function viewAdmin(root) {
    const tok = h('input', { id: 'admin-token', type: 'password', autocomplete: 'off', value: sessionStorage.getItem(ADMIN_KEY) || '' });
    tok.addEventListener('input', () => sessionStorage.setItem(ADMIN_KEY, tok.value));
    const now = new Date();
    now.setSeconds(0, 0);
    const field = (id, label, props) => [h('label', { for: id }, label), h('input', Object.assign({ id, name: id }, props))];
    const shopName = h('div', { class: 'muted small', id: 'admin-shop-name' });
    const form = h('form', { id: 'admin-form', novalidate: true },
      field('a-shop', t('admin.shop'), { type: 'number', min: 1, value: 1 }), shopName,
      field('a-title', t('admin.title2'), { value: '100元代金券', maxlength: 255 }),
      field('a-sub', t('admin.sub'), { value: '周一至周五可用' }),
      field('a-rules', t('admin.rules'), { value: '全场通用，无需预约' }),
      h('div', { class: 'grid2' },
        h('div', {}, field('a-pay', t('admin.pay'), { type: 'number', min: 0, step: '0.01', value: 69 })),
        h('div', {}, field('a-actual', t('admin.actual'), { type: 'number', min: 0, step: '0.01', value: 100 }))),
      field('a-stock', t('admin.stock'), { type: 'number', min: 1, value: 100 }),
      field('a-begin', t('admin.begin', browserZone()), { type: 'datetime-local', step: 1, value: localInput(now) }),
      field('a-end', t('admin.end'), { type: 'datetime-local', step: 1, value: localInput(new Date(now.getTime() + 86400000)) }),
      h('button', { class: 'btn block', id: 'admin-submit', type: 'submit' }, t('admin.submit')));
    const result = h('div', { id: 'admin-result' });
    const val = (id) => form.querySelector('#' + id).value.trim();
    // Sent with this browser's offset, so the server stores the instant the admin meant.
    const time = (id) => withOffset(val(id));
    async function showShop() {
      const r = await api('GET', '/shop/' + Number(val('a-shop')));
      shopName.textContent = r.ok && r.json.data ? r.json.data.name : (r.json.errorMsg || '');
    }
    form.querySelector('#a-shop').addEventListener('change', showShop);
    showShop();
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = {
        shopId: Number(val('a-shop')),
        title: val('a-title'),
        subTitle: val('a-sub'),
        rules: val('a-rules'),
        payValue: Math.round(Number(val('a-pay')) * 100),
        actualValue: Math.round(Number(val('a-actual')) * 100),
        stock: Number(val('a-stock')),
        beginTime: time('a-begin'),
        endTime: time('a-end'),
      };
      const btn = form.querySelector('#admin-submit');
      btn.disabled = true;
      const r = await api('POST', '/voucher/seckill', body, { 'x-admin-token': tok.value });
      btn.disabled = false;
      if (!r.ok) {
        result.replaceChildren(notice('bad', r.status === 403 ? t('admin.denied') + ' — ' + errorText(r) : errorText(r)));
        return;
      }
      const id = Number(r.json.data);
      result.dataset.voucherId = String(id);
      result.replaceChildren(notice('ok', h('div', { class: 'created' }, t('admin.created', id)),
        h('div', { class: 'row wrap' },
          h('a', { class: 'btn small', id: 'admin-open-dash', href: '#/dash/' + id }, icon('chart'), ' ', t('admin.openDash')),
          h('a', { class: 'btn ghost small', href: '#/shop/' + body.shopId }, t('admin.openShop')))));
      // Show what the server stored, in its zone and in ours.
      const st = await api('GET', '/voucher/seckill/' + id + '/stats');
      if (st.ok && st.json.data && result.dataset.voucherId === String(id)) {
        const d = st.json.data;
        const server = (x) => String(x || '').slice(0, 16).replace('T', ' ');
        result.append(h('p', { class: 'small muted', id: 'admin-stored' }, t('admin.stored',
          server(d.beginTime), server(d.endTime), 'UTC' + isoOffset(Number(d.serverUtcOffsetMinutes) || 0),
          localText(Number(d.beginMillis)), localText(Number(d.endMillis)))));
      }
    });
    root.append(h('h1', {}, t('admin.title')),
      h('div', { class: 'card' }, h('label', { for: 'admin-token' }, t('admin.token')), tok,
        h('div', { class: 'muted small' }, t('admin.tokenNote'))),
      h('div', { class: 'card' }, form, result));
  }

  const CHART_W = 600;
  const CHART_H = 180;
  const SAMPLES = 60; // 30 s at one sample per 500 ms

  function viewDash(root, parts, _params, ctx) {
    const vid = Number(parts[0]) || 1;
    const input = h('input', { id: 'dash-voucher', type: 'number', min: 1, value: vid });
    const pick = h('form', { class: 'row' }, h('div', { class: 'grow' }, input), h('button', { class: 'btn', type: 'submit' }, t('dash.go')));
    pick.addEventListener('submit', (ev) => {
      ev.preventDefault();
      go('#/dash/' + Number(input.value));
    });
    const stat = (id, key, cls) => {
      const v = h('div', { class: 'v' }, '–');
      const sub = h('div', { class: 'muted small' });
      return { el: h('div', { class: 'stat ' + (cls || ''), id }, h('div', { class: 'k' }, t(key)), v, sub), v, sub };
    };
    const st = {
      stock: stat('stat-stock', 'dash.stock'),
      accepted: stat('stat-accepted', 'dash.accepted'),
      req: stat('stat-req', 'dash.req'),
      rate: stat('stat-rate', 'dash.rate'),
      persisted: stat('stat-persisted', 'dash.persisted'),
      wrate: stat('stat-wrate', 'dash.wrate'),
      db: stat('stat-db', 'dash.db'),
      backlog: stat('stat-backlog', 'dash.backlog'),
      paid: stat('stat-paid', 'dash.paid'),
      unpaid: stat('stat-unpaid', 'dash.unpaid'),
      released: stat('stat-released', 'dash.released'),
    };
    const status = h('div', { id: 'dash-status', class: 'countdown' }, t('loading'));
    const bar = h('span');
    const err = h('div', { id: 'dash-error' });

    // The chart: accepted/s, persisted/s and requests/s on one scale; stock left as a share
    // of the sale (dashed, 0 to 100 %).
    const lineA = s('polyline', { fill: 'none', stroke: '#ff6633', 'stroke-width': 2.5, 'vector-effect': 'non-scaling-stroke', 'stroke-linejoin': 'round', id: 'line-accepted' });
    const lineP = s('polyline', { fill: 'none', stroke: '#2f6fde', 'stroke-width': 2, 'vector-effect': 'non-scaling-stroke', 'stroke-linejoin': 'round', id: 'line-persisted' });
    const lineR = s('polyline', { fill: 'none', stroke: '#1a9b50', 'stroke-width': 1.5, 'vector-effect': 'non-scaling-stroke', 'stroke-linejoin': 'round', id: 'line-requests' });
    const lineS = s('polyline', { fill: 'none', stroke: '#999', 'stroke-width': 1.5, 'vector-effect': 'non-scaling-stroke', 'stroke-dasharray': '5 4', id: 'line-stock' });
    const maxLabel = s('text', { x: 6, y: 14, 'font-size': 12, fill: '#999' }, '');
    const grid = [0.25, 0.5, 0.75].map((f) => s('line', { x1: 0, x2: CHART_W, y1: CHART_H * f, y2: CHART_H * f, stroke: '#f0f0f0' }));
    const chart = s('svg', { class: 'chart', id: 'dash-chart', viewBox: '0 0 ' + CHART_W + ' ' + CHART_H, preserveAspectRatio: 'none', role: 'img', 'aria-label': t('dash.title') },
      ...grid, lineS, lineR, lineP, lineA, maxLabel);
    const legend = h('div', { class: 'legend' },
      h('span', {}, h('i', { class: 'la' }), t('dash.legendA')),
      h('span', {}, h('i', { class: 'lp' }), t('dash.legendP')),
      h('span', {}, h('i', { class: 'lr' }), t('dash.legendR')),
      h('span', {}, h('i', { class: 'ls' }), t('dash.legendS')),
      h('span', {}, t('dash.window')));
    legend.querySelector('.la').style.background = '#ff6633';
    legend.querySelector('.lp').style.background = '#2f6fde';
    legend.querySelector('.ls').style.background = '#999';
    legend.querySelector('.lr').style.background = '#1a9b50';

    root.append(h('h1', { class: 'row' }, icon('chart'), t('dash.title')),
      h('div', { class: 'card' }, h('label', { for: 'dash-voucher' }, t('dash.voucher')), pick,
        h('p', {}, status), h('div', { class: 'bar' }, bar)),
      err,
      h('div', { class: 'stats' }, Object.values(st).map((x) => x.el)),
      h('h2', {}, t('dash.chart')),
      chart, legend);

    const samples = []; // {a: accepted/s, p: persisted/s, r: requests/s or null, s: stock share}
    let reqRate = null; // grab requests per second from /metrics, when the server has it
    let reqPrev = null;
    let reqPeak = 0;
    let prev = null;
    let peak = 0;
    let inFlight = false;

    function draw() {
      const max = Math.max(1, ...samples.map((x) => Math.max(x.a, x.p, x.r ?? 0)));
      // Fills from the left, then scrolls: the newest sample is always the last point.
      const xAt = (i) => (CHART_W * i) / (SAMPLES - 1);
      const yAt = (v) => CHART_H - 4 - ((CHART_H - 22) * v) / max;
      lineA.setAttribute('points', samples.map((x, i) => xAt(i).toFixed(1) + ',' + yAt(x.a).toFixed(1)).join(' '));
      lineP.setAttribute('points', samples.map((x, i) => xAt(i).toFixed(1) + ',' + yAt(x.p).toFixed(1)).join(' '));
      lineR.setAttribute('points', samples.filter((x) => x.r != null).length === 0 ? ''
        : samples.map((x, i) => xAt(i).toFixed(1) + ',' + yAt(x.r ?? 0).toFixed(1)).join(' '));
      lineS.setAttribute('points', samples.map((x, i) => xAt(i).toFixed(1) + ',' + (CHART_H - 4 - (CHART_H - 22) * x.s).toFixed(1)).join(' '));
      maxLabel.textContent = max.toFixed(max < 10 ? 1 : 0) + '/s';
      chart.dataset.samples = String(samples.length);
    }

    function show(x, value) {
      x.v.textContent = String(value);
      x.el.dataset.value = String(value);
    }

    async function poll() {
      if (inFlight || !ctx.alive()) return;
      inFlight = true;
      const r = await api('GET', '/voucher/seckill/' + vid + '/stats');
      inFlight = false;
      if (!ctx.alive()) return;
      if (!r.ok || !r.json.data) {
        err.replaceChildren(notice('bad', errorText(r)));
        return;
      }
      err.replaceChildren();
      const d = r.json.data;
      const left = d.redisStock ?? d.dbStock;
      const now = Number(d.nowMillis);
      let a = 0;
      let p = 0;
      if (prev && now > prev.now) {
        const dt = (now - prev.now) / 1000;
        a = Math.max(0, (d.accepted - prev.accepted) / dt);
        p = Math.max(0, (d.persisted - prev.persisted) / dt);
      }
      prev = { now, accepted: d.accepted, persisted: d.persisted };
      peak = Math.max(peak, a);
      const total = Number(left) + Number(d.accepted);
      samples.push({ a, p, r: reqRate, s: total > 0 ? Number(left) / total : 0 });
      while (samples.length > SAMPLES) samples.shift();

      show(st.stock, left);
      show(st.accepted, d.accepted);
      show(st.persisted, d.persisted);
      show(st.db, d.dbStock);
      show(st.backlog, Number(d.pending) + Number(d.lag ?? 0));
      show(st.paid, d.paid);
      const by = d.byStatus || {};
      st.paid.sub.textContent = t('dash.paidNote', by.used ?? 0, by.refunding ?? 0, by.refunded ?? 0);
      show(st.unpaid, d.unpaid);
      show(st.released, d.released);
      st.released.sub.textContent = t('dash.releasedNote');
      st.backlog.sub.textContent = 'pending ' + d.pending + ' · lag ' + (d.lag ?? '–') + ' · ' + t('dash.stream') + ' ' + d.streamLength;
      if (reqRate == null) {
        st.req.sub.textContent = t('dash.noMetrics');
      } else {
        show(st.req, reqRate.toFixed(1));
        st.req.sub.textContent = t('dash.peak', reqPeak.toFixed(1)) + ' · ' + t('dash.reqNote');
      }
      show(st.rate, a.toFixed(1));
      st.rate.sub.textContent = t('dash.peak', peak.toFixed(1));
      show(st.wrate, p.toFixed(1));
      bar.style.width = total > 0 ? (100 * Number(left) / total).toFixed(1) + '%' : '0%';

      // Instants on the server's clock: neither our zone nor our clock matters.
      const begin = Number(d.beginMillis);
      const end = Number(d.endMillis);
      const local = now;
      status.textContent = local < begin ? t('dash.notStarted', duration(begin - local))
        : local >= end ? t('dash.ended') : t('dash.running', duration(end - local));
      status.dataset.phase = local < begin ? 'before' : local >= end ? 'after' : 'open';
      draw();
    }
    // Requests per second need a request counter, which only /metrics has (all flash-sale
    // vouchers of this instance, refusals included). Without it the tile says so.
    async function pollRequests() {
      const total = await grabRequestsTotal();
      if (!ctx.alive()) return;
      const at = performance.now();
      if (total == null) {
        reqRate = null;
      } else {
        if (reqPrev && at > reqPrev.at) {
          reqRate = Math.max(0, ((total - reqPrev.total) * 1000) / (at - reqPrev.at));
          reqPeak = Math.max(reqPeak, reqRate);
        }
        reqPrev = { at, total };
      }
    }
    pollRequests();
    poll();
    ctx.every(poll, 500);
    ctx.every(pollRequests, 1000);
  }

  /**
   * Grab requests served so far (any voucher, any outcome), from `/metrics`; null without it.
   * `/metrics` needs the admin token, the one typed on the admin page (this tab only).
   */
  async function grabRequestsTotal() {
    const token = sessionStorage.getItem(ADMIN_KEY);
    if (!token) return null;
    try {
      const resp = await fetch('/metrics', { headers: { 'x-admin-token': token } });
      if (!resp.ok) return null;
      const text = await resp.text();
      if (!text.includes('hmdp_http_requests_total')) return null;
      let sum = 0;
      for (const line of text.split('\n')) {
        if (!line.startsWith('hmdp_http_requests_total{')) continue;
        if (!/route="(?:\/api)?\/voucher-order\/seckill\/\{[^"]*\}"/.test(line)) continue;
        const n = Number(line.slice(line.lastIndexOf(' ') + 1));
        if (Number.isFinite(n)) sum += n;
      }
      return sum;
    } catch (e) {
      return null;
    }
  }

  // ---------------------------------------------------------------- start

  document.getElementById('lang').addEventListener('click', () => {
    lang = lang === 'zh' ? 'en' : 'zh';
    localStorage.setItem(LANG_KEY, lang);
    applyStaticText();
    route();
  });
  window.addEventListener('hashchange', route);
  for (const el of document.querySelectorAll('#tabbar .ico[data-icon]')) el.replaceChildren(icon(el.dataset.icon));
  applyStaticText();
  loadMe();
  route();
})();
