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
// Errors are JSON {"error": "..."} with the statuses of CONTRACT.md: 400
// malformed or empty, 401, 403, 404/405, 413 over 1 MiB, 502 upstream failed,
// 503 not ready/no provider/over capacity, 504 turn deadline.
//
// Readiness is the conjunction of registered checks (store, provider, each
// enabled channel, ...), each a function returning ok and a message; checks
// that describe optional hardware are always ok and only inform.
package gateway
