package tools

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func fetchRegistry(opts WebFetchOptions) *Registry {
	return registryOf(NewWebFetch(opts))
}

func fetch(t *testing.T, r *Registry, url string, extra ...string) Result {
	t.Helper()
	args := fmt.Sprintf(`{"url":%q%s}`, url, strings.Join(extra, ""))
	return r.Execute(context.Background(), "web_fetch", args)
}

// pageServer serves fixed responses by path and counts requests.
type pageServer struct {
	*httptest.Server
	hits atomic.Int32
}

func newPageServer(t *testing.T, listenAddr string, h http.HandlerFunc) *pageServer {
	t.Helper()
	ps := &pageServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.hits.Add(1)
		h(w, r)
	}))
	if listenAddr != "" {
		ln, err := net.Listen("tcp", listenAddr)
		if err != nil {
			t.Fatalf("listen on %s: %v", listenAddr, err)
		}
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(srv.Close)
	ps.Server = srv
	return ps
}

func serve(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if contentType == "" {
			w.Header()["Content-Type"] = nil // no header at all: make the tool sniff
		} else {
			w.Header().Set("Content-Type", contentType)
		}
		w.Write(body)
	}
}

// TestWebFetchHTMLGolden: the text a model reads from a real-looking page.
func TestWebFetchHTMLGolden(t *testing.T) {
	page, err := os.ReadFile("testdata/page.html")
	must(t, err)
	srv := newPageServer(t, "", serve("text/html; charset=utf-8", page))
	res := fetch(t, fetchRegistry(WebFetchOptions{AllowPrivate: true}), srv.URL+"/notes/bme280")
	wantOK(t, res)
	if strings.Contains(res.ForLLM, "MUST-NOT-SHOW") {
		t.Errorf("skipped content shows:\n%s", res.ForLLM)
	}
	got := strings.Replace(res.ForLLM, srv.URL, "http://SERVER", 1)
	golden(t, "page.txt.golden", []byte(got+"\n"))
}

func TestWebFetchContentTypes(t *testing.T) {
	latin1 := []byte("caf\xe9 cr\xe8me")
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"compressed":true}`))
	zw.Close()
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		want      string // whole result
		wantErr   []string
		extraArgs string
		opts      WebFetchOptions
	}{
		{name: "JSON pretty-printed", handler: serve("application/json", []byte(`{"temp":21.5,"tags":["a","b"],"ok":true}`)),
			want: "URL: {URL}\nContent-Type: application/json\n\n{\n  \"temp\": 21.5,\n  \"tags\": [\n    \"a\",\n    \"b\"\n  ],\n  \"ok\": true\n}"},
		{name: "vendor JSON", handler: serve("application/vnd.api+json; charset=utf-8", []byte(`[1,2]`)),
			want: "URL: {URL}\nContent-Type: application/vnd.api+json\n\n[\n  1,\n  2\n]"},
		{name: "JSON sent as text", handler: serve("text/plain", []byte(` {"a":1} `)),
			want: "URL: {URL}\nContent-Type: text/plain\n\n{\n  \"a\": 1\n}"},
		{name: "invalid JSON shown as sent", handler: serve("application/json", []byte(`{"a":`)),
			want: "URL: {URL}\nContent-Type: application/json\n\n{\"a\":"},
		{name: "plain text as is", handler: serve("text/plain; charset=utf-8", []byte("line 1\n  line 2\n")),
			want: "URL: {URL}\nContent-Type: text/plain\n\nline 1\n  line 2\n"},
		{name: "CSV is text", handler: serve("text/csv", []byte("a,b\n1,2\n")),
			want: "URL: {URL}\nContent-Type: text/csv\n\na,b\n1,2\n"},
		{name: "latin-1 decoded", handler: serve("text/plain; charset=ISO-8859-1", latin1),
			want: "URL: {URL}\nContent-Type: text/plain\n\ncafé crème"},
		{name: "HTML sniffed without a header", handler: serve("", []byte("<!DOCTYPE html><title>T</title><p>Hello</p>")),
			want: "URL: {URL}\nContent-Type: text/html\nTitle: T\n\nHello"},
		{name: "HTML sniffed behind octet-stream", handler: serve("application/octet-stream", []byte("<html><body><h2>Hi</h2></body></html>")),
			want: "URL: {URL}\nContent-Type: text/html\n\n## Hi"},
		{name: "gzip decoded", handler: func(w http.ResponseWriter, r *http.Request) {
			if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				t.Error("no gzip offered")
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte(gz.String()))
		}, want: "URL: {URL}\nContent-Type: application/json\n\n{\n  \"compressed\": true\n}"},
		{name: "empty page", handler: serve("text/html", []byte("<html><script>x()</script></html>")),
			want: "URL: {URL}\nContent-Type: text/html\n\n(the page has no readable text)"},
		{name: "image refused", handler: serve("image/png", []byte("\x89PNG\r\n\x1a\n....")),
			wantErr: []string{"is image/png (12 bytes), not text", "HTML, JSON and text only"}},
		{name: "sniffed binary refused", handler: serve("", []byte("%PDF-1.7\n\x00\x01\x02")),
			wantErr: []string{"is application/pdf", "not text"}},
		{name: "HTTP error", handler: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
			wantErr: []string{"answered HTTP 404 Not Found"}},
		{name: "maxChars cuts the text", handler: serve("text/plain", []byte(strings.Repeat("é", 1000))), extraArgs: `,"maxChars":100`,
			want: "URL: {URL}\nContent-Type: text/plain\n\n" + strings.Repeat("é", 100) + "\n\n[truncated: first 100 of 1000 characters shown (maxChars=100)]"},
		// Past MaxChars the result's own cap would cut it without saying so.
		{name: "maxChars is at most MaxChars", handler: serve("text/plain", []byte(strings.Repeat("a", 70000))), extraArgs: `,"maxChars":10000000`,
			want: "URL: {URL}\nContent-Type: text/plain\n\n" + strings.Repeat("a", MaxChars) + "\n\n[truncated: first 60000 of 70000 characters shown (maxChars=60000)]"},
		{name: "maxChars on HTML text", handler: serve("text/html", []byte("<p>"+strings.Repeat("word ", 100)+"</p>")), extraArgs: `,"maxChars":100`,
			want: "URL: {URL}\nContent-Type: text/html\n\n" + strings.TrimSpace(strings.Repeat("word ", 20)) + "\n\n[truncated: first 99 of 499 characters shown (maxChars=100)]"},
		{name: "size cap while reading", handler: serve("text/plain", []byte(strings.Repeat("x", 5000))), opts: WebFetchOptions{MaxBytes: 1000},
			want: "URL: {URL}\nContent-Type: text/plain\n\n" + strings.Repeat("x", 1000) + "\n[the page is larger than 1000 bytes; only that much was read]"},
		{name: "maxChars too small", handler: serve("text/plain", nil), extraArgs: `,"maxChars":5`,
			wantErr: []string{`"maxChars" must be at least 100`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newPageServer(t, "", tt.handler)
			opts := tt.opts
			opts.AllowPrivate = true
			res := fetch(t, fetchRegistry(opts), srv.URL+"/x", tt.extraArgs)
			if tt.wantErr != nil {
				wantErr(t, res, tt.wantErr...)
				return
			}
			wantOK(t, res)
			if want := strings.ReplaceAll(tt.want, "{URL}", srv.URL+"/x"); res.ForLLM != want {
				t.Errorf("got:\n%q\nwant:\n%q", res.ForLLM, want)
			}
		})
	}
}

func TestWebFetchRedirects(t *testing.T) {
	srv := newPageServer(t, "", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/final":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("arrived"))
		case strings.HasPrefix(r.URL.Path, "/hop/"):
			var n int
			fmt.Sscanf(r.URL.Path, "/hop/%d", &n)
			if n <= 1 {
				http.Redirect(w, r, "/final", http.StatusFound)
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusMovedPermanently)
		case r.URL.Path == "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case r.URL.Path == "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		}
	})
	r := fetchRegistry(WebFetchOptions{AllowPrivate: true})
	res := fetch(t, r, srv.URL+"/hop/5") // five redirects: the most allowed
	wantOK(t, res)
	if !strings.HasPrefix(res.ForLLM, "URL: "+srv.URL+"/final\n") || !strings.HasSuffix(res.ForLLM, "\narrived") {
		t.Errorf("redirected fetch:\n%s", res.ForLLM)
	}
	wantErr(t, fetch(t, r, srv.URL+"/hop/6"), "stopped after 5 redirects")
	before := srv.hits.Load()
	wantErr(t, fetch(t, r, srv.URL+"/loop"), "stopped after 5 redirects")
	if n := srv.hits.Load() - before; n != 6 {
		t.Errorf("a redirect loop made %d requests, want 6 (the first and five redirects)", n)
	}
	wantErr(t, fetch(t, r, srv.URL+"/to-file"), "redirected to file:///etc/passwd, which is not http or https")
}

func TestWebFetchRefusesBadURLs(t *testing.T) {
	r := fetchRegistry(WebFetchOptions{})
	for url, want := range map[string]string{
		"example.com/page":   `"example.com/page" is not an http or https URL (did you mean https://example.com/page?)`,
		"file:///etc/passwd": `"file:///etc/passwd" is not an http or https URL`,
		"ftp://example.com":  `is not an http or https URL`,
		"http://":            `is not an http or https URL`,
		"http://[::1":        `is not an http or https URL`,
	} {
		wantErr(t, fetch(t, r, url), want)
	}
}

// TestWebFetchTimeout: a server that never answers costs the timeout, not
// the turn.
func TestWebFetchTimeout(t *testing.T) {
	srv := newPageServer(t, "", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hold the request until the client gives up
	})
	start := time.Now()
	res := fetch(t, fetchRegistry(WebFetchOptions{AllowPrivate: true, Timeout: 300 * time.Millisecond}), srv.URL)
	wantErr(t, res, "did not answer within 300ms")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestWebFetchBlocksNonPublicAddresses: by default nothing on the machine or
// the LAN is reachable, however the address is spelled, and the server is
// never contacted.
func TestWebFetchBlocksNonPublicAddresses(t *testing.T) {
	v4 := newPageServer(t, "127.0.0.1:0", serve("text/plain", []byte("internal")))
	_, port, _ := net.SplitHostPort(v4.Listener.Addr().String())
	// A server on ::1 shows it is never contacted; where the machine has no
	// IPv6 loopback the refusal is still checked, since the guard decides
	// before any connection is tried.
	v6URL, v6 := "http://[::1]:"+port+"/", (*pageServer)(nil)
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		ln.Close()
		v6 = newPageServer(t, "[::1]:0", serve("text/plain", []byte("internal")))
		v6URL = v6.URL
	}
	r := fetchRegistry(WebFetchOptions{Timeout: 5 * time.Second})
	tests := []struct {
		url, want string
	}{
		{v4.URL, "127.0.0.1 is a loopback address"},
		{v6URL, "::1 is a loopback address"},
		{"http://localhost:" + port + "/", "is a loopback address"}, // a DNS name resolving to loopback
		{"http://0.0.0.0:" + port + "/", "0.0.0.0 is an unspecified address"},
		{"http://[::ffff:127.0.0.1]:" + port + "/", "127.0.0.1 is a loopback address"},
		{"http://10.20.30.40:81/", "10.20.30.40 is a private address"},
		{"http://192.168.1.1/", "192.168.1.1 is a private address"},
		{"http://172.16.0.1/", "172.16.0.1 is a private address"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"},
		{"http://100.64.0.1/", "100.64.0.1 is a shared (CGNAT) address"},
		{"http://[fd00::2]/", "fd00::2 is a private address"},
		{"http://[fe80::1]/", "fe80::1 is a link-local address"},
		{"http://[64:ff9b::7f00:1]:" + port + "/", "loopback (embedded in IPv6) address"},
		{"http://224.0.0.1/", "224.0.0.1 is a multicast address"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			res := fetch(t, r, tt.url)
			wantErr(t, res, "refusing to fetch", tt.want, "tools.web.fetch.allow_private")
			if !errors.Is(res.Err, ErrBlockedAddress) {
				t.Errorf("error does not wrap ErrBlockedAddress: %v", res.Err)
			}
		})
	}
	if v4.hits.Load() != 0 || (v6 != nil && v6.hits.Load() != 0) {
		t.Error("a guarded server was contacted")
	}
	// The same servers answer once private addresses are allowed: the
	// refusals above were the guard's, not a dead server's.
	open := fetchRegistry(WebFetchOptions{AllowPrivate: true})
	urls := []string{v4.URL, "http://localhost:" + port + "/"}
	if v6 != nil {
		urls = append(urls, v6.URL)
	}
	for _, u := range urls {
		if res := fetch(t, open, u); !strings.HasSuffix(res.ForLLM, "internal") {
			t.Errorf("allow_private fetch of %s: %s", u, res.ForLLM)
		}
	}
}

// TestWebFetchRedirectToLoopbackBlocked: a permitted page cannot bounce the
// fetch to a forbidden address. 127.0.0.1 is permitted through AllowNets;
// 127.0.0.2 (also loopback, and reachable on Linux) is not.
func TestWebFetchRedirectToLoopbackBlocked(t *testing.T) {
	inner := newPageServer(t, "127.0.0.2:0", serve("text/plain", []byte("internal")))
	outer := newPageServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			w.Write([]byte("public page"))
			return
		}
		http.Redirect(w, r, inner.URL+"/admin", http.StatusFound)
	})
	r := fetchRegistry(WebFetchOptions{AllowNets: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if res := fetch(t, r, outer.URL+"/ok"); !strings.HasSuffix(res.ForLLM, "public page") {
		t.Fatalf("the permitted server: %s", res.ForLLM)
	}
	res := fetch(t, r, outer.URL+"/redirect")
	wantErr(t, res, "refusing to fetch", "127.0.0.2 is a loopback address")
	wantErr(t, fetch(t, r, inner.URL), "127.0.0.2 is a loopback address")
	if inner.hits.Load() != 0 {
		t.Errorf("the redirect reached the forbidden server %d times", inner.hits.Load())
	}
}

func TestNonPublic(t *testing.T) {
	for addr, want := range map[string]string{
		"8.8.8.8":              "",
		"1.1.1.1":              "",
		"93.184.216.34":        "",
		"2606:4700::1111":      "",
		"2a00:1450:4001::200e": "",
		"64:ff9b::808:808":     "", // NAT64 of 8.8.8.8
		"2002:808:808::1":      "", // 6to4 of 8.8.8.8
		"127.0.0.1":            "loopback",
		"127.255.0.9":          "loopback",
		"::1":                  "loopback",
		"0.0.0.0":              "unspecified",
		"::":                   "unspecified",
		"0.1.2.3":              "this-network",
		"10.0.0.1":             "private",
		"172.31.255.255":       "private",
		"192.168.0.1":          "private",
		"fc00::1":              "private",
		"169.254.1.1":          "link-local",
		"fe80::1":              "link-local",
		"100.64.0.0":           "shared (CGNAT)",
		"100.127.255.255":      "shared (CGNAT)",
		"100.128.0.0":          "",
		"224.0.0.251":          "multicast",
		"ff02::1":              "multicast",
		"255.255.255.255":      "reserved",
		"240.0.0.1":            "reserved",
		"192.0.2.7":            "reserved",
		"198.18.0.1":           "reserved",
		"2001:db8::1":          "reserved",
		"::127.0.0.1":          "reserved",
		"fec0::1":              "reserved",
		"64:ff9b::a00:1":       "private (embedded in IPv6)",
		"2002:a9fe:a9fe::":     "link-local (embedded in IPv6)",
	} {
		if got := nonPublic(netip.MustParseAddr(addr)); got != want {
			t.Errorf("nonPublic(%s) = %q, want %q", addr, got, want)
		}
	}
	// Mapped addresses are unmapped first.
	g := dialGuard{}
	if err := g.check(netip.MustParseAddr("::ffff:10.1.1.1")); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("mapped private address passed: %v", err)
	}
	if err := g.control("tcp", "not-an-address", nil); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("unparseable dial address passed: %v", err)
	}
}

// The LAN the owner opened to web_fetch (allow_private, allow_nets) stays
// closed to a sender nobody vouched for, whose turn could otherwise read
// the router's or another device's pages; even over a connection the
// owner's fetch left open.
func TestRestrictedFetchReachesOnlyThePublicInternet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("router admin: wifi password hunter2"))
	}))
	defer srv.Close()
	r := fetchRegistry(WebFetchOptions{AllowPrivate: true})
	owner := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "1"})
	stranger := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "5", Restricted: true})
	args := fmt.Sprintf(`{"url":%q}`, srv.URL)
	if res := r.Execute(owner, "web_fetch", args); !strings.Contains(res.ForLLM, "hunter2") {
		t.Fatalf("the owner's fetch: %s", res.ForLLM)
	}
	res := r.Execute(stranger, "web_fetch", args)
	if strings.Contains(res.ForLLM, "hunter2") || !strings.Contains(res.ForLLM, "reaches only the public internet") {
		t.Errorf("a stranger's fetch of the LAN: %s", res.ForLLM)
	}
}
