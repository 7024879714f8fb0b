// Package gateway is Perch's HTTP server: POST /chat, GET /health, GET
// /ready, GET /admin/*, the web page at / and the routes other services add
// (cron administration, channel webhooks).
//
// # Concepts
//
// Access: when gateway.api_token is set, /chat, /admin/* and the page's API
// need "Authorization: Bearer <token>" (compared in constant time), else 401.
// When it is empty and the server listens beyond loopback, those paths answer
// loopback clients only (others get 403 naming the key to set). /health,
// /ready and the page itself are open; a webhook guards itself.
//
// Browsers: a page of another site can make a visitor's browser send
// requests to the board, and a tokenless gateway trusts loopback clients.
// Every route but a self-guarded one answers only requests whose Host names
// this board (loopback, gateway.host, gateway.allowed_hosts, the hostname,
// <hostname>.local, the board's current addresses), against DNS rebinding;
// refuses POSTs a browser sends from another origin (Sec-Fetch-Site, else
// Origin against Host); and wants POST bodies as application/json, which a
// page can only send to another origin after the browser has asked (CORS),
// which this gateway never grants. Clients that are not browsers send no
// Origin and name the host they dialled, so they pass.
//
// Limits for strangers: a client (an IPv4 address or an IPv6 /64) holds at
// most 64 connections and all clients 256 (Options.MaxConns,
// MaxConnsPerClient); a connection that sends no complete headers within
// 5 s, or idles 30 s between requests, is closed. A client may send 10
// wrong tokens at once, then one per 6 s (429 meanwhile). Refusals are
// logged in aggregate (package attempts), never one line per attempt.
//
// Errors are JSON {"error": "..."}: 400 malformed or empty, 401, 403,
// 404/405, 413 over 1 MiB, 415 not JSON, 502 upstream failed, 503 not
// ready/no provider/over capacity, 504 turn deadline; the message says what
// to change.
//
// Readiness is the conjunction of registered checks (store, provider, each
// enabled channel, ...), each a function returning ok and a message; checks
// that describe optional hardware are always ok and only inform.
package gateway
