package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/html"
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
		return nil, fmt.Errorf("bad tools.web.search.api_base %q: %w", s.opts.APIBase, err)
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
		return nil, fmt.Errorf("the keyless search page did not answer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the keyless search page answered HTTP %d; try again later, or set tools.web.search.api_key to use the search API", resp.StatusCode)
	}
	doc, err := html.Parse(io.LimitReader(resp.Body, maxSearchBody))
	if err != nil {
		return nil, fmt.Errorf("the keyless search page did not parse: %w", err)
	}
	results, challenged := parseDDG(doc)
	if len(results) == 0 && challenged {
		return nil, errors.New("DuckDuckGo answered with a bot check instead of results; try again later, or set tools.web.search.api_key to use the search API")
	}
	return results, nil
}

// parseDDG collects the organic results of a DuckDuckGo HTML page: elements
// of class "result" holding a "result__a" title link and a
// "result__snippet". Ads (class "result--ad", or links to its y.js ad
// redirector) are skipped. challenged reports a bot-check page.
func parseDDG(doc *html.Node) (results []searchResult, challenged bool) {
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			classes := strings.Fields(attr(n, "class"))
			switch {
			case hasClass(classes, "result"):
				if r, ok := ddgResult(n, classes); ok {
					results = append(results, r)
				}
				return
			case strings.Contains(attr(n, "class"), "anomaly") || strings.Contains(attr(n, "action"), "anomaly"):
				challenged = true
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return results, challenged
}

func ddgResult(n *html.Node, classes []string) (searchResult, bool) {
	if hasClass(classes, "result--ad") || hasClass(classes, "result--no-result") {
		return searchResult{}, false
	}
	title := findClass(n, "result__a")
	if title == nil {
		return searchResult{}, false
	}
	link := ddgTarget(attr(title, "href"))
	if link == "" {
		return searchResult{}, false
	}
	r := searchResult{Title: nodeText(title), URL: link}
	if sn := findClass(n, "result__snippet"); sn != nil {
		r.Snippet = nodeText(sn)
	}
	return r, r.Title != ""
}

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

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(classes []string, c string) bool {
	for _, x := range classes {
		if x == c {
			return true
		}
	}
	return false
}

// findClass returns the first element below n carrying class c.
func findClass(n *html.Node, c string) *html.Node {
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		if ch.Type == html.ElementNode && hasClass(strings.Fields(attr(ch, "class")), c) {
			return ch
		}
		if f := findClass(ch, c); f != nil {
			return f
		}
	}
	return nil
}

// nodeText is the text below n with white space collapsed.
func nodeText(n *html.Node) string {
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(sb.String()), " ")
}

// inlineText strips tags and decodes entities in a short HTML fragment.
func inlineText(s string) string {
	var sb strings.Builder
	z := html.NewTokenizer(strings.NewReader(s))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return strings.Join(strings.Fields(sb.String()), " ")
		case html.TextToken:
			sb.Write(z.Text())
		}
	}
}

// redactURLError drops the request URL from a transport error: it is ours,
// adds nothing for the model and could one day carry a key.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
