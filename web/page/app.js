// Perch's page: chat and canvas, sensors, devices, schedules and system,
// kept live by one server-sent event stream. Plain script, no build step.
// Model output and anything else from the board is only ever placed with
// textContent (never parsed as HTML), so a reply cannot inject markup.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);

  // localStorage may be unavailable (private mode, quota): the page still works.
  // pageID tells this page's requests from other pages' in the events the
  // gateway sends every page (two tabs, a phone and a laptop).
  const pageID = Array.from(crypto.getRandomValues(new Uint8Array(8)), (x) => x.toString(16).padStart(2, '0')).join('');

  const store = {
    get(k, d) { try { const v = localStorage.getItem('perch.' + k); return v === null ? d : v; } catch { return d; } },
    set(k, v) { try { localStorage.setItem('perch.' + k, v); } catch { /* full or disabled */ } },
    del(k) { try { localStorage.removeItem('perch.' + k); } catch { /* disabled */ } },
  };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function button(text, onClick, cls) {
    const b = el('button', cls || '', text);
    b.type = 'button';
    b.addEventListener('click', onClick);
    return b;
  }

  // ---- time ----

  const fmtTime = new Intl.DateTimeFormat(undefined, { weekday: 'short', hour: '2-digit', minute: '2-digit' });
  const fmtDate = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  function when(t) {
    const d = t instanceof Date ? t : new Date(t);
    if (isNaN(d)) return '';
    return Math.abs(Date.now() - d) < 6 * 864e5 ? fmtTime.format(d) : fmtDate.format(d);
  }
  function ago(t) {
    const s = Math.round((Date.now() - new Date(t)) / 1000);
    if (!isFinite(s)) return '';
    if (s < 45) return 'just now';
    if (s < 5400) return Math.round(s / 60) + ' min ago';
    if (s < 129600) return Math.round(s / 3600) + ' h ago';
    return Math.round(s / 86400) + ' days ago';
  }
  function span(sec) {
    const units = [[86400, 'day'], [3600, 'hour'], [60, 'minute'], [1, 'second']];
    for (const [n, name] of units) if (sec % n === 0 && sec >= n) { const k = sec / n; return k + ' ' + name + (k === 1 ? '' : 's'); }
    return sec + ' seconds';
  }
  // upFor reads like a person would say it: "6 seconds", "2 h 5 min", "3 days 4 h".
  function upFor(sec) {
    if (!(sec >= 0)) return '';
    const d = Math.floor(sec / 86400), h = Math.floor(sec % 86400 / 3600), m = Math.floor(sec % 3600 / 60);
    if (d > 0) return d + (d === 1 ? ' day' : ' days') + (h ? ' ' + h + ' h' : '');
    if (h > 0) return h + ' h' + (m ? ' ' + m + ' min' : '');
    if (m > 0) return m + ' min';
    return Math.floor(sec) + (Math.floor(sec) === 1 ? ' second' : ' seconds');
  }
  // seconds reads "90" as seconds and "10m", "1h30m", "2d" as a duration.
  function seconds(s) {
    s = String(s).trim().toLowerCase();
    if (/^\d+$/.test(s)) return Number(s);
    const m = s.match(/^(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m(?:in)?)?\s*(?:(\d+)s)?$/);
    if (!m || !s) return NaN;
    return (+(m[1] || 0)) * 86400 + (+(m[2] || 0)) * 3600 + (+(m[3] || 0)) * 60 + (+(m[4] || 0));
  }

  // ---- API ----

  class APIError extends Error {
    constructor(status, message, data) { super(message); this.status = status; this.data = data; }
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // api calls the gateway; opts.signal can abort the call (status -1),
  // opts.token replaces the saved token.
  async function api(method, path, body, opts) {
    opts = opts || {};
    const headers = {};
    const token = opts.token !== undefined ? opts.token : store.get('token', '');
    if (token) headers.Authorization = 'Bearer ' + token;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    headers['X-Perch-Page'] = pageID;
    let res;
    try {
      res = await fetch(path, { method, headers, cache: 'no-store', signal: opts.signal, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      if (e.name === 'AbortError') throw new APIError(-1, 'stopped waiting');
      throw new APIError(0, 'cannot reach Perch (' + e.message + '); is the gateway running and this device on its network?');
    }
    let data = null;
    try { data = await res.json(); } catch { /* not JSON */ }
    if (!res.ok) {
      const msg = data && typeof data.error === 'string' ? data.error : 'HTTP ' + res.status + ' ' + res.statusText;
      const e = new APIError(res.status, msg, data);
      e.wait = Math.min(Math.max(Number(res.headers.get('Retry-After')) || 1, 1), 60) * 1000;
      throw e;
    }
    return data;
  }

  // Each request with a wrong token is a strike against this device (10,
  // then 429 for a while), and the page loads its panels in parallel: a
  // token refused once is not sent again until the person enters another.
  let refused = '';

  // authed retries a call after asking for the token when the API answers
  // 401, and after the wait the gateway names when it answers 429.
  async function authed(method, path, body, opts) {
    for (;;) {
      const token = store.get('token', '');
      if (token && token === refused) { await askToken('The saved token was refused.'); continue; }
      try {
        return await api(method, path, body, opts);
      } catch (e) {
        if (e.status === 429) { await sleep(e.wait); continue; }
        if (e.status !== 401) throw e;
        if (token) refused = token;
        await askToken(token ? 'The saved token was refused: ' + e.message : 'This Perch asks for its API token.');
      }
    }
  }

  // ---- token dialog ----

  let tokenWaiters = [];
  function askToken(why) {
    // Calls that fail while the dialog is open wait for the same answer,
    // without clearing what the person is typing.
    if (!$('token-dialog').open) {
      $('token-why').textContent = why || '';
      $('token').value = '';
      $('token-dialog').showModal();
      $('token').focus();
    }
    return new Promise((resolve, reject) => tokenWaiters.push({ resolve, reject }));
  }
  function settleToken(ok) {
    const waiters = tokenWaiters;
    tokenWaiters = [];
    for (const w of waiters) {
      if (ok) w.resolve(); else w.reject(new APIError(401, 'no token given; enter it in System → This browser → Enter token'));
    }
  }
  // A new token is tried with one request before the calls waiting for it
  // retry with it all at once: a mistyped one costs one strike, not one per
  // panel.
  $('token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    if (!t || $('token-save').disabled) return;
    $('token-save').disabled = true;
    try {
      for (;;) {
        $('token-why').textContent = 'Checking the token…';
        try {
          await api('GET', '/ready', undefined, { token: t });
        } catch (e) {
          if (e.status === 401) { refused = t; $('token-why').textContent = 'That token was refused; check it and try again.'; $('token').select(); return; }
          if (e.status === 429) {
            $('token-why').textContent = 'Too many wrong tokens from this device: trying this one in ' + Math.round(e.wait / 1000) + ' s…';
            await sleep(e.wait);
            if (!$('token-dialog').open) return;
            continue;
          }
          // 503 (not ready) passed the token check; offline, the calls
          // waiting for it find out.
        }
        break;
      }
    } finally {
      $('token-save').disabled = false;
    }
    store.set('token', t);
    $('token-dialog').close();
    settleToken(true);
    if (!live && !connecting) start();
  });
  $('token-cancel').addEventListener('click', () => $('token-dialog').close());
  $('token-dialog').addEventListener('close', () => settleToken(false));

  // ---- confirmation dialog ----

  function confirmAction(title, text, ok) {
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = ok;
    $('confirm-dialog').showModal();
    return new Promise((resolve) => {
      const done = (v) => { $('confirm-dialog').close(); cleanup(); resolve(v); };
      const onOk = (ev) => { ev.preventDefault(); done(true); };
      const onCancel = () => done(false);
      const onClose = () => { cleanup(); resolve(false); };
      function cleanup() {
        $('confirm-form').removeEventListener('submit', onOk);
        $('confirm-cancel').removeEventListener('click', onCancel);
        $('confirm-dialog').removeEventListener('close', onClose);
      }
      $('confirm-form').addEventListener('submit', onOk);
      $('confirm-cancel').addEventListener('click', onCancel);
      $('confirm-dialog').addEventListener('close', onClose);
    });
  }

  // ---- notice bar ----

  let noticeAction = null;
  function notice(text, opts) {
    opts = opts || {};
    $('notice-text').textContent = text;
    $('notice-setup').hidden = !opts.setup;
    $('notice-switch').hidden = !opts.action;
    noticeAction = opts.action || null;
    $('notice').hidden = !text;
  }
  $('notice-close').addEventListener('click', () => notice(''));
  $('notice-setup').addEventListener('click', () => openSetup());
  $('notice-switch').addEventListener('click', () => { if (noticeAction) noticeAction(); notice(''); });

  // ---- tabs ----

  let panel = 'chat';
  function show(name) {
    panel = name;
    for (const b of $('tabs').querySelectorAll('button')) {
      const on = b.dataset.panel === name;
      b.setAttribute('aria-selected', on ? 'true' : 'false');
      $('panel-' + b.dataset.panel).hidden = !on;
    }
    if (name === 'chat') { chatBadge(0); markRead(); }
    if (name === 'devices') { $('devices-badge').hidden = true; devicesSeen = 0; }
    if (name === 'sensors') drawCharts();
    // The stream's status comes every 30 s: the panel opened shows now's.
    if (name === 'system') loadStatus(true);
  }
  for (const b of $('tabs').querySelectorAll('button')) b.addEventListener('click', () => show(b.dataset.panel));
  $('state').addEventListener('click', () => show('system'));

  // ---- chat ----

  // A page's chat is the session web:<chat>. Pages of an older version kept
  // a random session key "web:xxxxxxxx"; it stays their chat.
  function validChat(c) { return /^[A-Za-z0-9_.-]{1,64}$/.test(c); }
  let chatID = store.get('chat', '');
  if (!validChat(chatID)) {
    const old = store.get('session', '');
    chatID = old.startsWith('web:') && validChat(old.slice(4)) ? old.slice(4) : 'home';
  }
  store.set('chat', chatID);
  // The newest message time shown in the log (ms), always the board's: a
  // phone's clock ahead of it would mark later reminders as read.
  let lastShown = 0;
  let unreadHere = 0;

  function readMark() { return Number(store.get('read.' + chatID, '0')) || 0; }
  // markRead records that the person saw the chat up to its newest message:
  // when the page is visible with the chat in front.
  function markRead() {
    if (document.visibilityState !== 'visible' || panel !== 'chat' || !lastShown) return;
    if (lastShown > readMark()) store.set('read.' + chatID, String(lastShown));
    chatBadge(0);
  }
  document.addEventListener('visibilitychange', markRead);

  function chatBadge(n) {
    unreadHere = n;
    $('chat-badge').textContent = String(n);
    $('chat-badge').hidden = n === 0;
  }

  // renderText shows text with ``` fenced blocks as code, everything as text.
  // A fence opens only at the start of a line, as in Markdown, and only a
  // one-word rest of its line is a language tag: ``` inside a sentence and
  // a pair on one line (inline code) keep the words around them. With rich
  // (Perch's answers, which models write in Markdown) it also shows lists,
  // headings, bold, italics and links; it builds nodes, never HTML, so a
  // message cannot put markup in the page.
  function renderText(into, text, rich) {
    // lists are the open lists, outermost first, each with the indent of
    // its items: an item indented past its list's starts a list inside
    // the item above it, as models write steps with their details.
    let para = [], code = null, lists = [];
    const endList = () => { lists = []; };
    const flush = () => {
      const t = trimNewlines(para.join('\n'));
      para = [];
      if (t.trim() === '') return;
      const p = el('p');
      inline(p, t, rich);
      into.appendChild(p);
    };
    const block = () => {
      const pre = el('pre');
      pre.appendChild(el('code', '', code.join('\n')));
      into.appendChild(pre);
      code = null;
    };
    for (const line of String(text).split('\n')) {
      const f = line.match(/^ {0,3}```(.*)$/);
      if (code) {
        if (!f) { code.push(line); continue; }
        block();
        if (f[1].trim()) para.push(f[1].trim());
        continue;
      }
      if (f && !f[1].includes('`')) {
        flush(); endList();
        code = /^\s*\S*\s*$/.test(f[1]) ? [] : [f[1]];
        continue;
      }
      if (rich && /^ {0,3}([-*_])(?: *\1){2,} *$/.test(line)) { // a rule: * * *, ---
        flush(); endList();
        into.appendChild(el('hr'));
        continue;
      }
      if (rich) {
        const item = line.length <= 4000 && line.match(/^( *)(?:([-*+])|(\d{1,9})[.)])( +)(.*)$/);
        const head = line.length <= 4000 && line.match(/^ {0,3}#{1,6} +(.*?)(?: +#+)? *$/);
        if (item && (item[1].length <= 3 || lists.length)) {
          flush();
          // An item nests when it starts at or past the text of the item
          // above (its content column, as in CommonMark): a stray space
          // does not nest it.
          const indent = item[1].length, tag = item[2] ? 'ul' : 'ol';
          const content = indent + (item[2] ? 1 : item[3].length + 1) + Math.min(item[4].length, 4);
          while (lists.length && lists[lists.length - 1].indent > indent) lists.pop();
          let top = lists[lists.length - 1];
          const nest = top && indent >= top.content;
          if (!top || nest || top.el.tagName.toLowerCase() !== tag) {
            if (top && !nest) lists.pop(); // another kind of list beside it
            const l = el(tag);
            if (tag === 'ol' && item[3] !== '1') l.start = Number(item[3]);
            const outer = lists[lists.length - 1];
            (outer ? outer.el.lastElementChild : into).appendChild(l);
            lists.push(top = { el: l, indent, content });
          }
          const li = el('li');
          inline(li, item[5], true);
          top.el.appendChild(li);
          continue;
        }
        if (lists.length && /^\s{2,}\S/.test(line)) { // an item's next line
          const li = lists[lists.length - 1].el.lastElementChild;
          li.append('\n');
          inline(li, line.trim(), true);
          continue;
        }
        if (head) {
          flush(); endList();
          const h = el('p', 'heading');
          h.appendChild(el('strong', '', ''));
          inline(h.firstChild, head[1], true);
          into.appendChild(h);
          continue;
        }
        // A blank line between items keeps the list (a loose list: the
        // numbering goes on); text not indented under an item ends it.
        if (line.trim() === '') { if (lists.length) continue; } else if (lists.length) endList();
      }
      para.push(line);
    }
    if (code) block(); else flush();
  }

  // trimNewlines drops the newlines at both ends (a regular expression for
  // it was quadratic in a long run of them).
  function trimNewlines(t) {
    let a = 0, b = t.length;
    while (a < b && t[a] === '\n') a++;
    while (b > a && t[b - 1] === '\n') b--;
    return t.slice(a, b);
  }

  // inline appends text to into with `code` spans as code and, when rich,
  // **bold**, *italic* (or _italic_, not inside a word: snake_case stays)
  // and [links](https://…) (http and https only, opened in a new tab).
  const INLINE_CODE = /(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)/g;
  // Spans end at their first closing mark (lazy), a link's text holds no
  // bracket and its address one level of parentheses (Wikipedia's).
  const INLINE_RICH = /(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)|\*\*(\S(?:.*?\S)??)\*\*|__(\S(?:.*?\S)??)__|(?<![\w*])\*(\S(?:.*?\S)??)\*(?![\w*])|(?<![\w_])_(\S(?:.*?\S)??)_(?![\w_])|\[([^[\]\n]+)\]\((https?:\/\/(?:[^\s()]|\([^\s()]*\))+)\)/g;
  // An emphasis mark left open scans to the end of its line, for each
  // mark: on a line of tens of KB (a command's output) that took seconds.
  // Such lines show code spans only.
  // Anchored at a line's start: unanchored, the test itself was tried at
  // every character and scanned on to the line's end. A paragraph over
  // 20,000 characters shows code spans only too (each line's scan adds up).
  const LONG_LINE = /(?:^|\n)[^\n]{4001}/;
  function inline(into, t, rich) {
    let at = 0;
    if (rich && (t.length > 20000 || LONG_LINE.test(t))) rich = false;
    for (const m of t.matchAll(rich ? INLINE_RICH : INLINE_CODE)) {
      into.append(t.slice(at, m.index));
      at = m.index + m[0].length;
      if (m[2] !== undefined) { into.appendChild(el('code', '', m[2])); continue; }
      if (m[7] !== undefined) {
        const a = el('a', '', m[7]);
        a.href = m[8];
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        into.appendChild(a);
        continue;
      }
      const strong = m[3] !== undefined ? m[3] : m[4];
      const node = el(strong !== undefined ? 'strong' : 'em');
      inline(node, strong !== undefined ? strong : (m[5] !== undefined ? m[5] : m[6]), true);
      into.appendChild(node);
    }
    into.append(t.slice(at));
  }

  const MAX_LOG = 150;
  function addMessage(role, text, opts) {
    opts = opts || {};
    // The empty chat's greeting goes with its first message.
    if (role === 'user' || role === 'agent') for (const h of $('log').querySelectorAll('.hello')) h.remove();
    const li = el('li', 'msg ' + role);
    if (opts.pushed) { li.classList.add('pushed'); li.appendChild(el('span', 'tag', 'Perch · ' + (opts.t ? when(opts.t) : 'now'))); }
    if (opts.unread) li.classList.add('unread');
    renderText(li, text, role === 'agent');
    $('log').appendChild(li);
    while ($('log').children.length > MAX_LOG) $('log').firstElementChild.remove();
    // A message taller than the log is read from its start, not its end.
    li.scrollIntoView({ block: li.offsetHeight > $('log').clientHeight ? 'start' : 'end' });
    if (opts.t && opts.t > lastShown) lastShown = opts.t;
    return li;
  }

  function showError(e) {
    const li = addMessage('error', e.message);
    if (e.status === 503 && /no provider/i.test(e.message)) li.appendChild(button('Open the setup form', () => openSetup()));
  }

  async function loadHistory() {
    let h;
    try {
      h = await authed('GET', '/web/history?chat=' + encodeURIComponent(chatID));
    } catch (e) {
      $('log').replaceChildren();
      addMessage('error', 'The chat could not be loaded: ' + e.message);
      return;
    }
    $('log').replaceChildren();
    lastShown = 0;
    const mark = readMark();
    // Without a mark (a new browser), what came after the person last spoke
    // is new to them.
    let since = mark;
    if (!since) for (const m of h.messages) if (m.role === 'user') since = m.t;
    let unread = 0, divided = false;
    for (const m of h.messages) {
      const isNew = m.role === 'assistant' && m.t > since;
      if (isNew && !divided) { $('log').appendChild(el('li', 'divider', 'New since you last looked')); divided = true; }
      if (isNew) unread++;
      addMessage(m.role === 'user' ? 'user' : 'agent', m.text, { t: m.t, pushed: m.pushed, unread: isNew });
    }
    if (!h.messages.length) addMessage('note', 'Chat ' + chatID + '. Say hello.').classList.add('hello');
    if (sending && sending.chat === chatID) { $('log').appendChild(sending.li); sending.li.scrollIntoView({ block: 'end' }); }
    if (panel !== 'chat') chatBadge(unread);
    markRead();
    loadCanvas();
  }

  // receive shows a message the gateway pushed: one sent to a chat (a
  // reminder, a notice), or either half of an exchange another page (or a
  // client such as `perch agent`) had in it. This page's own exchanges come
  // back too, marked with its id: it showed them from the answer.
  function receive(m) {
    if (m.page && m.page === pageID) return;
    if (m.chat !== chatID) {
      // Another page's conversation in another chat is there when the
      // person opens that chat; only what Perch sent unasked is news.
      if (m.pushed) notice('Perch sent a message to your chat “' + m.chat + '”.', { action: () => switchChat(m.chat) });
      return;
    }
    if (m.role === 'user') addMessage('user', m.text, { t: m.t });
    else {
      const away = panel !== 'chat' || document.visibilityState !== 'visible';
      addMessage('agent', m.text, { t: m.t, pushed: m.pushed, unread: away });
      if (away) chatBadge(unreadHere + 1);
      else markRead();
    }
    // This page's own question is still waiting: its line stays last.
    if (sending && sending.chat === chatID) $('log').appendChild(sending.li);
  }

  // sending is the message waiting for its answer: the chat it went to and
  // its "thinking" line. The person may switch chats meanwhile; the answer
  // belongs to the chat it was asked in.
  let sending = null;
  const SLOW = 15; // seconds before the wait shows its time and a Cancel
  async function send(text) {
    const chat = chatID;
    $('send').disabled = true;
    addMessage('user', text);
    const li = addMessage('pending', 'Perch is thinking…');
    sending = { chat, li };
    // A provider that does not answer holds a turn for minutes: the person
    // sees how long it has been and may stop waiting.
    const ctl = new AbortController(), began = Date.now();
    const tick = setInterval(() => {
      const s = Math.round((Date.now() - began) / 1000);
      if (s < SLOW) return;
      li.firstElementChild.textContent = 'Perch is thinking… (' + upFor(s) + ' so far)';
      if (!li.querySelector('button')) li.appendChild(button('Cancel', () => ctl.abort()));
    }, 1000);
    try {
      const r = await authed('POST', '/chat', { message: text, session_key: 'web:' + chat, channel: 'web', chat_id: chat }, { signal: ctl.signal });
      li.remove();
      const ui = r && Array.isArray(r.ui_commands) ? r.ui_commands : [];
      if (chat === chatID) {
        addMessage('agent', r && r.response ? r.response : '(no text in the reply)', { t: r && r.t });
        markRead();
      } else {
        notice('Perch answered in your chat “' + chat + '”.', { action: () => switchChat(chat) });
      }
      for (const c of ui) applyUI(c, chat);
      if (!live && !connecting) start();
    } catch (e) {
      li.remove();
      // The gateway ends a turn whose caller went away: no answer follows.
      if (e.status === -1) addMessage('note', 'Cancelled. Perch stopped working on this message when the page stopped waiting, so no answer will come; the message stays in the chat. Send it again to retry.');
      else if (chat === chatID) showError(e);
      else notice('Perch could not answer in your chat “' + chat + '”: ' + e.message, { action: () => switchChat(chat) });
    } finally {
      clearInterval(tick);
      sending = null;
      $('send').disabled = false;
    }
  }

  $('send-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('message').value;
    if (sending || text.trim() === '') return;
    $('message').value = '';
    send(text);
  });
  $('message').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('send-form').requestSubmit();
    }
  });

  // ---- canvas ----

  const FIELDS = ['type', 'title', 'content', 'x', 'y', 'width', 'height'];
  let nodes = new Map();
  let unseen = 0;

  // changeNodes applies one canvas command to a chat's nodes; false when it
  // is none.
  function changeNodes(m, c) {
    if (!c || c.command !== 'canvas') return false;
    const id = typeof c.node_id === 'string' ? c.node_id : '';
    switch (c.action) {
      case 'create_node':
      case 'update_node': {
        if (!id) return false;
        const n = (c.action === 'update_node' && m.get(id)) || { node_id: id, type: 'text' };
        for (const k of FIELDS) if (c[k] !== undefined && c[k] !== null) n[k] = c[k];
        m.set(id, n);
        return true;
      }
      case 'delete_node': m.delete(id); return true;
      case 'clear': m.clear(); return true;
      default: return false;
    }
  }

  // applyUI applies a command to chat's canvas: the one shown, or the one
  // kept for another chat, which shows it when the person switches to it.
  function applyUI(c, chat) {
    if (chat !== undefined && chat !== chatID) {
      const m = storedNodes(chat);
      if (changeNodes(m, c)) store.set('canvas.' + chat, JSON.stringify(Array.from(m.values())));
      return;
    }
    if (!changeNodes(nodes, c)) return;
    drawCanvas();
    saveCanvas();
    if (!$('panel-chat').classList.contains('canvas-open')) {
      unseen++;
      $('canvas-badge').textContent = String(unseen);
      $('canvas-badge').hidden = false;
    }
  }

  // mediaSource decides how a URL may be shown: inline (data: of the right
  // kind, or this origin) or only as a link (the CSP forbids other origins).
  function mediaSource(s, kind) {
    s = String(s || '').trim();
    if (s.startsWith('data:' + kind + '/')) return { src: s };
    try {
      const u = new URL(s, location.href);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
      return u.origin === location.origin ? { src: u.href } : { link: u.href };
    } catch { return null; }
  }

  function nodeBody(n) {
    const kind = n.type === 'image' || n.type === 'video' ? n.type : null;
    if (n.type === 'code') {
      const pre = el('pre');
      pre.appendChild(el('code', '', n.content || ''));
      return pre;
    }
    if (!kind) return el('p', '', n.content || '');
    const m = mediaSource(n.content, kind);
    if (m && m.src) {
      const media = el(kind === 'image' ? 'img' : 'video');
      if (kind === 'image') media.alt = n.title || 'image';
      else { media.controls = true; media.preload = 'metadata'; }
      media.src = m.src;
      return media;
    }
    if (m && m.link) {
      const p = el('p', '', 'This ' + kind + ' is on another site, which this page does not load: ');
      const a = el('a', '', m.link);
      a.href = m.link;
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
      p.appendChild(a);
      return p;
    }
    return el('p', 'muted', 'Cannot show this ' + kind + ': its content is not a data: URI or a web address.');
  }

  function px(v) { return typeof v === 'number' && isFinite(v) ? v + 'px' : ''; }

  function drawCanvas() {
    const box = $('canvas');
    box.replaceChildren();
    if (nodes.size === 0) { box.appendChild(emptyHint); return; }
    for (const n of nodes.values()) {
      const card = el('article', 'node node-' + (['text', 'code', 'image', 'video'].includes(n.type) ? n.type : 'text'));
      card.dataset.nodeId = n.node_id;
      if (n.title) card.appendChild(el('h3', '', n.title));
      card.appendChild(nodeBody(n));
      // Styles set through the CSSOM are allowed by the CSP (no inline style attribute).
      if (typeof n.x === 'number' || typeof n.y === 'number') {
        card.classList.add('placed');
        card.style.left = px(n.x || 0);
        card.style.top = px(n.y || 0);
      }
      card.style.width = px(n.width);
      card.style.height = px(n.height);
      box.appendChild(card);
    }
  }

  function saveCanvas() { store.set('canvas.' + chatID, JSON.stringify(Array.from(nodes.values()))); }
  function storedNodes(chat) {
    const m = new Map();
    let saved = [];
    try { saved = JSON.parse(store.get('canvas.' + chat, '[]')); } catch { saved = []; }
    for (const n of Array.isArray(saved) ? saved : []) if (n && typeof n.node_id === 'string') m.set(n.node_id, n);
    return m;
  }
  function loadCanvas() {
    nodes = storedNodes(chatID);
    drawCanvas();
  }
  const emptyHint = $('canvas-empty');

  $('canvas-clear').addEventListener('click', () => { nodes.clear(); drawCanvas(); saveCanvas(); });
  $('show-canvas').addEventListener('click', () => {
    $('panel-chat').classList.add('canvas-open');
    unseen = 0;
    $('canvas-badge').hidden = true;
  });
  $('hide-canvas').addEventListener('click', () => $('panel-chat').classList.remove('canvas-open'));

  // ---- sensors ----

  let sensors = { sensors: [], status: [], sample_seconds: 60 };
  let range = store.get('range', '24h');
  const COLORS = ['#2f6fd6', '#d0602a', '#2e9d5b', '#a64bd6', '#b8901a', '#1c9aa8'];
  const PRECISION = { temperature: 1, humidity: 0, pressure: 1, illuminance: 0 };

  function fmtValue(q, v) { return Number(v).toFixed(PRECISION[q] !== undefined ? PRECISION[q] : 2); }

  function renderSensors() {
    const box = $('sensor-cards');
    box.replaceChildren();
    const status = new Map((sensors.status || []).map((s) => [s.name, s]));
    for (const s of sensors.sensors || []) {
      const card = el('article', 'card sensor');
      card.dataset.sensor = s.name;
      card.appendChild(el('h3', '', s.name));
      const vals = el('div', 'values');
      for (const v of s.values || []) {
        const d = el('div', 'value');
        d.dataset.quantity = v.quantity;
        // at_least: the part read its highest value (a light sensor in
        // direct sun), so the quantity is that or more.
        d.appendChild(document.createTextNode((v.at_least ? '≥ ' : '') + fmtValue(v.quantity, v.value)));
        if (v.at_least) d.title = "the sensor's ceiling: brighter light reads the same";
        d.appendChild(el('small', '', v.unit));
        d.appendChild(el('span', 'q', v.quantity));
        vals.appendChild(d);
      }
      card.appendChild(vals);
      const age = el('p', 'age', s.time ? 'measured ' + ago(s.time) : 'not measured yet');
      age.dataset.time = s.time || '';
      card.appendChild(age);
      if (s.error) card.appendChild(el('p', 'error', s.error));
      const st = status.get(s.name);
      card.appendChild(el('p', 'where', (s.chip || s.type) + ', ' + (st && st.where ? st.where : s.where) + (st && !st.ok ? ' — ' + st.message : '')));
      box.appendChild(card);
    }
    $('sensors-note').textContent = (sensors.sensors || []).length
      ? 'Sampled every ' + span(sensors.sample_seconds || 60) + ' and kept for a year (hourly after 48 hours).'
      : 'No sensors are configured. List them under "sensors" in the config file (the Devices panel\'s I²C scan shows what is connected), or ask Perch in the chat how to add one.';
  }

  // Ages move on without a request: one clock for the whole page.
  setInterval(() => {
    for (const a of document.querySelectorAll('.age[data-time]')) if (a.dataset.time) a.textContent = 'measured ' + ago(a.dataset.time);
  }, 30000);

  let charts = [];
  let history = null; // {range, bySensor: Map(name -> body), at}
  async function loadHistory24(force) {
    const names = (sensors.sensors || []).map((s) => s.name);
    if (!names.length) { history = { range, bySensor: new Map(), at: Date.now() }; return; }
    if (!force && history && history.range === range && Date.now() - history.at < 60000) return;
    const want = range;
    const bodies = await Promise.all(names.map((n) => authed('GET', '/sensors/history?name=' + encodeURIComponent(n) + '&since=' + want)
      .catch((e) => ({ sensor: n, series: [], error: e.message }))));
    if (want !== range) return;
    history = { range: want, bySensor: new Map(bodies.map((b) => [b.sensor, b])), at: Date.now() };
  }

  function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  // drawCharts draws one chart per quantity, a line per sensor (the mean)
  // with a band from minimum to maximum, for the chosen range.
  async function drawCharts() {
    if (panel !== 'sensors') return;
    await loadHistory24(false);
    if (panel !== 'sensors' || !history) return;
    for (const c of charts) c.destroy();
    charts = [];
    const box = $('charts');
    box.replaceChildren();
    const byQty = new Map();
    let i = 0;
    for (const [name, body] of history.bySensor) {
      for (const s of body.series || []) {
        if (!byQty.has(s.quantity)) byQty.set(s.quantity, { unit: s.unit, lines: [] });
        byQty.get(s.quantity).lines.push({ name, s, color: COLORS[i % COLORS.length] });
      }
      i++;
    }
    const order = ['temperature', 'humidity', 'pressure', 'illuminance'];
    const rank = (q) => { const i = order.indexOf(q); return i < 0 ? order.length : i; };
    const sortedQty = new Map([...byQty].sort((a, b) => rank(a[0]) - rank(b[0]) || a[0].localeCompare(b[0])));
    if (!byQty.size) {
      box.appendChild(el('p', 'muted', (sensors.sensors || []).length ? 'No history in this range yet: readings are stored as they are sampled.' : ''));
      return;
    }
    for (const [q, g] of sortedQty) box.appendChild(chart(q, g));
  }

  const RANGE_SECONDS = { '24h': 86400, '7d': 7 * 86400, '1y': 365 * 86400 };

  // timeRange is the time axis: the data's span, but at least a 24th of the
  // chosen range, ending now. A sensor's first reading is one point, which
  // the chart library would spread over a thousand days (it passes that
  // span in min and max, so the data's own is read here).
  function timeRange(u, min, max) {
    const ts = u.data[0] || [];
    const least = (RANGE_SECONDS[range] || 86400) / 24;
    if (!ts.length || ts[ts.length - 1] - ts[0] >= least) return [min, max];
    const end = Math.max(ts[ts.length - 1], Date.now() / 1000);
    return [Math.min(ts[0], end - least), end];
  }

  // labelWidth sizes the value axis to its widest label (a light sensor's
  // 54612 is wider than a temperature's 21.5).
  function labelWidth(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1 && axis._size) return axis._size;
    let widest = 0;
    if (values && values.length) {
      u.ctx.font = axis.font[0];
      for (const v of values) widest = Math.max(widest, u.ctx.measureText(v).width / devicePixelRatio);
    }
    return Math.max(44, Math.ceil(widest + axis.ticks.size + axis.gap + 4));
  }

  function chart(q, g) {
    const wrap = el('figure', 'chart');
    wrap.style.margin = '0';
    wrap.dataset.quantity = q;
    wrap.appendChild(el('h3', '', q.charAt(0).toUpperCase() + q.slice(1) + ' (' + g.unit + ')'));
    const hint = 'Touch or point at the chart to read a value.';
    const readout = el('p', 'readout', hint);
    wrap.appendChild(readout);
    const plot = el('div', 'plot');
    wrap.appendChild(plot);
    const keys = el('div', 'keys');
    for (const l of g.lines) { const k = el('span', '', l.name); k.style.setProperty('--key', l.color); keys.appendChild(k); }
    wrap.appendChild(keys);
    // Points of every sensor on one time axis (the store aligns them to the step).
    const ts = Array.from(new Set(g.lines.flatMap((l) => l.s.t))).sort((a, b) => a - b);
    const index = new Map(ts.map((t, i) => [t, i]));
    const data = [ts];
    const series = [{}];
    const bands = [];
    for (const l of g.lines) {
      const cols = { mean: new Array(ts.length).fill(null), min: new Array(ts.length).fill(null), max: new Array(ts.length).fill(null) };
      l.s.t.forEach((t, i) => { const j = index.get(t); cols.mean[j] = l.s.mean[i]; cols.min[j] = l.s.min[i]; cols.max[j] = l.s.max[i]; });
      const base = data.length;
      data.push(cols.mean, cols.min, cols.max);
      series.push({ label: l.name, stroke: l.color, width: 2, points: { show: ts.length < 60 } },
        { label: l.name + ' min', stroke: 'transparent', points: { show: false } },
        { label: l.name + ' max', stroke: 'transparent', points: { show: false } });
      bands.push({ series: [base + 2, base + 1], fill: l.color + '33' });
    }
    const fg = cssVar('--muted') || '#666', grid = cssVar('--line') || '#ddd';
    const fmt = (v) => v === null || v === undefined ? '–' : fmtValue(q, v);
    const opts = {
      width: 300, height: 190, legend: { show: false }, bands, series,
      scales: { x: { time: true, range: timeRange } },
      axes: [
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } },
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, size: labelWidth, values: (u, vals) => vals.map((v) => fmtValue(q, v)) },
      ],
      cursor: { drag: { x: false, y: false } },
      hooks: {
        // The time axis's span in seconds, which the canvas does not show
        // to the page's tests.
        setScale: [(u, key) => { if (key === 'x') wrap.dataset.seconds = String(Math.round(u.scales.x.max - u.scales.x.min)); }],
        setCursor: [(u) => {
          const i = u.cursor.idx;
          if (i === null || i === undefined) { readout.textContent = hint; return; }
          const parts = g.lines.map((l, k) => l.name + ' ' + fmt(u.data[1 + 3 * k][i]) + ' ' + g.unit +
            ' (' + fmt(u.data[2 + 3 * k][i]) + '–' + fmt(u.data[3 + 3 * k][i]) + ')');
          readout.textContent = when(new Date(u.data[0][i] * 1000)) + ' · ' + parts.join(' · ');
        }],
      },
    };
    // uPlot is loaded with defer before this script; without it (a broken
    // download) the page shows the latest values only.
    if (typeof uPlot !== 'function') { plot.appendChild(el('p', 'muted', 'The chart library did not load; reload the page.')); return wrap; }
    requestAnimationFrame(() => {
      const u = new uPlot(opts, data, plot);
      u.setSize({ width: Math.max(200, plot.clientWidth), height: 190 });
      charts.push(u);
    });
    return wrap;
  }

  for (const b of $('range').querySelectorAll('button')) {
    b.setAttribute('aria-pressed', b.dataset.range === range ? 'true' : 'false');
    b.addEventListener('click', () => {
      range = b.dataset.range;
      store.set('range', range);
      for (const x of $('range').querySelectorAll('button')) x.setAttribute('aria-pressed', x === b ? 'true' : 'false');
      history = null;
      drawCharts();
    });
  }
  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { for (const c of charts) c.setSize({ width: Math.max(200, c.root.parentElement.clientWidth), height: 190 }); }, 150);
  });

  async function loadSensors() {
    try { sensors = await authed('GET', '/sensors'); } catch (e) { $('sensors-note').textContent = e.message; return; }
    renderSensors();
    history = null;
    drawCharts();
  }

  function onSensors(latest) {
    sensors.sensors = latest;
    renderSensors();
    // A new sample: the day's chart grows a point; longer ranges change
    // only by the hour, and are reloaded when the panel is shown again.
    if (panel === 'sensors' && range === '24h' && history && Date.now() - history.at > 60000) { history = null; drawCharts(); }
  }

  // ---- devices ----

  let devicesSeen = 0;
  function usbName(d) {
    const m = (d.manufacturer || '').trim(), p = (d.product || '').trim();
    if (p && m && !p.toLowerCase().startsWith(m.toLowerCase())) return m + ' ' + p;
    return p || m || 'USB device ' + d.vendor_id + ':' + d.product_id;
  }
  function renderUSB(list, monitor) {
    const ul = $('usb-list');
    ul.replaceChildren();
    for (const d of list || []) {
      const li = el('li', 'usb');
      li.dataset.port = d.port;
      const line = el('div', 'line');
      line.appendChild(el('strong', 'grow', usbName(d)));
      line.appendChild(el('span', 'pill', d.vendor_id + ':' + d.product_id));
      li.appendChild(line);
      li.appendChild(el('p', 'sub', 'port ' + d.port + (d.class ? ' · ' + d.class : '') + (d.serial ? ' · serial ' + d.serial : '')));
      ul.appendChild(li);
    }
    if (!ul.children.length) ul.appendChild(el('li', 'muted', 'No USB device is connected.'));
    if (monitor !== undefined) $('usb-monitor').textContent = monitor;
  }
  function onUSB(e) {
    renderUSB(e.devices);
    const ol = $('usb-events');
    if (ol.firstElementChild && ol.firstElementChild.classList.contains('muted')) ol.replaceChildren();
    const li = el('li', e.connected ? 'plugged' : 'unplugged');
    li.appendChild(el('strong', '', (e.name || usbName(e.device)) + (e.connected ? ' plugged in' : ' removed')));
    li.appendChild(el('p', 'sub', when(new Date()) + ' · port ' + e.device.port + (e.offline ? ' · while Perch was stopped' : '')));
    ol.prepend(li);
    while (ol.children.length > 20) ol.lastElementChild.remove();
    if (panel !== 'devices') { devicesSeen++; $('devices-badge').textContent = String(devicesSeen); $('devices-badge').hidden = false; }
  }

  async function loadI2C() {
    const box = $('i2c-buses');
    let r;
    try { r = await authed('GET', '/i2c'); } catch (e) { box.replaceChildren(el('p', 'error', e.message)); return; }
    box.replaceChildren();
    if (r.error) box.appendChild(el('p', 'muted', r.error));
    const ul = el('ul', 'list');
    for (const b of r.buses || []) {
      const li = el('li', 'scan');
      li.dataset.bus = String(b.number >= 0 ? b.number : b.name);
      const line = el('div', 'line');
      line.appendChild(el('strong', 'grow', 'Bus ' + (b.number >= 0 ? b.number + ' (' + b.name + ')' : b.name) +
        (b.header ? ' · pin header' : '')));
      const out = el('div', 'scan-out');
      line.appendChild(button('Scan', () => scan(li.dataset.bus, out)));
      li.appendChild(line);
      li.appendChild(out);
      ul.appendChild(li);
    }
    if (ul.children.length) box.appendChild(ul);
  }

  async function scan(bus, out) {
    const ok = await confirmAction('Scan I²C bus ' + bus + '?',
      'Every address from 0x03 to 0x77 is asked whether a device is there, with the probe i2cdetect uses for it. ' +
      'A few chips can be confused by a probe (rarely: some EEPROMs, write-only chips). Scan now?', 'Scan');
    if (!ok) return;
    out.replaceChildren(el('p', 'muted', 'Scanning…'));
    let r;
    try { r = await authed('POST', '/i2c/scan', { bus }); } catch (e) { out.replaceChildren(el('p', 'error', e.message)); return; }
    out.replaceChildren();
    if (!r.found.length) { out.appendChild(el('p', 'muted', 'No device answered. Check the wiring (SDA, SCL, 3.3 V, ground) and that the device is powered.')); return; }
    const t = el('table');
    const head = el('tr');
    for (const h of ['Address', 'Likely part']) head.appendChild(el('th', '', h));
    t.appendChild(head);
    for (const f of r.found) {
      const tr = el('tr');
      tr.appendChild(el('td', '', f.hex + (f.busy ? ' (in use by ' + (f.driver ? 'kernel driver ' + f.driver + (f.driver_bus != null ? ' on bus ' + f.driver_bus + ', behind a multiplexer' : '') : 'the kernel') + '; not probed, reads and writes refused)' : '')));
      tr.appendChild(el('td', '', f.parts.length ? f.parts.map((p) => p.name + (p.type ? ' — sensor type ' + p.type : '')).join(' or ') : 'unknown part'));
      t.appendChild(tr);
    }
    out.appendChild(t);
    if (r.found.some((f) => f.parts.some((p) => p.type))) {
      out.appendChild(el('p', 'hint', 'Parts with a sensor type can be read by name once listed under "sensors" in the config, e.g. {"name": "greenhouse", "type": "bme280", "bus": "' + bus + '"}.'));
    }
  }

  // ---- schedules ----

  function describeSchedule(j) {
    const s = j.schedule || {};
    if (s.at_seconds !== undefined) return 'once' + (j.next_run ? ', ' + when(j.next_run) : '');
    if (s.every_seconds !== undefined) return 'every ' + span(s.every_seconds);
    if (s.cron_expr) return 'cron ' + s.cron_expr + (s.tz ? ' (' + s.tz + ')' : '');
    return 'no schedule';
  }
  function target(j) {
    if (j.channel === 'web') return j.to === chatID ? 'this chat' : 'page chat ' + j.to;
    return j.channel + ' chat ' + j.to;
  }
  // What a run does with its text: the message sent as is, a command's
  // output, or Perch's answer to it; without a chat, the job keeps it.
  function outcome(j) {
    const dest = j.channel && j.to ? target(j) : '';
    const kept = 'kept as the job\'s result';
    if (j.command) return 'runs the command; its output is ' + (j.deliver && dest ? 'sent to ' + dest : kept);
    if (j.deliver) return dest ? 'sent to ' + dest : kept;
    return dest ? 'Perch answers it in ' + dest : 'Perch answers it; the answer is ' + kept;
  }

  async function loadJobs() {
    let jobs;
    try { jobs = await authed('GET', '/admin/cron'); } catch (e) { $('job-list').replaceChildren(el('li', 'error', e.message)); return; }
    const ul = $('job-list');
    ul.replaceChildren();
    for (const j of jobs) {
      const li = el('li', 'job');
      li.dataset.id = j.id;
      const line = el('div', 'line');
      line.appendChild(el('strong', 'grow', j.command ? '$ ' + j.command : j.message));
      const once = j.schedule && j.schedule.at_seconds !== undefined;
      line.appendChild(el('span', 'pill' + (j.enabled ? ' ok' : ''), j.enabled ? 'on' : once && j.last_run ? 'done' : 'off'));
      li.appendChild(line);
      li.appendChild(el('p', 'sub', describeSchedule(j) + ' · ' + outcome(j)));
      li.appendChild(el('p', 'sub', j.next_run ? 'next ' + when(j.next_run) : 'no next run'));
      if (j.running_since) li.appendChild(el('p', 'sub', 'running since ' + when(j.running_since)));
      if (j.last_run || j.last_result) {
        // A run the gateway's stop cut off has a result and no time.
        const at = j.last_run ? ' ' + when(j.last_run) : '';
        const last = el('p', 'sub' + (j.last_failed ? ' bad' : ''), (j.last_failed ? 'last run failed' : 'last ran') + at + ': ' + (j.last_result || ''));
        last.classList.add('last');
        li.appendChild(last);
      }
      const acts = el('div', 'actions');
      if (j.enabled) acts.appendChild(button('Disable', () => jobAction(j, 'disable')));
      else if (!(once && j.last_run)) acts.appendChild(button('Enable', () => jobAction(j, 'enable')));
      acts.appendChild(button('Remove', () => jobAction(j, 'remove'), 'danger'));
      li.appendChild(acts);
      ul.appendChild(li);
    }
    if (!jobs.length) ul.appendChild(el('li', 'muted', 'Nothing is scheduled. Add a reminder below, or ask Perch in the chat ("remind me to water the plants at 7").'));
  }

  async function jobAction(j, action) {
    if (action === 'remove' && !await confirmAction('Remove this schedule?', (j.command ? '$ ' + j.command : j.message) + ' — ' + describeSchedule(j), 'Remove')) return;
    try {
      if (action === 'remove') await authed('DELETE', '/admin/cron/' + encodeURIComponent(j.id));
      else await authed('POST', '/admin/cron/' + encodeURIComponent(j.id) + '/' + action, {});
    } catch (e) { notice(e.message); }
    loadJobs(); // the "jobs" event follows too; this answers at once
  }

  const KIND_HINT = {
    at: 'A duration from now: 90 (seconds), 10m, 1h30m, 2d.',
    every: 'A duration, at least 10 seconds: 10m, 1h, 1d.',
    cron: 'Five fields: minute hour day-of-month month day-of-week, e.g. 0 9 * * 1-5 for 9:00 on weekdays.',
  };
  // A schedule's error in the form's words: the API names its fields.
  function formWords(msg) {
    const m = msg.replace(/^schedule: /, '')
      .replace(/\bevery_seconds\b/g, 'the interval')
      .replace(/\bat_seconds\b/g, 'the time from now')
      .replace(/\bcron_expr\b/g, 'the cron expression');
    return m.charAt(0).toUpperCase() + m.slice(1);
  }
  function jobSchedule() {
    const kind = $('job-kind').value, v = $('job-when').value.trim();
    if (kind === 'cron') return { cron_expr: v, tz: $('job-tz').value.trim() || undefined };
    const s = seconds(v);
    if (!isFinite(s)) return { error: '“' + v + '” is not a duration; write 90, 10m, 1h30m or 2d.' };
    return kind === 'at' ? { at_seconds: s } : { every_seconds: s };
  }
  let previewTimer = 0, previewSeq = 0;
  function preview() {
    $('job-error').hidden = true; // about the schedule as it was
    $('job-when-hint').textContent = KIND_HINT[$('job-kind').value];
    $('job-tz-row').hidden = $('job-kind').value !== 'cron';
    clearTimeout(previewTimer);
    previewTimer = setTimeout(async () => {
      const out = $('job-preview');
      if (!$('job-when').value.trim()) { out.replaceChildren(); return; }
      const sc = jobSchedule();
      if (sc.error) { out.replaceChildren(el('p', 'error', sc.error)); return; }
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(sc)) if (v !== undefined) q.set(k, String(v));
      const seq = ++previewSeq;
      try {
        const p = await authed('GET', '/admin/cron/preview?' + q);
        if (seq !== previewSeq) return;
        const mine = Intl.DateTimeFormat().resolvedOptions().timeZone;
        out.replaceChildren(el('span', '', 'Next runs, in your time' + (sc.cron_expr && p.zone !== mine ? ' (the expression runs in ' + p.zone + ')' : '') + ':'));
        const ol = el('ol');
        for (const t of p.next) ol.appendChild(el('li', '', when(t)));
        out.appendChild(ol);
      } catch (e) {
        if (seq === previewSeq) out.replaceChildren(el('p', 'error', formWords(e.message)));
      }
    }, 250);
  }
  $('job-kind').addEventListener('change', preview);
  $('job-when').addEventListener('input', preview);
  $('job-tz').addEventListener('input', preview);
  $('job-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const err = $('job-error');
    err.hidden = true;
    const sc = jobSchedule();
    if (sc.error) { err.textContent = sc.error; err.hidden = false; return; }
    const deliver = document.querySelector('input[name=job-do]:checked').value === 'deliver';
    const spec = { message: $('job-message').value.trim(), deliver, channel: 'web', to: chatID, schedule: sc };
    $('job-add').disabled = true;
    try {
      await authed('POST', '/admin/cron', spec);
      $('job-message').value = '';
      $('job-when').value = '';
      $('job-preview').replaceChildren();
      loadJobs();
    } catch (e) {
      // Said once: the preview may say it already.
      previewSeq++;
      $('job-preview').replaceChildren();
      err.textContent = formWords(e.message);
      err.hidden = false;
    } finally {
      $('job-add').disabled = false;
    }
  });
  preview();

  // ---- readiness and system ----

  // What each check is, in a person's words, and what to do when it fails.
  const CHECKS = {
    store: ['Database', 'Restart Perch. If it keeps failing, stop it and run “perch db check”.'],
    provider: ['Language model', 'Connect one with the setup form: choose a provider and paste its key.'],
    sandbox: ['Command sandbox', 'Commands need a kernel with Landlock, or turn off tools.exec.require_sandbox in the config.'],
    sensors: ['Sensors', ''],
    'sensor history': ['Sensor history', 'Readings are kept once the clock is set (NTP) and the database answers; see the message above.'],
    devices: ['USB devices', ''],
    startup: ['Start-up', 'Wait a few seconds; Perch is starting.'],
    'channel:web': ['This web page', ''],
    'channel:mqtt': ['MQTT link', 'Check the broker address and login under mqtt in the config, and that the broker is running.'],
  };
  const PLATFORMS = { telegram: 'Telegram', slack: 'Slack', discord: 'Discord', line: 'LINE' };
  function checkName(n) {
    if (CHECKS[n]) return CHECKS[n][0];
    if (n.startsWith('channel:')) return PLATFORMS[n.slice(8)] || 'Chat channel ' + n.slice(8);
    return n;
  }
  function checkFix(n) {
    if (CHECKS[n]) return CHECKS[n][1];
    if (n.startsWith('channel:')) return 'Check its token under channels.' + n.slice(8) + ' in the config (the platform may have refused it), then restart Perch.';
    return '';
  }

  let status = null; // the latest status: from the stream, or /ready alone
  let streamed = false; // a status came with the stream: it is the newest
  function setState(text, ok) {
    $('state').textContent = text;
    $('state').className = 'state ' + (ok === true ? 'ok' : ok === false ? 'bad' : '');
  }

  // applyReadiness is the one readiness of the page: the header and the
  // System panel show the same answer.
  function applyReadiness(ready, checks, model) {
    const failing = checks.filter((c) => c.status === 'fail');
    setState(ready ? 'ready' + (model ? ' · ' + model : '') : 'not ready' + (failing.length ? ': ' + failing.map((c) => checkName(c.name).toLowerCase()).join(', ') + ' failing' : ''), ready);
    const sum = $('ready-summary');
    sum.textContent = ready ? 'Perch is ready.' : 'Perch is not ready: ' + (failing.length ? failing.map((c) => checkName(c.name).toLowerCase()).join(', ') + ' failing.' : 'starting.');
    sum.className = 'summary ' + (ready ? 'ok' : 'bad');
    const ul = $('ready-list');
    ul.replaceChildren();
    const sorted = checks.slice().sort((a, b) => (a.status === 'fail' ? 0 : 1) - (b.status === 'fail' ? 0 : 1) || a.name.localeCompare(b.name));
    for (const c of sorted) {
      if (c.name.startsWith('channel:')) continue; // shown under Channels
      const li = el('li', 'check ' + (c.status === 'ok' ? 'pass' : 'fail'));
      li.dataset.check = c.name;
      const line = el('div', 'line');
      line.appendChild(el('strong', 'grow', checkName(c.name)));
      line.appendChild(el('span', 'pill ' + (c.status === 'ok' ? 'ok' : 'bad'), c.status === 'ok' ? 'ok' : 'failing'));
      li.appendChild(line);
      if (c.message) li.appendChild(el('p', 'sub', c.message));
      if (c.status === 'fail') {
        const fix = el('p', 'fix', 'How to fix: ' + (checkFix(c.name) || 'see the message above.'));
        if (c.name === 'provider') { fix.appendChild(el('br')); fix.appendChild(button('Open the setup form', () => openSetup(), 'primary')); }
        li.appendChild(fix);
      }
      ul.appendChild(li);
    }
    const chans = $('channel-list');
    chans.replaceChildren();
    for (const c of sorted.filter((c) => c.name.startsWith('channel:'))) {
      const li = el('li', 'channel');
      const line = el('div', 'line');
      line.appendChild(el('strong', 'grow', checkName(c.name)));
      line.appendChild(el('span', 'pill ' + (c.status === 'ok' ? 'ok' : 'bad'), c.status === 'ok' ? 'ok' : 'failing'));
      li.appendChild(line);
      if (c.message) li.appendChild(el('p', 'sub', c.message));
      if (c.status === 'fail') li.appendChild(el('p', 'fix', 'How to fix: ' + checkFix(c.name)));
      chans.appendChild(li);
    }
    chatChannels = checks.some((c) => c.name.startsWith('channel:') && c.name !== 'channel:web' && c.name !== 'channel:mqtt');
    const prov = checks.find((c) => c.name === 'provider');
    providerOK = !prov || prov.status === 'ok';
    if (!providerOK) notice('No language model is connected yet, so Perch cannot answer in the chat. Open the setup form to choose a provider and paste its key.', { setup: true });
    else if (/No language model/.test($('notice-text').textContent)) notice('');
  }

  // Sizes in powers of 1024, as the gateway's own messages, perch status
  // and df -h give them: the database is "64 KiB" in its readiness check and
  // in the figures alike.
  function size(n) {
    if (n >= 1024 ** 3) return (n / 1024 ** 3).toFixed(1) + ' GiB';
    if (n >= 1024 ** 2) return (n / 1024 ** 2).toFixed(n >= 10 * 1024 ** 2 ? 0 : 1) + ' MiB';
    return Math.max(1, Math.round(n / 1024)) + ' KiB';
  }
  // applyStatus shows a status: the stream's, or one the page asked for,
  // which gives way to the stream's unless it was asked for as fresher.
  function applyStatus(st, fromStream, fresher) {
    if (fromStream) streamed = true;
    else if (streamed && !fresher) return;
    status = st;
    applyReadiness(st.ready, st.checks || [], st.model);
    const f = $('figures');
    f.replaceChildren();
    const add = (k, v) => { if (v === undefined || v === null || v === '') return; f.appendChild(el('dt', '', k)); f.appendChild(el('dd', '', v)); };
    add('Version', st.version);
    add('Up for', st.uptime_seconds !== undefined ? upFor(st.uptime_seconds) : st.uptime);
    add('Language model', st.model ? st.provider + ', ' + st.model : 'none connected');
    add('Memory', st.memory_mb + ' MiB in use (' + st.heap_mb + ' MiB heap)');
    if (st.disk) add('Disk', size(st.disk.free_bytes) + ' free of ' + size(st.disk.total_bytes) + ' (' + st.disk.path + ')');
    add('Database', size(st.database_bytes || 0));
    if (st.sample_seconds) add('Sensor samples', 'every ' + span(st.sample_seconds));
    if (st.mqtt) add('MQTT', [st.mqtt.state || (st.mqtt.connected ? 'connected' : 'not connected'), st.mqtt.broker].filter(Boolean).join(' · '));
    add('Pages open', String(st.pages));
    const rec = st.database_recovered;
    $('recovered-text').textContent = rec ? 'The database was repaired at start: ' + rec.detail : '';
    $('recovered').hidden = !rec;
    loadPairings();
    if (Array.isArray(st.devices)) renderUSB(st.devices, st.devices_monitor ? 'Watching for USB devices.' : 'USB devices are not watched (devices.enabled and devices.monitor_usb in the config).');
  }

  // readyPublic reads /ready before the stream runs (or without a token):
  // enough for the header and the first-run form.
  async function readyPublic() {
    let res, data = null;
    try {
      const token = store.get('token', '');
      res = await fetch('/ready', { cache: 'no-store', headers: token ? { Authorization: 'Bearer ' + token } : {} });
      if (res.status === 401 && token) refused = token;
      if ((res.status === 401 || res.status === 429) && token) res = await fetch('/ready', { cache: 'no-store' });
      data = await res.json();
    } catch (e) {
      setState('offline', false);
      return null;
    }
    if (!status) {
      applyReadiness(res.ok, Object.values(data.checks || {}), data.agent && data.agent.model);
      const st = (data.checks || {}).store;
      if (st && /damaged/.test(st.message || '')) { $('recovered-text').textContent = st.message; $('recovered').hidden = false; }
    }
    return data;
  }

  // ---- pairing: strangers who asked a chat bot to be let in ----

  let chatChannels = false; // a chat platform runs: pairing codes can exist
  async function loadPairings() {
    if (!chatChannels) { $('pairing').hidden = true; return; }
    let list;
    try { list = await authed('GET', '/admin/channels/pairing'); } catch (e) { return; }
    const ul = $('pairing-list');
    ul.replaceChildren();
    for (const p of list || []) {
      const li = el('li', 'channel');
      li.dataset.code = p.code;
      const line = el('div', 'line');
      const who = [p.name, p.username ? '@' + p.username.replace(/^@/, '') : '', p.name || p.username ? '' : p.sender_id].filter(Boolean).join(' ');
      line.appendChild(el('strong', 'grow', who + ' on ' + (PLATFORMS[p.channel] || p.channel)));
      line.appendChild(button('Let in', async (ev) => {
        ev.target.disabled = true;
        try {
          const a = await authed('POST', '/admin/channels/approve', { code: p.code });
          li.replaceChildren(el('p', 'sub', (a.name || a.username || a.sender_id) + ' can talk to the bot now (added to ' + a.key + ').'));
        } catch (e) {
          ev.target.disabled = false;
          li.appendChild(el('p', 'fix', 'Not let in: ' + e.message));
        }
      }, 'primary'));
      li.appendChild(line);
      li.appendChild(el('p', 'sub', 'code ' + p.code + ' · asked ' + ago(p.created) + ' · id ' + p.sender_id));
      ul.appendChild(li);
    }
    $('pairing').hidden = !(list && list.length);
  }

  async function showCommand(path, what) {
    const out = $('service-out');
    out.hidden = false;
    out.textContent = 'Loading ' + what + '…';
    try {
      const r = await authed('GET', path);
      out.textContent = r.error ? what + ' not available: ' + r.error : (r.output || '(empty)');
    } catch (e) { out.textContent = e.message; }
  }
  $('show-service').addEventListener('click', () => showCommand('/admin/service', 'the service status'));
  $('show-logs').addEventListener('click', () => showCommand('/admin/logs', 'the logs'));

  async function loadStatus(fresher) {
    try {
      const st = await authed('GET', '/admin/status');
      // /admin/status carries the figures; the checks come with the stream.
      const r = await authed('GET', '/ready').catch((e) => e.data || { checks: {} });
      applyStatus(Object.assign({}, st, { checks: Object.values((r && r.checks) || {}) }), false, fresher);
    } catch (e) { /* the stream brings it */ }
  }

  function switchChat(c) {
    c = c.trim();
    if (!validChat(c)) { notice('A chat name is 1 to 64 letters, digits, “_”, “.” or “-”.'); return; }
    if (c === chatID) return;
    chatID = c;
    store.set('chat', chatID);
    $('session').value = chatID;
    loadHistory();
    show('chat');
  }
  $('session-form').addEventListener('submit', (ev) => { ev.preventDefault(); switchChat($('session').value); });
  $('session').addEventListener('change', () => switchChat($('session').value));
  $('session-new').addEventListener('click', () => {
    const b = new Uint8Array(4);
    crypto.getRandomValues(b);
    switchChat(Array.from(b, (x) => x.toString(16).padStart(2, '0')).join(''));
  });
  $('token-change').addEventListener('click', () => { askToken('').catch(() => {}); });
  $('token-forget').addEventListener('click', () => { store.del('token'); notice('This browser no longer keeps the token.'); });
  $('provider-change').addEventListener('click', () => openSetup());

  // ---- event stream ----

  let live = false, connecting = false, source = null, lastID = '', backoff = 1000, retryTimer = 0;
  let lost = false; // the stream failed: panels may hold an error or miss changes

  // connect opens the page's one stream: a ticket from an authenticated
  // POST (EventSource sends no header, and a token in a URL would land in
  // logs), then the stream from where this page left off.
  async function connect() {
    if (connecting) return;
    connecting = true;
    clearTimeout(retryTimer);
    if (source) { source.close(); source = null; }
    let t;
    try {
      t = await authed('POST', '/events/ticket', {});
    } catch (e) {
      connecting = false;
      live = false;
      lost = true;
      if (e.status === 401) { setState('locked: enter the token', false); return; }
      setState('offline, retrying', false);
      retryTimer = setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 30000);
      return;
    }
    connecting = false;
    const es = new EventSource('/events?ticket=' + encodeURIComponent(t.ticket) + (lastID ? '&since=' + encodeURIComponent(lastID) : ''));
    source = es;
    const on = (kind, fn) => es.addEventListener(kind, (ev) => {
      if (ev.lastEventId) lastID = ev.lastEventId;
      let d = null;
      try { d = JSON.parse(ev.data); } catch { return; }
      fn(d);
    });
    on('hello', (d) => {
      if (!lastID) lastID = d.id;
      backoff = 1000;
      live = true;
      if (lost) { lost = false; loadAll(); }
    });
    on('resync', () => loadAll());
    on('status', (st) => applyStatus(st, true));
    on('message', receive);
    on('sensors', onSensors);
    on('usb', onUSB);
    on('jobs', () => loadJobs());
    es.onerror = () => {
      // The browser would retry with the spent ticket: take over.
      es.close();
      if (source !== es) return;
      source = null;
      live = false;
      lost = true;
      setState('reconnecting…', false);
      retryTimer = setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 30000);
    };
  }

  function loadAll() {
    loadHistory();
    loadSensors();
    loadJobs();
    loadI2C();
    loadStatus();
  }

  let started = false;
  function start() {
    if (started && live) return;
    started = true;
    lost = false; // loadAll follows
    connect();
    loadAll();
  }

  // ---- setup ----

  let providerOK = null; // unknown until /ready answers
  let setupInfo = { needs_code: false, code_where: 'in the gateway\'s log' };
  const EXAMPLES = {
    openrouter: 'openai/gpt-4o-mini', openai: 'gpt-4o-mini', anthropic: 'claude-3-5-haiku-latest',
    gemini: 'gemini-2.0-flash', groq: 'llama-3.3-70b-versatile', deepseek: 'deepseek-chat', ollama: 'llama3.2',
  };

  function syncProvider() {
    const p = $('setup-provider').value;
    $('setup-model').placeholder = 'e.g. ' + (EXAMPLES[p] || '');
    $('setup-key-row').hidden = p === 'ollama';
    $('setup-base').placeholder = p === 'ollama' ? 'http://127.0.0.1:11434/v1' : 'the provider\'s own';
  }
  $('setup-provider').addEventListener('change', syncProvider);

  let setupDone = null;
  function openSetup() {
    const first = setupInfo.needs_code;
    $('setup-code-row').hidden = !first;
    $('setup-code-hint').textContent = 'Perch printed it ' + setupInfo.code_where + ' when it started.';
    $('setup-why').textContent = first
      ? 'Perch has no language model yet. Enter the setup code, choose a provider and paste its API key; Perch saves them and starts using them at once.'
      : 'Saving here replaces the language model Perch uses.';
    $('setup-error').hidden = true;
    syncProvider();
    if (!$('setup-dialog').open) $('setup-dialog').showModal();
    (first ? $('setup-code') : $('setup-model')).focus();
    return new Promise((resolve) => { setupDone = resolve; });
  }
  $('setup-dialog').addEventListener('close', () => { if (setupDone) { setupDone(); setupDone = null; } });

  $('setup-cancel').addEventListener('click', () => $('setup-dialog').close());
  $('setup-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = {
      provider: $('setup-provider').value,
      model: $('setup-model').value.trim(),
      api_key: $('setup-provider').value === 'ollama' ? '' : $('setup-key').value.trim(),
      api_base: $('setup-base').value.trim(),
    };
    if (!$('setup-code-row').hidden) body.code = $('setup-code').value.trim();
    const err = $('setup-error');
    err.hidden = true;
    $('setup-save').disabled = true;
    try {
      // Before a provider exists the setup code is the credential; after, the token.
      const r = setupInfo.needs_code ? await api('POST', '/setup', body) : await authed('POST', '/setup', body);
      // The page that proved the code receives the API token with the answer.
      if (r.token) store.set('token', r.token);
      setupInfo.needs_code = false;
      $('setup-key').value = '';
      $('setup-code').value = '';
      $('setup-dialog').close();
      notice('Connected: ' + r.provider + ', model ' + r.model + '. Saved in ' + r.config + '.');
      await readyPublic();
      // A page that started without the token (the form put off, the token
      // prompt cancelled) starts again with the one the setup handed over.
      if (started) start();
    } catch (e) {
      err.textContent = e.message;
      err.hidden = false;
    } finally {
      $('setup-save').disabled = false;
    }
  });

  // ---- start ----

  (async () => {
    $('session').value = chatID;
    try { setupInfo = await api('GET', '/setup'); } catch { /* no setup route */ }
    await readyPublic();
    // On a first run the setup form comes first: the code it takes also
    // brings the token, so the owner is asked for one secret only.
    if (setupInfo.needs_code) await openSetup();
    start();
  })();
})();
