// Package web is the appliance's own page on the LAN: plain HTML, CSS and
// JavaScript embedded in the binary (no build step, no remote asset, so it
// works on a board that is offline), served by the gateway at GET / with its
// assets under /static/, and the first-run provider setup behind POST /setup.
//
// # Concepts
//
// The page talks only to the public API: POST /chat (a session key kept in
// localStorage), GET /ready and GET /admin/status for the status panel, and
// POST /setup. When the API answers 401 it asks for gateway.api_token, keeps
// it in localStorage and sends it as "Authorization: Bearer". Model output
// is placed with textContent only, never parsed as HTML, and the
// Content-Security-Policy (CSP) forbids inline script and every other
// origin, so a reply cannot run script. Canvas images and videos show inline
// when they are data: URIs or on this origin; a remote URL becomes a link.
//
// Assets are served under names that carry their content hash and cached for
// good; the page itself is revalidated by ETag on every load, so an upgrade
// never mixes files of two versions.
//
// Setup code: when the gateway starts without a provider, Register issues a
// random 8-digit code and logs it at Info (the console and the journal see
// it; no HTTP response ever carries it). While no provider is configured,
// POST /setup needs that code and no token: the owner proves presence by
// reading the log, and may not know the token yet. Wrong codes are limited
// per client address (5 at once, then one per 12 s; then 429 with
// Retry-After), so a stranger guessing, or a script stuck on an old code,
// locks out only itself; and for all clients together to 30 at once, then
// one per 2 s, which makes guessing the 10^8 codes take years however many
// addresses are used. Wrong and refused codes are logged in aggregate. A
// successful setup spends the code. Once a provider is configured, POST /setup follows the rule of
// /admin/* (the token, or loopback when there is none) and needs no code,
// so the owner can change the provider or rotate a key from the page.
//
// Setup itself (validation, writing the config file, swapping the provider
// without a restart) belongs to the composition root, behind the Setup
// interface, so this package does not import it.
package web
