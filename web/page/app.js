// Perch's page: chat, canvas, status and first-run setup. Plain script, no
// build step. Model output is only ever placed with textContent (never parsed
// as HTML), so a reply cannot inject markup or script.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);

  // localStorage may be unavailable (private mode, quota): the page still works.
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

  // ---- API ----

  class APIError extends Error {
    constructor(status, message, data) { super(message); this.status = status; this.data = data; }
  }

  async function api(method, path, body) {
    const headers = {};
    const token = store.get('token', '');
    if (token) headers.Authorization = 'Bearer ' + token;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, { method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new APIError(0, 'cannot reach Perch (' + e.message + '); is the gateway running and this device on its network?');
    }
    let data = null;
    try { data = await res.json(); } catch { /* not JSON */ }
    if (!res.ok) {
      const msg = data && typeof data.error === 'string' ? data.error : 'HTTP ' + res.status + ' ' + res.statusText;
      throw new APIError(res.status, msg, data);
    }
    return data;
  }

  // authed retries a call after asking for the token when the API answers 401.
  async function authed(method, path, body) {
    for (;;) {
      try {
        return await api(method, path, body);
      } catch (e) {
        if (e.status !== 401) throw e;
        await askToken(store.get('token', '') ? 'The saved token was refused: ' + e.message : 'This Perch asks for its API token.');
      }
    }
  }

  // ---- token dialog ----

  let tokenWaiters = [];
  function askToken(why) {
    $('token-why').textContent = why || '';
    $('token').value = '';
    if (!$('token-dialog').open) $('token-dialog').showModal();
    $('token').focus();
    return new Promise((resolve, reject) => tokenWaiters.push({ resolve, reject }));
  }
  function settleToken(ok) {
    const waiters = tokenWaiters;
    tokenWaiters = [];
    for (const w of waiters) {
      if (ok) w.resolve(); else w.reject(new APIError(401, 'no token given; enter it with Status → Enter token'));
    }
  }
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    if (!t) return;
    store.set('token', t);
    $('token-dialog').close();
    settleToken(true);
    refreshState(); // the token shows the model
  });
  $('token-cancel').addEventListener('click', () => $('token-dialog').close());
  $('token-dialog').addEventListener('close', () => settleToken(false));

  // ---- notice bar ----

  function notice(text, offerSetup) {
    $('notice-text').textContent = text;
    $('notice-setup').hidden = !offerSetup;
    $('notice').hidden = !text;
  }
  $('notice-close').addEventListener('click', () => notice(''));
  $('notice-setup').addEventListener('click', () => openSetup());

  // ---- chat ----

  const MAX_LOG = 100;
  let session = store.get('session', '') || newSessionKey();
  store.set('session', session);
  let transcript = [];

  function newSessionKey() {
    const b = new Uint8Array(4);
    crypto.getRandomValues(b);
    return 'web:' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  // renderText shows text with ``` fenced blocks as code, everything as text.
  function renderText(into, text) {
    const parts = String(text).split(/```[^\n]*\n?/);
    parts.forEach((part, i) => {
      if (i % 2 === 1) {
        const pre = el('pre');
        pre.appendChild(el('code', '', part.replace(/\n$/, '')));
        into.appendChild(pre);
      } else if (part.trim() !== '') {
        into.appendChild(el('p', '', part.replace(/^\n+|\n+$/g, '')));
      }
    });
  }

  function addMessage(role, text, keep) {
    const li = el('li', 'msg ' + role);
    renderText(li, text);
    $('log').appendChild(li);
    li.scrollIntoView({ block: 'end' });
    if (keep) {
      transcript.push({ role, text: String(text) });
      if (transcript.length > MAX_LOG) transcript = transcript.slice(-MAX_LOG);
      store.set('log.' + session, JSON.stringify(transcript));
    }
    return li;
  }

  function showError(e) {
    const li = addMessage('error', e.message, false);
    if (e.status === 503 && /no provider/i.test(e.message)) {
      const b = el('button', '', 'Set up a provider');
      b.type = 'button';
      b.addEventListener('click', () => openSetup());
      li.appendChild(b);
    }
  }

  function loadSession() {
    $('log').replaceChildren();
    transcript = [];
    let saved = [];
    try { saved = JSON.parse(store.get('log.' + session, '[]')); } catch { saved = []; }
    for (const m of Array.isArray(saved) ? saved : []) {
      if (m && typeof m.text === 'string' && (m.role === 'user' || m.role === 'agent')) addMessage(m.role, m.text, true);
    }
    if (!transcript.length) addMessage('note', 'Session ' + session + '. Say hello.', false);
    loadCanvas();
  }

  let busy = false;
  async function send(text) {
    busy = true;
    $('send').disabled = true;
    addMessage('user', text, true);
    const pending = addMessage('pending', 'Perch is thinking…', false);
    try {
      const r = await authed('POST', '/chat', { message: text, session_key: session });
      pending.remove();
      addMessage('agent', r && r.response ? r.response : '(no text in the reply)', true);
      for (const c of (r && Array.isArray(r.ui_commands)) ? r.ui_commands : []) applyUI(c);
    } catch (e) {
      pending.remove();
      showError(e);
    } finally {
      busy = false;
      $('send').disabled = false;
    }
  }

  $('send-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('message').value;
    if (busy || text.trim() === '') return;
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

  function applyUI(c) {
    if (!c || c.command !== 'canvas') return;
    const id = typeof c.node_id === 'string' ? c.node_id : '';
    switch (c.action) {
      case 'create_node':
      case 'update_node': {
        if (!id) return;
        const n = (c.action === 'update_node' && nodes.get(id)) || { node_id: id, type: 'text' };
        for (const k of FIELDS) if (c[k] !== undefined && c[k] !== null) n[k] = c[k];
        nodes.set(id, n);
        break;
      }
      case 'delete_node': nodes.delete(id); break;
      case 'clear': nodes.clear(); break;
      default: return;
    }
    drawCanvas();
    saveCanvas();
    if ($('main').classList.contains('canvas-open') === false) {
      unseen++;
      $('canvas-badge').textContent = String(unseen);
      $('canvas-badge').hidden = false;
    }
  }

  // mediaSource decides how a URL may be shown: inline (data: of the right
  // kind, or this origin) or only as a link (remote: the page's CSP forbids
  // loading other origins).
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

  function saveCanvas() {
    store.set('canvas.' + session, JSON.stringify(Array.from(nodes.values())));
  }
  function loadCanvas() {
    nodes = new Map();
    let saved = [];
    try { saved = JSON.parse(store.get('canvas.' + session, '[]')); } catch { saved = []; }
    for (const n of Array.isArray(saved) ? saved : []) if (n && typeof n.node_id === 'string') nodes.set(n.node_id, n);
    drawCanvas();
  }

  // The empty-canvas hint is kept aside and put back when the canvas empties.
  const emptyHint = $('canvas-empty');

  $('canvas-clear').addEventListener('click', () => { nodes.clear(); drawCanvas(); saveCanvas(); });
  $('show-canvas').addEventListener('click', () => {
    $('main').classList.add('canvas-open');
    unseen = 0;
    $('canvas-badge').hidden = true;
  });
  $('hide-canvas').addEventListener('click', () => $('main').classList.remove('canvas-open'));

  // ---- readiness ----

  let providerOK = null; // unknown until /ready answers
  let setupOffered = false;

  async function readyState() {
    let res, data = null;
    const token = store.get('token', '');
    try {
      // With the token /ready also shows the details (model, sessions); a
      // refused token (401, or 429 after too many) still gets the public answer.
      res = await fetch('/ready', { cache: 'no-store', headers: token ? { Authorization: 'Bearer ' + token } : {} });
      if ((res.status === 401 || res.status === 429) && token) res = await fetch('/ready', { cache: 'no-store' });
      data = await res.json();
    } catch (e) {
      return { error: 'cannot reach Perch: ' + e.message };
    }
    return { ok: res.ok, data };
  }

  async function refreshState() {
    const r = await readyState();
    const state = $('state');
    if (r.error) {
      state.textContent = 'offline';
      state.className = 'state bad';
      return r;
    }
    const checks = (r.data && r.data.checks) || {};
    const prov = checks.provider;
    providerOK = !prov || prov.status === 'ok';
    if (r.ok) {
      const model = r.data.agent && r.data.agent.model;
      state.textContent = 'ready' + (model ? ' · ' + model : '');
      state.className = 'state ok';
    } else {
      const failing = Object.values(checks).filter((c) => c.status === 'fail').map((c) => c.name);
      state.textContent = 'not ready' + (failing.length ? ': ' + failing.join(', ') : '');
      state.className = 'state bad';
    }
    if (!providerOK) {
      notice('No language model is connected yet: ' + (prov.message || 'no provider configured') + '.', true);
      if (!setupOffered) { setupOffered = true; openSetup(); }
    }
    return r;
  }

  // ---- status dialog ----

  const PREFERRED = ['provider', 'model', 'version', 'uptime', 'ready', 'memory_mb', 'heap_mb', 'goroutines',
    'sessions', 'active_sessions', 'running_turns', 'queue_depth', 'subagents_running', 'database_bytes'];

  function renderValue(v) {
    if (Array.isArray(v)) {
      if (v.length === 0) return el('span', 'muted', 'none');
      if (v.every((x) => x && typeof x === 'object' && !Array.isArray(x))) return table(v);
      return el('span', '', v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', '));
    }
    if (v && typeof v === 'object') return dl(v);
    return el('span', '', String(v));
  }

  function table(rows) {
    const cols = [];
    for (const r of rows) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
    const t = el('table');
    const head = el('tr');
    for (const c of cols) head.appendChild(el('th', '', c));
    t.appendChild(head);
    for (const r of rows) {
      const tr = el('tr');
      for (const c of cols) {
        const v = r[c];
        const td = el('td', c === 'status' ? (v === 'ok' ? 'ok' : v === 'fail' ? 'bad' : '') : '');
        td.appendChild(v === undefined ? el('span') : renderValue(v));
        tr.appendChild(td);
      }
      t.appendChild(tr);
    }
    return t;
  }

  function dl(obj) {
    const d = el('dl');
    const keys = Object.keys(obj);
    keys.sort((a, b) => {
      const ia = PREFERRED.indexOf(a), ib = PREFERRED.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
    });
    for (const k of keys) {
      d.appendChild(el('dt', '', k.replace(/_/g, ' ')));
      const dd = el('dd');
      dd.appendChild(renderValue(obj[k]));
      d.appendChild(dd);
    }
    return d;
  }

  let statusTimer = 0;
  async function loadStatus() {
    const ready = await refreshState();
    const ro = $('ready-out');
    ro.replaceChildren();
    if (ready.error) ro.appendChild(el('p', 'error', ready.error));
    else {
      ro.appendChild(el('p', ready.ok ? 'ok' : 'bad', ready.data.status + (ready.data.uptime ? ', up ' + ready.data.uptime : '')));
      ro.appendChild(table(Object.values(ready.data.checks || {}).map((c) => ({ name: c.name, status: c.status, message: c.message || '' }))));
      if (ready.data.agent) ro.appendChild(dl(ready.data.agent));
    }
    const ao = $('admin-out');
    try {
      const st = await authed('GET', '/admin/status');
      ao.replaceChildren(dl(st));
    } catch (e) {
      ao.replaceChildren(el('p', 'error', e.message));
    }
  }

  $('show-status').addEventListener('click', () => {
    $('session').value = session;
    $('status-dialog').showModal();
    loadStatus();
    clearInterval(statusTimer);
    statusTimer = setInterval(() => { if ($('status-dialog').open && !$('token-dialog').open) loadStatus(); }, 10000);
  });
  $('status-close').addEventListener('click', () => $('status-dialog').close());
  $('status-dialog').addEventListener('close', () => clearInterval(statusTimer));

  function switchSession(key) {
    key = key.trim();
    if (!key || key === session) return;
    session = key;
    store.set('session', session);
    $('session').value = session;
    loadSession();
  }
  $('session-form').addEventListener('submit', (ev) => { ev.preventDefault(); switchSession($('session').value); });
  $('session').addEventListener('change', () => switchSession($('session').value));
  $('session-new').addEventListener('click', () => switchSession(newSessionKey()));
  $('token-change').addEventListener('click', () => { askToken('').catch(() => {}); });
  $('token-forget').addEventListener('click', () => { store.del('token'); notice('This browser no longer keeps the token.', false); });
  $('provider-change').addEventListener('click', () => { $('status-dialog').close(); openSetup(); });

  // ---- setup ----

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

  function openSetup() {
    const first = providerOK === false;
    $('setup-code-row').hidden = !first;
    $('setup-why').textContent = first
      ? 'Perch has no language model yet. Choose a provider and paste its API key; the gateway saves it in its config and starts using it at once.'
      : 'Perch already has a provider; saving here replaces it (the API token is needed).';
    $('setup-error').hidden = true;
    syncProvider();
    if (!$('setup-dialog').open) $('setup-dialog').showModal();
    (first ? $('setup-code') : $('setup-model')).focus();
  }

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
      const r = providerOK === false ? await api('POST', '/setup', body) : await authed('POST', '/setup', body);
      $('setup-key').value = '';
      $('setup-code').value = '';
      $('setup-dialog').close();
      notice('Connected: ' + r.provider + ', model ' + r.model + '. Saved in ' + r.config + '.', false);
      await refreshState();
    } catch (e) {
      err.textContent = e.message;
      err.hidden = false;
    } finally {
      $('setup-save').disabled = false;
    }
  });

  // ---- start ----

  loadSession();
  refreshState();
  setInterval(() => { if (document.visibilityState === 'visible') refreshState(); }, 30000);
})();
