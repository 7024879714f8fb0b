package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/julienschmidt/httprouter"

	"github.com/perchhq/perch/appliance/gateway"
)

//go:embed page
var pageFS embed.FS

// CSP is the page's Content-Security-Policy: scripts, styles and requests
// only from this origin, images and media also from data: URIs (the
// canvas and generate_image deliver them inline), no inline script or style
// element, no framing, no remote origin.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"media-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Deps are what the page's routes need from the rest of Perch.
type Deps struct {
	// Setup backs POST /setup; nil leaves the route out.
	Setup Setup
	// Log receives the setup code and setup events; nil means slog.Default.
	Log *slog.Logger
	// Token, when set, returns gateway.api_token: a setup proved by the
	// code hands it to the page, so the owner is not asked for a second
	// secret a moment later.
	Token func() string
	// CodeWhere says where the setup code is printed (see CodeWhere);
	// empty means the gateway's log.
	CodeWhere string
	// OnSetup, when set, is called after a setup succeeded.
	OnSetup func()
}

// Page is the registered page.
type Page struct{ setup *setupHandler }

// SetupCode is the one-time setup code while one is active, else "".
func (p *Page) SetupCode() string {
	if p == nil || p.setup == nil {
		return ""
	}
	p.setup.mu.Lock()
	defer p.setup.mu.Unlock()
	return p.setup.gate.code
}

// Register adds GET /, GET /static/:name, GET and POST /setup to s. When no
// provider is configured it issues the one-time setup code and logs it (at
// Info, so it reaches the console and the journal).
func Register(s *gateway.Server, d Deps) *Page {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.CodeWhere == "" {
		d.CodeWhere = "in the gateway's log"
	}
	// The files are hashed on the first request, not here: start-up is
	// on the path to readiness, the first page load is not.
	s.Handle(http.MethodGet, "/", gateway.Open, func(w http.ResponseWriter, r *http.Request) { site().serveIndex(w, r) })
	s.HandleParams(http.MethodGet, "/static/:name", gateway.Open, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		site().serveAsset(w, r, ps)
	})
	page := &Page{}
	if d.Setup != nil {
		h := newSetupHandler(s, d)
		page.setup = h
		if !d.Setup.Configured() {
			h.gate.issue()
			d.Log.Info("first-run setup: no provider is configured; open the web page and enter this setup code",
				"setup_code", h.gate.code)
		}
		s.Handle(http.MethodGet, "/setup", gateway.Open, h.info)
		s.Handle(http.MethodPost, "/setup", gateway.Open, h.serve)
	}
	return page
}

// asset is one embedded file as served.
type asset struct {
	body   []byte
	ctype  string
	etag   string
	hashed string // name with the content hash, e.g. app.1a2b3c4d5e6f.js
}

// pages holds the page and its assets, by plain and by hashed name.
type pages struct {
	index  asset
	assets map[string]*asset
	hashed map[string]bool
}

// site builds the served files once: every asset under a name carrying its
// content hash (cached for good), and the index rewritten to use those names
// (revalidated by ETag on every load), so an upgrade never mixes old and new
// files in a browser's cache.
var site = sync.OnceValue(func() *pages {
	p, err := build(pageFS)
	if err != nil {
		panic("web: " + err.Error()) // the embedded files are part of the binary
	}
	return p
})

func build(fsys fs.FS) (*pages, error) {
	p := &pages{assets: map[string]*asset{}, hashed: map[string]bool{}}
	entries, err := fs.ReadDir(fsys, "page")
	if err != nil {
		return nil, err
	}
	var html []byte
	for _, e := range entries {
		name := e.Name()
		body, err := fs.ReadFile(fsys, "page/"+name)
		if err != nil {
			return nil, err
		}
		if name == "index.html" {
			html = body
			continue
		}
		sum := sha256.Sum256(body)
		h := hex.EncodeToString(sum[:6])
		ext := path.Ext(name)
		a := &asset{body: body, ctype: contentType(ext), etag: `"` + h + `"`,
			hashed: strings.TrimSuffix(name, ext) + "." + h + ext}
		p.assets[name] = a
		p.assets[a.hashed] = a
		p.hashed[a.hashed] = true
	}
	if html == nil {
		return nil, fmt.Errorf("page/index.html is missing")
	}
	s := string(html)
	for name, a := range p.assets {
		if !p.hashed[name] {
			s = strings.ReplaceAll(s, `"/static/`+name+`"`, `"/static/`+a.hashed+`"`)
		}
	}
	sum := sha256.Sum256([]byte(s))
	p.index = asset{body: []byte(s), ctype: "text/html; charset=utf-8", etag: `"` + hex.EncodeToString(sum[:6]) + `"`}
	return p, nil
}

func contentType(ext string) string {
	switch ext {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

func (p *pages) serveIndex(w http.ResponseWriter, r *http.Request) {
	// A page from an older binary must not linger: revalidate every load.
	serve(w, r, &p.index, "no-cache")
}

func (p *pages) serveAsset(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	a, ok := p.assets[name]
	if !ok {
		gateway.WriteError(w, http.StatusNotFound, fmt.Sprintf("no such file /static/%s; reload the page (an upgrade renames the assets)", name))
		return
	}
	cc := "no-cache"
	if p.hashed[name] {
		cc = "public, max-age=31536000, immutable"
	}
	serve(w, r, a, cc)
}

func serve(w http.ResponseWriter, r *http.Request, a *asset, cacheControl string) {
	h := w.Header()
	setSecurityHeaders(h)
	h.Set("Cache-Control", cacheControl)
	h.Set("ETag", a.etag)
	if etagMatch(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.ctype)
	h.Set("Content-Length", fmt.Sprint(len(a.body)))
	w.WriteHeader(http.StatusOK)
	w.Write(a.body)
}

func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// etagMatch reports whether an If-None-Match header names etag (weak
// comparison, as RFC 9110 wants for If-None-Match).
func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
