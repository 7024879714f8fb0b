package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/gateway/attempts"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// pageServer is a gateway with only the page's routes.
func pageServer(t *testing.T) *gateway.Server {
	t.Helper()
	s := gateway.New(gateway.Options{Host: "127.0.0.1", Token: "tok-page-test"})
	Register(s, Deps{})
	return s
}

// pageRequest is a request as a browser on this machine sends it (httptest's
// own Host, example.com, does not name the board).
func pageRequest(method, path string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, path, body)
	req.Host = "127.0.0.1:8080"
	return req
}

func get(s http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	req := pageRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

var assetRef = regexp.MustCompile(`"/static/([^"]+)"`)

func TestPageRoutes(t *testing.T) {
	s := pageServer(t)
	index := get(s, "/").Body.String()
	hashedJS := ""
	for _, m := range assetRef.FindAllStringSubmatch(index, -1) {
		if strings.HasPrefix(m[1], "app.") {
			hashedJS = m[1]
		}
	}
	if !regexp.MustCompile(`^app\.[0-9a-f]{12}\.js$`).MatchString(hashedJS) {
		t.Fatalf("the page loads the script as %q; want a name with its content hash", hashedJS)
	}
	for _, tc := range []struct {
		name, method, path string
		status             int
		ctype, cache       string
	}{
		{"page", "GET", "/", 200, "text/html; charset=utf-8", "no-cache"},
		{"script by plain name", "GET", "/static/app.js", 200, "text/javascript; charset=utf-8", "no-cache"},
		{"script by hashed name", "GET", "/static/" + hashedJS, 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"},
		{"style", "GET", "/static/style.css", 200, "text/css; charset=utf-8", "no-cache"},
		{"icon", "GET", "/static/icon.svg", 200, "image/svg+xml", "no-cache"},
		{"unknown asset", "GET", "/static/nope.js", 404, "application/json", ""},
		{"stale hashed name", "GET", "/static/app.000000000000.js", 404, "application/json", ""},
		{"index is not an asset", "GET", "/static/index.html", 404, "application/json", ""},
		{"wrong method", "POST", "/", 405, "application/json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, pageRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("%s %s = %d, want %d: %s", tc.method, tc.path, rec.Code, tc.status, rec.Body)
			}
			if got := rec.Header().Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type = %q, want %q", got, tc.ctype)
			}
			if tc.status != 200 {
				var e struct{ Error string }
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
					t.Errorf("error body %q is not {\"error\": ...}", rec.Body)
				}
				return
			}
			h := rec.Header()
			if got := h.Get("Cache-Control"); got != tc.cache {
				t.Errorf("Cache-Control = %q, want %q", got, tc.cache)
			}
			if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("security headers missing: %v", h)
			}
			if h.Get("ETag") == "" || rec.Body.Len() == 0 {
				t.Errorf("ETag %q, body %d bytes", h.Get("ETag"), rec.Body.Len())
			}
			// A browser that has the file gets 304 and no body.
			again := get(s, tc.path, "If-None-Match", h.Get("ETag"))
			if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
				t.Errorf("revalidation = %d with %d bytes, want 304 and none", again.Code, again.Body.Len())
			}
		})
	}
}

// TestCSPForbidsInlineAndRemote: the policy is what keeps a hostile reply
// from running script, so its key parts are pinned here.
func TestCSPForbidsInlineAndRemote(t *testing.T) {
	directives := map[string]string{}
	for _, d := range strings.Split(CSP, ";") {
		f := strings.Fields(d)
		directives[f[0]] = strings.Join(f[1:], " ")
	}
	for name, want := range map[string]string{
		"default-src":     "'none'",
		"script-src":      "'self'",
		"style-src":       "'self'",
		"connect-src":     "'self'",
		"frame-ancestors": "'none'",
		"base-uri":        "'none'",
	} {
		if directives[name] != want {
			t.Errorf("%s = %q, want %q", name, directives[name], want)
		}
	}
	if strings.Contains(CSP, "unsafe-") || strings.Contains(CSP, "http") || strings.Contains(CSP, "*") {
		t.Errorf("CSP allows inline code or remote origins: %s", CSP)
	}
}

func TestEveryAssetThePageNamesIsServed(t *testing.T) {
	s := pageServer(t)
	refs := assetRef.FindAllStringSubmatch(get(s, "/").Body.String(), -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d assets, want script, style and icon", len(refs))
	}
	for _, m := range refs {
		rec := get(s, "/static/"+m[1])
		if rec.Code != 200 || !strings.Contains(rec.Header().Get("Cache-Control"), "immutable") {
			t.Errorf("/static/%s = %d %q; the page must name hashed, cacheable assets", m[1], rec.Code, rec.Header().Get("Cache-Control"))
		}
	}
}

// TestPageSkeleton pins the page's structure (elements and attributes, no
// text); run with -update after a deliberate change.
func TestPageSkeleton(t *testing.T) {
	doc, err := html.Parse(strings.NewReader(get(pageServer(t), "/").Body.String()))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	skeleton(&b, doc, 0)
	golden(t, "index.skeleton", b.String())
}

var hashInName = regexp.MustCompile(`\.[0-9a-f]{12}\.`)

func skeleton(b *strings.Builder, n *html.Node, depth int) {
	if n.Type == html.ElementNode {
		b.WriteString(strings.Repeat("  ", depth-1) + n.Data)
		for _, a := range n.Attr {
			fmt.Fprintf(b, " %s=%q", a.Key, hashInName.ReplaceAllString(a.Val, ".HASH."))
		}
		b.WriteString("\n")
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		next := depth
		if n.Type == html.ElementNode || n.Type == html.DocumentNode {
			next = depth + 1
		}
		skeleton(b, c, next)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./web -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update after a deliberate change):\n%s", t.Name(), path, got)
	}
}

// TestPageHasNoInlineCodeOrRemoteOrigin: the CSP would block inline script
// and styles anyway; this catches them before a browser silently does.
func TestPageHasNoInlineCodeOrRemoteOrigin(t *testing.T) {
	doc, err := html.Parse(bytes.NewReader(readPage(t, "index.html")))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data == "style" {
				t.Errorf("<style> element: put styles in style.css")
			}
			hasSrc := false
			for _, a := range n.Attr {
				switch {
				case strings.HasPrefix(a.Key, "on"):
					t.Errorf("<%s %s=...>: inline handlers are blocked by the CSP", n.Data, a.Key)
				case a.Key == "style":
					t.Errorf("<%s style=...>: inline styles are blocked by the CSP", n.Data)
				case a.Key == "src" || a.Key == "href":
					hasSrc = hasSrc || a.Key == "src"
					if !strings.HasPrefix(a.Val, "/static/") {
						t.Errorf("<%s %s=%q>: only /static/ assets may be loaded", n.Data, a.Key, a.Val)
					}
				}
			}
			if n.Data == "script" && !hasSrc {
				t.Errorf("inline <script>: put code in app.js")
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if css := string(readPage(t, "style.css")); strings.Contains(css, "url(") || strings.Contains(css, "@import") {
		t.Errorf("style.css loads another file; keep it self-contained")
	}
}

// TestScriptPlacesTextOnly: model output must never be parsed as HTML, so
// the script uses none of the APIs that parse markup or evaluate strings.
func TestScriptPlacesTextOnly(t *testing.T) {
	js := string(readPage(t, "app.js"))
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
		"new Function", "DOMParser", "createContextualFragment", "srcdoc", "setAttribute('on", "setTimeout('", "setInterval('"} {
		if strings.Contains(js, sink) {
			t.Errorf("app.js uses %s; place model output with textContent", sink)
		}
	}
}

// TestPageIsSmall keeps the page quick on a phone over a weak link and
// small in the binary.
func TestPageIsSmall(t *testing.T) {
	total := 0
	fs.WalkDir(pageFS, "page", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(pageFS, path)
			total += len(b)
		}
		return nil
	})
	t.Logf("page: %d bytes", total)
	if total > 150_000 {
		t.Errorf("page files total %d bytes, budget 150 KB", total)
	}
}

// TestVendoredUPlotIsUnchanged: the chart library is uPlot 1.6.32 exactly
// as the npm package ships it (web/third_party/uplot/README.md), with its
// license kept beside it.
func TestVendoredUPlotIsUnchanged(t *testing.T) {
	for name, want := range map[string]string{
		"uplot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
		"uplot.min.css":     "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
	} {
		sum := sha256.Sum256(readPage(t, name))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s has sha256 %s, want %s (the npm package's file); see web/third_party/uplot/README.md", name, got, want)
		}
	}
	lic, err := os.ReadFile("third_party/uplot/LICENSE")
	if err != nil || !strings.Contains(string(lic), "The MIT License") || !strings.Contains(string(lic), "Leon Sorokin") {
		t.Errorf("uPlot's license is missing or changed: %v", err)
	}
}

// TestSetupFormOffersEveryProvider keeps the form's list in step with the
// providers the config knows.
func TestSetupFormOffersEveryProvider(t *testing.T) {
	doc, err := html.Parse(bytes.NewReader(readPage(t, "index.html")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var walk func(n *html.Node, inSelect bool)
	walk = func(n *html.Node, inSelect bool) {
		if n.Type == html.ElementNode && n.Data == "select" && attr(n, "id") == "setup-provider" {
			inSelect = true
		}
		if inSelect && n.Type == html.ElementNode && n.Data == "option" {
			got = append(got, attr(n, "value"))
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, inSelect)
		}
	}
	walk(doc, false)
	slices.Sort(got)
	want := slices.Sorted(slices.Values(config.ProviderNames))
	if !slices.Equal(got, want) {
		t.Errorf("setup form offers %v, config knows %v", got, want)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func readPage(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(pageFS, "page/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSetupCodeShape(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		var g gate
		g.issue()
		if !regexp.MustCompile(`^\d{4}-\d{4}$`).MatchString(g.code) {
			t.Fatalf("setup code %q is not 1234-5678", g.code)
		}
		seen[g.code] = true
	}
	if len(seen) < 19 {
		t.Errorf("20 codes gave %d distinct values; are they random?", len(seen))
	}
}

// TestGateLimitsWrongCodes walks the code check through a fake clock: a
// client may give five wrong codes at once, then one per 12 s; while it
// waits even the right code is refused; other clients keep their own
// budget; and the code is compared without the spaces and dashes people
// type.
func TestGateLimitsWrongCodes(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	g := newGate(func() time.Time { return now })
	g.code = "1234-5678"
	a, b := attempts.ClientOf("192.0.2.66:1"), attempts.ClientOf("192.0.2.10:1")
	expect := func(c attempts.Client, given string, status int, msgPart string) {
		t.Helper()
		v := g.check(given, c)
		if v.status != status || !strings.Contains(v.msg, msgPart) {
			t.Fatalf("check(%q) = %d %q, want %d containing %q", given, v.status, v.msg, status, msgPart)
		}
	}
	expect(a, "", 403, "setup code is missing")
	expect(a, "0000-0000", 403, "4 more tries")
	now = now.Add(10 * time.Second)
	for i := 3; i >= 0; i-- {
		expect(a, "9999 9999", 403, fmt.Sprintf("%d more tries", i))
	}
	// a's budget is spent: even the right code waits, a's alone.
	if v := g.check("1234-5678", a); v.wait != 2*time.Second {
		t.Errorf("wait = %v, want 2s: a refills one try per 12 s", v.wait)
	}
	expect(a, "1234-5678", 429, "wait 2 seconds")
	expect(b, "1234-5678", 0, "")
	now = now.Add(time.Minute)
	expect(a, "12345678", 0, "")
	expect(a, " 1234 - 5678 ", 0, "")
	g.code = ""
	expect(a, "1234-5678", 403, "no setup code is active")
}

// TestGateBoundsAllClients: many addresses together still get only 30
// wrong codes at once and one per 2 s, so guessing 10^8 codes takes years
// however many addresses a stranger has.
func TestGateBoundsAllClients(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	g := newGate(func() time.Time { return now })
	g.code = "1234-5678"
	wrong := 0
	for i := 0; i < 100; i++ {
		c := attempts.ClientOf(fmt.Sprintf("10.0.0.%d:1", i))
		for range 5 {
			if v := g.check("0000-0000", c); v.status == 403 {
				wrong++
			}
		}
	}
	if wrong != 30 {
		t.Errorf("%d wrong codes checked from 100 addresses at once, want 30", wrong)
	}
	v := g.check("1234-5678", attempts.ClientOf("192.0.2.10:1"))
	if v.status != 429 || !strings.Contains(v.msg, "many addresses") || v.wait != 2*time.Second {
		t.Errorf("a fresh client meanwhile = %d %q (wait %v), want 429 naming many addresses, 2s", v.status, v.msg, v.wait)
	}
}

// TestSetupStrangerCannotLockOwnerOut: wrong codes from one address (a
// stranger guessing, or a script) do not keep the owner, on another
// address, from setting up the board.
func TestSetupStrangerCannotLockOwnerOut(t *testing.T) {
	var logs bytes.Buffer
	setup := &fakeSetup{}
	s := gateway.New(gateway.Options{Host: "0.0.0.0", Token: "tok-0123456789abcdef01234567"})
	Register(s, Deps{Setup: setup, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	m := regexp.MustCompile(`setup_code=(\d{4}-\d{4})`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no setup code logged:\n%s", logs.String())
	}
	post := func(remote, code string) *httptest.ResponseRecorder {
		req := pageRequest("POST", "/setup", strings.NewReader(`{"code":"`+code+`","provider":"openai","model":"m","api_key":"k"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	refused := 0
	for range 50 {
		if post("192.0.2.66:4000", "0000-0000").Code == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused != 45 {
		t.Errorf("%d of the stranger's 50 wrong codes refused unchecked, want 45", refused)
	}
	if rec := post("192.0.2.10:4000", m[1]); rec.Code != 200 || setup.applied != 1 {
		t.Fatalf("the owner's right code after a stranger's guesses = %d %s, want 200", rec.Code, rec.Body)
	}
	if n := strings.Count(logs.String(), "\n"); n > 4 {
		t.Errorf("%d log lines for 50 wrong codes, want a few:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "192.0.2.66") {
		t.Errorf("the stranger's address is not in the log:\n%s", logs.String())
	}
}

// fakeSetup is a Setup that records what it applies.
type fakeSetup struct{ applied int }

func (f *fakeSetup) Configured() bool { return f.applied > 0 }

func (f *fakeSetup) Apply(_ context.Context, req SetupRequest) (SetupResult, error) {
	f.applied++
	return SetupResult{Provider: req.Provider, Model: req.Model, Config: "/tmp/config.json"}, nil
}

// TestSetupRouteOnlyWithSetup: without a Setup the page works and POST
// /setup does not exist.
func TestSetupRouteOnlyWithSetup(t *testing.T) {
	rec := httptest.NewRecorder()
	pageServer(t).ServeHTTP(rec, pageRequest("POST", "/setup", strings.NewReader(`{}`)))
	if rec.Code != http.StatusNotFound {
		t.Errorf("POST /setup without a Setup = %d, want 404", rec.Code)
	}
}
