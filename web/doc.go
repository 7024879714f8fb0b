// Package web is the appliance's own page on the LAN: plain HTML, CSS and
// JavaScript embedded in the binary (no build step, no remote asset, so it
// works on a board that is offline), served by the gateway at GET / with its
// assets under /static/, and the first-run provider setup behind GET and
// POST /setup.
//
// # Concepts
//
// The page is a dashboard in five panels — chat and canvas, sensors,
// devices, schedules, system — built phones first (every panel is usable
// at 360 px; the browser tests measure that nothing sticks out sideways).
// It talks only to the gateway's API: POST /chat (channel "web", its chat
// id), GET /web/history, /sensors, /sensors/history, /i2c, POST /i2c/scan,
// /admin/cron and its preview, /admin/status, /admin/service, /admin/logs,
// GET /ready, and one event stream (package appliance/channel/web) that
// keeps every panel current: nothing polls. When the API answers 401 it
// asks for gateway.api_token, keeps it in localStorage and sends it as
// "Authorization: Bearer". Model output is placed with textContent only,
// never parsed as HTML, and the Content-Security-Policy (CSP) forbids
// inline script and every other origin, so a reply cannot run script.
// Canvas images and videos show inline when they are data: URIs or on this
// origin; a remote URL becomes a link.
//
// Charts are drawn by uPlot, vendored unchanged from its npm package
// (web/third_party/uplot says which version, with its license); the page
// and its assets stay under 150 KB.
//
// Assets are served under names that carry their content hash and cached for
// good; the page itself is revalidated by ETag on every load, so an upgrade
// never mixes files of two versions.
//
// Setup code: when the gateway starts without a provider, Register issues a
// random 8-digit code and logs it at Info (the console and the journal see
// it; the start-up banner repeats it; no HTTP response ever carries it).
// GET /setup tells the page whether the code is needed and where it was
// printed (CodeWhere: the journal under systemd, the terminal of `make run`
// or `perch gateway`). While no provider is configured, POST /setup needs
// that code and no token: the owner proves presence by reading the log, and
// may not know the token yet — so a setup proved by the code answers with
// the token, and the page is not asked for a second secret. Wrong codes are
// limited per client address (5 at once, then one per 12 s; then 429 with
// Retry-After), so a stranger guessing, or a script stuck on an old code,
// locks out only itself; and for all clients together to 30 at once, then
// one per 2 s, which makes guessing the 10^8 codes take years however many
// addresses are used. Wrong and refused codes are logged in aggregate. A
// successful setup spends the code. Once a provider is configured, POST
// /setup follows the rule of /admin/* (the token, or loopback when there is
// none) and needs no code, so the owner can change the provider or rotate a
// key from the page.
//
// Setup itself (validation, writing the config file, swapping the provider
// without a restart) belongs to the composition root, behind the Setup
// interface, so this package does not import it.
package web
