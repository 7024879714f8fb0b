package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// WebFetchOptions configures web_fetch.
type WebFetchOptions struct {
	// AllowPrivate lets web_fetch reach loopback, private, link-local and
	// other non-public addresses (config tools.web.fetch.allow_private).
	AllowPrivate bool
	// AllowNets are address ranges reachable although not public, e.g. one
	// LAN device ("192.168.1.50/32"), while the rest stays blocked.
	AllowNets []netip.Prefix
	// MaxBytes caps the body read from the server (default 5 MiB).
	MaxBytes int64
	// Timeout bounds a whole fetch, body included (default 30 s).
	Timeout time.Duration
	// MaxRedirects bounds the redirects followed (default 5).
	MaxRedirects int
	// UserAgent is sent with each request (default names Perch).
	UserAgent string
}

// DefaultMaxChars is web_fetch's maxChars when the model gives none.
const DefaultMaxChars = 50000

// MaxChars is the most maxChars may ask for: a tool result is cut at
// MaxResultBytes anyway, and a larger maxChars was cut there silently,
// with a note counting bytes instead of characters.
const MaxChars = 60000

// maxIndentJSON is the largest JSON body that is pretty-printed; a larger
// one is shown as sent, since indenting would double it in memory.
const maxIndentJSON = 1 << 20

// NewWebFetch returns the web_fetch tool.
func NewWebFetch(opts WebFetchOptions) Tool {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 5 << 20
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.MaxRedirects <= 0 {
		opts.MaxRedirects = 5
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "Mozilla/5.0 (compatible; Perch; +https://github.com/perchhq/perch)"
	}
	f := &webFetch{opts: opts}
	f.client = fetchClient(opts, dialGuard{allowPrivate: opts.AllowPrivate, allow: opts.AllowNets})
	f.public = f.client
	if opts.AllowPrivate || len(opts.AllowNets) > 0 {
		// The LAN the owner opened to web_fetch stays closed to senders
		// nobody vouched for, who could otherwise read the router's or
		// another device's pages through the bot. A client of its own,
		// so that no connection opened for the owner is reused for them.
		f.public = fetchClient(opts, dialGuard{})
	}
	return Func{
		ToolName: "web_fetch",
		ToolDescription: "Fetch a web page or API URL and return its readable text: HTML as text with headings, " +
			"paragraphs and lists; JSON pretty-printed; plain text as is. Binary content (images, PDFs) is refused. " +
			"Long pages are cut at maxChars characters with a note.",
		Params: Object(map[string]*Property{
			"url":      String("The http or https URL to fetch."),
			"maxChars": {Type: "integer", Description: "Most characters of page text to return; default 50000, at most 60000.", Minimum: Bound(100), Default: DefaultMaxChars},
		}, "url"),
		Run: f.run,
	}
}

type webFetch struct {
	opts WebFetchOptions
	// client reaches what the config allows; public only the public
	// internet, for senders nobody vouched for.
	client, public *http.Client
}

type publicOnlyKey struct{}

// withPublicOnly marks a fetch made for a sender the owner has not
// approved, so its refusal names the right reason.
func withPublicOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, publicOnlyKey{}, true)
}

func publicOnly(ctx context.Context) bool { return ctx.Value(publicOnlyKey{}) != nil }

// fetchClient is an HTTP client whose every connection, redirects'
// included, is to an address guard allows.
func fetchClient(opts WebFetchOptions, guard dialGuard) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: guard.control}
	transport := &http.Transport{
		// No proxy: the guard checks the address dialled, and behind a proxy
		// that would be the proxy's, not the page's.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          8,
		IdleConnTimeout:       60 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 20 * time.Second,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   opts.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > opts.MaxRedirects {
				return fmt.Errorf("stopped after %d redirects (last to %s)", opts.MaxRedirects, req.URL.Redacted())
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirected to %s, which is not http or https", req.URL.Redacted())
			}
			return nil
		},
	}
}

func (f *webFetch) run(ctx context.Context, args Args) Result {
	raw := strings.TrimSpace(args.String("url"))
	maxChars := min(int(args.Int("maxChars", DefaultMaxChars)), MaxChars)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		hint := ""
		if err == nil && u.Scheme == "" {
			hint = fmt.Sprintf(" (did you mean https://%s?)", raw)
		}
		return Errorf("web_fetch: %q is not an http or https URL%s", raw, hint)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Errorf("web_fetch: %q: %w", raw, err)
	}
	req.Header.Set("User-Agent", f.opts.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5")
	client := f.client
	if CallFrom(ctx).Restricted && f.public != f.client {
		client = f.public
		ctx = withPublicOnly(ctx)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Error(f.explain(ctx, u, err))
	}
	defer resp.Body.Close()
	final := resp.Request.URL.Redacted()
	if resp.StatusCode >= 400 {
		return Errorf("web_fetch: %s answered HTTP %s", final, resp.Status)
	}

	body := &cappedReader{r: resp.Body, left: f.opts.MaxBytes}
	br := bufio.NewReaderSize(body, 16<<10)
	head, _ := br.Peek(512)
	kind, mediaType, charset := classify(resp.Header.Get("Content-Type"), head)
	var text io.Reader = br
	if isLatin1(charset) {
		text = &latin1Reader{r: br}
	}

	var out strings.Builder
	fmt.Fprintf(&out, "URL: %s\nContent-Type: %s\n", final, mediaType)
	var kept string
	var total int
	switch kind {
	case kindBinary:
		size := "unknown size"
		if resp.ContentLength >= 0 {
			size = formatSize(resp.ContentLength)
		}
		return Errorf("web_fetch: %s is %s (%s), not text; web_fetch reads HTML, JSON and text only", final, mediaType, size)
	case kindHTML:
		page, err := htmlToText(text, maxChars)
		if err != nil {
			return Error(f.explain(ctx, u, err))
		}
		if page.Title != "" {
			fmt.Fprintf(&out, "Title: %s\n", page.Title)
		}
		kept, total = page.Text, page.Total
	case kindJSON, kindText:
		data, err := io.ReadAll(text)
		if err != nil {
			return Error(f.explain(ctx, u, err))
		}
		if kind == kindJSON || looksLikeJSON(data) {
			var ind bytes.Buffer
			if len(data) <= maxIndentJSON && json.Indent(&ind, bytes.TrimSpace(data), "", "  ") == nil {
				data = ind.Bytes()
			}
		}
		kept, total = keepRunes(strings.ToValidUTF8(string(data), "\uFFFD"), maxChars)
	}
	out.WriteString("\n")
	if strings.TrimSpace(kept) == "" {
		out.WriteString("(the page has no readable text)")
	} else {
		out.WriteString(kept)
	}
	if total > utf8.RuneCountInString(kept) {
		fmt.Fprintf(&out, "\n\n[truncated: first %d of %d characters shown (maxChars=%d)]", utf8.RuneCountInString(kept), total, maxChars)
	}
	if body.over {
		fmt.Fprintf(&out, "\n[the page is larger than %s; only that much was read]", formatSize(f.opts.MaxBytes))
	}
	return Text(out.String())
}

// explain turns a fetch error into a message naming the cause and the fix.
func (f *webFetch) explain(ctx context.Context, u *url.URL, err error) error {
	target := u.Redacted()
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL
	}
	var dnsErr *net.DNSError
	var blocked *blockedError
	switch {
	case errors.As(err, &blocked):
		if publicOnly(ctx) {
			return fmt.Errorf("web_fetch: refusing to fetch %s: %w; for a sender the owner has not approved, web_fetch reaches only the public internet", target, blocked)
		}
		return fmt.Errorf("web_fetch: refusing to fetch %s: %w; web_fetch does not reach loopback, private or link-local addresses (set tools.web.fetch.allow_private to reach devices on the LAN)", target, blocked)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Errorf("web_fetch: %s did not answer within %s: %w", target, f.opts.Timeout, err)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("web_fetch: cannot resolve the host of %s (%s); check the URL", target, dnsErr.Err)
	}
	return fmt.Errorf("web_fetch: %s: %w", target, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type contentKind int

const (
	kindBinary contentKind = iota
	kindHTML
	kindJSON
	kindText
)

// classify decides how to read a body from its Content-Type header, or from
// its first bytes when the header is missing or says only "bytes".
func classify(header string, head []byte) (kind contentKind, mediaType, charset string) {
	mt, params, err := mime.ParseMediaType(header)
	if err != nil || mt == "" || mt == "application/octet-stream" || mt == "binary/octet-stream" {
		mt, params, _ = mime.ParseMediaType(http.DetectContentType(head))
	}
	charset = strings.ToLower(params["charset"])
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return kindHTML, mt, charset
	case mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"):
		return kindJSON, mt, charset
	case strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "+xml") || textApplications[mt]:
		return kindText, mt, charset
	}
	return kindBinary, mt, charset
}

var textApplications = map[string]bool{
	"application/xml": true, "application/javascript": true, "application/x-javascript": true,
	"application/ecmascript": true, "application/yaml": true, "application/x-yaml": true,
	"application/toml": true, "application/x-sh": true, "application/sql": true,
	"application/x-ndjson": true, "application/csv": true, "application/graphql": true,
}

func looksLikeJSON(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 1 && (t[0] == '{' || t[0] == '[') && json.Valid(t)
}

func isLatin1(charset string) bool {
	switch charset {
	case "iso-8859-1", "latin1", "latin-1", "windows-1252", "cp1252", "us-ascii", "ascii":
		return true
	}
	return false
}

// latin1Reader decodes ISO-8859-1 into UTF-8 (windows-1252's extra
// punctuation in 0x80-0x9F comes out as control characters, a fair price for
// not carrying charset tables).
type latin1Reader struct {
	r   io.Reader
	buf []byte
	dec []byte // decoded, reused
	out []byte // decoded, not yet returned
}

func (l *latin1Reader) Read(p []byte) (int, error) {
	for len(l.out) == 0 {
		if cap(l.buf) == 0 {
			l.buf = make([]byte, 4096)
		}
		n, err := l.r.Read(l.buf)
		l.dec = l.dec[:0]
		for _, b := range l.buf[:n] {
			l.dec = utf8.AppendRune(l.dec, rune(b))
		}
		l.out = l.dec
		if n == 0 && err != nil {
			return 0, err
		}
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	return n, nil
}

// cappedReader reads at most left bytes and then reports over when the
// source had more.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var probe [1]byte
		if n, _ := io.ReadFull(c.r, probe[:]); n > 0 {
			c.over = true
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
