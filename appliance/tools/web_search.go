package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/tools/htmlscan"
)

// WebSearchOptions configures web_search.
type WebSearchOptions struct {
	// APIKey selects the keyed search API (Brave Search wire format; config
	// tools.web.search.api_key). Empty: keyless results scraped from
	// DuckDuckGo's HTML page.
	APIKey string
	// APIBase is the keyed API's base URL (config tools.web.search.api_base;
	// default https://api.search.brave.com/res/v1).
	APIBase string
	// HTMLBase is the keyless page's base URL (config
	// tools.web.search.html_base; default https://html.duckduckgo.com).
	HTMLBase string
	// Client makes the requests (default: a client with a 20 s timeout).
	Client *http.Client
}

// Defaults of WebSearchOptions.
const (
	DefaultSearchAPIBase  = "https://api.search.brave.com/res/v1"
	DefaultSearchHTMLBase = "https://html.duckduckgo.com"
)

// maxSearchBody caps a search response read into memory; a results page is
// some tens of KB.
const maxSearchBody = 2 << 20

// browserUA is sent to the keyless page, which answers unknown agents with a
// bot check more often.
const browserUA = "Mozilla/5.0 (X11; Linux aarch64; rv:128.0) Gecko/20100101 Firefox/128.0"

// NewWebSearch returns the web_search tool.
func NewWebSearch(opts WebSearchOptions) Tool {
	if opts.APIBase == "" {
		opts.APIBase = DefaultSearchAPIBase
	}
	if opts.HTMLBase == "" {
		opts.HTMLBase = DefaultSearchHTMLBase
	}
	opts.APIBase = strings.TrimRight(opts.APIBase, "/")
	opts.HTMLBase = strings.TrimRight(opts.HTMLBase, "/")
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 20 * time.Second}
	}
	opts.Client = keepKeyHome(opts.Client)
	s := &webSearch{opts: opts}
	return Func{
		ToolName:        "web_search",
		ToolDescription: "Search the web. Returns a numbered list of results, each with title, URL and snippet; use web_fetch to read a result's page.",
		Params: Object(map[string]*Property{
			"query": String("The search query."),
			"count": {Type: "integer", Description: "Number of results, 1 to 10; default 5.", Minimum: Bound(1), Maximum: Bound(10), Default: 5},
		}, "query"),
		Run: s.run,
	}
}

type webSearch struct {
	opts WebSearchOptions
}

// keepKeyHome is c, but a redirect to another host, or from https to
// http, goes without the search key: net/http drops only the standard
// credential headers (Authorization, Cookie) on such a redirect, and would
// hand X-Subscription-Token to whatever host an answer names.
func keepKeyHome(c *http.Client) *http.Client {
	cc := *c
	next := c.CheckRedirect
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		first := via[0].URL
		if req.URL.Host != first.Host || (first.Scheme == "https" && req.URL.Scheme != "https") {
			req.Header.Del("X-Subscription-Token")
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &cc
}

type searchResult struct {
	Title, URL, Snippet string
}

func (s *webSearch) run(ctx context.Context, args Args) Result {
	query := strings.TrimSpace(args.String("query"))
	if query == "" {
		return Errorf("web_search: query is empty; say what to search for")
	}
	count := int(args.Int("count", 5))
	var (
		results []searchResult
		source  string
		err     error
	)
	if s.opts.APIKey != "" {
		source = "search API"
		results, err = s.keyed(ctx, query, count)
	} else {
		source = "DuckDuckGo"
		results, err = s.keyless(ctx, query)
	}
	if err != nil {
		return Errorf("web_search: %w", err)
	}
	if len(results) > count {
		results = results[:count]
	}
	if len(results) == 0 {
		return Text(fmt.Sprintf("No results for %q (%s). Try other words.", query, source))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Results for %q (%s):\n", query, source)
	for i, r := range results {
		fmt.Fprintf(&sb, "\n%d. %s\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&sb, "   %s\n", r.Snippet)
		}
	}
	return Text(strings.TrimSuffix(sb.String(), "\n"))
}

// keyed asks the Brave Search API: GET {api_base}/web/search?q=&count= with
// the key in X-Subscription-Token.
func (s *webSearch) keyed(ctx context.Context, query string, count int) ([]searchResult, error) {
	u := s.opts.APIBase + "/web/search?" + url.Values{"q": {query}, "count": {fmt.Sprint(count)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		// The parser's words quote pieces of the address, which may hold a
		// password; the config's check says more, with the address masked.
		return nil, errors.New("bad tools.web.search.api_base: it does not parse as a URL")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Subscription-Token", s.opts.APIKey)
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the search API did not answer: %w", redactURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSearchBody))
	if err != nil {
		return nil, fmt.Errorf("reading the search API's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Detail string `json:"detail"`
			} `json:"error"`
		}
		json.Unmarshal(body, &e)
		detail := ""
		if e.Error.Detail != "" {
			detail = ": " + truncateRunes(e.Error.Detail, 200)
		}
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return nil, fmt.Errorf("the search API rejected the key (HTTP %d%s); check tools.web.search.api_key", resp.StatusCode, detail)
		case http.StatusTooManyRequests:
			return nil, fmt.Errorf("the search API's rate limit was reached (HTTP 429%s); wait a little and search again", detail)
		}
		return nil, fmt.Errorf("the search API answered HTTP %d%s", resp.StatusCode, detail)
	}
	var br struct {
		Web struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
			} `json:"results"`
		} `json:"web"`
	}
	if err := json.Unmarshal(body, &br); err != nil {
		return nil, fmt.Errorf("the search API's answer is not the expected JSON: %w", err)
	}
	out := make([]searchResult, 0, len(br.Web.Results))
	for _, r := range br.Web.Results {
		// Titles and descriptions carry <strong> highlights and entities.
		out = append(out, searchResult{Title: inlineText(r.Title), URL: r.URL, Snippet: inlineText(r.Description)})
	}
	return out, nil
}

// keyless posts the query to DuckDuckGo's HTML page, as its own form does,
// and reads the results out of the page with an HTML parser.
func (s *webSearch) keyless(ctx context.Context, query string) ([]searchResult, error) {
	form := url.Values{"q": {query}, "b": {""}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.HTMLBase+"/html/", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("bad tools.web.search.html_base %q: %w", s.opts.HTMLBase, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", browserUA)
	req.Header.Set("Accept", "text/html")
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the keyless search page did not answer: %w", redactURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the keyless search page answered HTTP %d; try again later, or set tools.web.search.api_key to use the search API", resp.StatusCode)
	}
	results, challenged, err := parseDDG(io.LimitReader(resp.Body, maxSearchBody))
	if err != nil {
		return nil, fmt.Errorf("the keyless search page did not parse: %w", err)
	}
	if len(results) == 0 && challenged {
		return nil, errors.New("DuckDuckGo answered with a bot check instead of results; try again later, or set tools.web.search.api_key to use the search API")
	}
	return results, nil
}

// parseDDG collects the organic results of a DuckDuckGo HTML page: elements
// of class "result" holding a "result__a" title link and a
// "result__snippet". Ads (class "result--ad", or links to its y.js ad
// redirector) are skipped. challenged reports a bot-check page (an element
// whose class or form action names the "anomaly" check, outside results).
//
// It reads the page as a stream of tags, keeping the open elements on a
// stack, which is the page's tree as far as results go: a result is the
// first "result__a" and the first "result__snippet" below an element of
// class "result", their text with white space collapsed.
func parseDDG(r io.Reader) (results []searchResult, challenged bool, err error) {
	z := htmlscan.NewTokenizer(r)
	var (
		open []string // names of the open elements, outermost first
		// The result being read: the depth of its element (0 when none),
		// its classes, and the depth of its title and snippet elements
		// while their text is read (0 when not in one).
		result                 int
		resultClasses          []string
		title, snippet         int
		href                   string
		titleText, snippetText strings.Builder
		haveTitle, haveSnippet bool
	)
	finish := func() {
		if r, ok := ddgResult(resultClasses, haveTitle, href, titleText.String(), haveSnippet, snippetText.String()); ok {
			results = append(results, r)
		}
		result, title, snippet, href, haveTitle, haveSnippet = 0, 0, 0, "", false, false
		titleText.Reset()
		snippetText.Reset()
	}
	for {
		tt := z.Next()
		switch tt {
		case htmlscan.ErrorToken:
			if err := z.Err(); err != io.EOF {
				return nil, false, err
			}
			if result > 0 {
				finish()
			}
			return results, challenged, nil
		case htmlscan.TextToken:
			if title > 0 {
				titleText.Write(z.Text())
			}
			if snippet > 0 {
				snippetText.Write(z.Text())
			}
		case htmlscan.StartTagToken, htmlscan.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			var class, action, link string
			for more := hasAttr; more; {
				var k, v []byte
				k, v, more = z.TagAttr()
				switch string(k) {
				case "class":
					if class == "" {
						class = string(v)
					}
				case "action":
					if action == "" {
						action = string(v)
					}
				case "href":
					if link == "" {
						link = string(v)
					}
				}
			}
			void := voidElement(string(name))
			depth := len(open) + 1 // the depth this element has while open
			classes := strings.Fields(class)
			switch {
			case result == 0 && hasClass(classes, "result"):
				if void {
					// An empty result: no title below it.
					resultClasses = classes
					finish()
					break
				}
				result, resultClasses = depth, classes
			case result > 0:
				if !haveTitle && hasClass(classes, "result__a") {
					haveTitle, href = true, link
					if !void {
						title = depth
					}
				}
				if !haveSnippet && hasClass(classes, "result__snippet") {
					haveSnippet = true
					if !void {
						snippet = depth
					}
				}
			case strings.Contains(class, "anomaly") || strings.Contains(action, "anomaly"):
				challenged = true
			}
			if !void {
				open = append(open, string(name))
			}
		case htmlscan.EndTagToken:
			name, _ := z.TagName()
			// An end tag closes the innermost open element of its name
			// and those left open inside it; one that matches none is
			// ignored, as a browser does.
			i := len(open) - 1
			for i >= 0 && open[i] != string(name) {
				i--
			}
			if i < 0 {
				continue
			}
			open = open[:i]
			if title > len(open) {
				title = 0
			}
			if snippet > len(open) {
				snippet = 0
			}
			if result > len(open) {
				finish()
			}
		}
	}
}

// voidElement reports the elements that have no end tag and hold nothing.
func voidElement(name string) bool {
	switch name {
	case "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr", "keygen":
		return true
	}
	return false
}

// ddgResult makes a result of what a "result" element held, or reports
// that it is none: an ad, the "no results" notice, no title link, a link
// that is no page.
func ddgResult(classes []string, haveTitle bool, href, title string, haveSnippet bool, snippet string) (searchResult, bool) {
	if hasClass(classes, "result--ad") || hasClass(classes, "result--no-result") || !haveTitle {
		return searchResult{}, false
	}
	link := ddgTarget(href)
	if link == "" {
		return searchResult{}, false
	}
	r := searchResult{Title: collapse(title), URL: link}
	if haveSnippet {
		r.Snippet = collapse(snippet)
	}
	return r, r.Title != ""
}

// collapse joins the words of s with single spaces.
func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// ddgTarget turns a result link into the page's own URL: DuckDuckGo wraps
// links as //duckduckgo.com/l/?uddg=<escaped URL>. Ad redirects and links
// that are not http(s) give "".
func ddgTarget(href string) string {
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if u.Host == "" || u.Host == "duckduckgo.com" || strings.HasSuffix(u.Host, ".duckduckgo.com") {
		if u.Path == "/l/" || u.Path == "/l" {
			if t := u.Query().Get("uddg"); t != "" {
				return ddgTarget(t)
			}
		}
		if u.Host != "" || u.Path == "/y.js" {
			return "" // its own pages and ad redirects are no results
		}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return ""
	}
	return u.String()
}

func hasClass(classes []string, c string) bool {
	for _, x := range classes {
		if x == c {
			return true
		}
	}
	return false
}

// inlineText strips tags and decodes entities in a short HTML fragment.
func inlineText(s string) string {
	var sb strings.Builder
	z := htmlscan.NewTokenizer(strings.NewReader(s))
	for {
		switch z.Next() {
		case htmlscan.ErrorToken:
			return collapse(sb.String())
		case htmlscan.TextToken:
			sb.Write(z.Text())
		}
	}
}

// redactURLError drops the request URL from a transport error: it is ours,
// adds nothing for the model and could one day carry a key.
//
// A name that did not resolve is said without the resolver's address
// (Go's message names it): the answer may reach a stranger on an open
// channel, and the LAN's layout is none of theirs.
func redactURLError(err error) error {
	var de *net.DNSError
	if errors.As(err, &de) {
		why := de.Err
		if de.IsNotFound {
			why = "no such host"
		}
		return fmt.Errorf("the name %s could not be resolved (%s): is the board online, and its DNS working?", de.Name, why)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
