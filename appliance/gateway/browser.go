package gateway

import (
	"fmt"
	"net/http"
	"strings"
)

// browserRules keeps web pages of other sites from driving the gateway
// through a browser on the LAN (the browser sends the visitor's requests,
// and a tokenless gateway trusts loopback and LAN clients). It returns 0
// when r may proceed, else the status and message to answer.
//
//   - Host must name this board (see hostPolicy): against DNS rebinding,
//     where the browser believes it talks to the attacker's site.
//   - A POST (any method but GET, HEAD and OPTIONS) from a browser must come
//     from the page's own origin: Sec-Fetch-Site, else Origin against Host
//     (http.CrossOriginProtection). Clients that are not browsers send
//     neither header and pass.
//   - Its body must be JSON: a page can send a cross-site form or a
//     "no-cors" fetch without the browser asking first only as text/plain,
//     form-urlencoded or multipart, never as application/json.
//
// Routes that guard themselves (a webhook's HMAC) skip these rules: a
// platform calls them from its servers, through whatever public name a
// tunnel or reverse proxy gives, and a browser cannot forge the signature.
// X-Forwarded-Host is never read: any client can send it.
func (s *Server) browserRules(r *http.Request) (int, string) {
	if !s.hosts.allowed(r.Host) {
		return http.StatusForbidden, fmt.Sprintf("the host name %q does not name this board, so the request is refused "+
			"(a page of another site may be re-pointing that name here: DNS rebinding); to use perch under this name, "+
			"add it to gateway.allowed_hosts", quoteHost(r.Host))
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return 0, ""
	}
	if err := s.csrf.Check(r); err != nil {
		from := r.Header.Get("Origin")
		if from == "" {
			from = "Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site")
		}
		return http.StatusForbidden, fmt.Sprintf("cross-origin request refused: a page of another origin (%s) may not make this gateway act; "+
			"use the page this gateway serves, or a client that is not a browser", clip(from))
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) && (ct != "" || r.ContentLength != 0) {
		got := "no Content-Type"
		if ct != "" {
			got = fmt.Sprintf("%q", clip(ct))
		}
		return http.StatusUnsupportedMediaType, fmt.Sprintf(`%s %s needs "Content-Type: application/json" (got %s); send the body as JSON with that header`,
			r.Method, clip(r.URL.Path), got)
	}
	return 0, ""
}

// isJSON reports whether a Content-Type value is application/json, with or
// without parameters.
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// quoteHost is the host part of a Host value for a message.
func quoteHost(h string) string {
	if name, ip, ok := parseHost(h); ok {
		if ip.IsValid() {
			return ip.String()
		}
		return name
	}
	return clip(h)
}

// clip bounds a client-supplied value echoed in a message.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
