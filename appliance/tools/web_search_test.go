package tools

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func searchRegistry(opts WebSearchOptions) *Registry {
	return registryOf(NewWebSearch(opts))
}

// braveFake speaks the Brave Search API's wire format for the requests it
// checks: GET /web/search?q=&count= with X-Subscription-Token.
func braveFake(t *testing.T, key string, status int, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method != http.MethodGet || r.URL.Path != "/res/v1/web/search" {
			t.Errorf("request %s %s, want GET /res/v1/web/search", r.Method, r.URL.Path)
		}
		if got := r.Header.Get("X-Subscription-Token"); got != key {
			t.Errorf("X-Subscription-Token = %q", got)
		}
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		if r.URL.Query().Get("q") != "raspberry pi i2c & spi" {
			t.Errorf("q = %q", r.URL.Query().Get("q"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

const braveResults = `{"type":"search","query":{"original":"raspberry pi i2c & spi"},"web":{"type":"search","results":[
 {"title":"Configuration - <strong>Raspberry Pi</strong> Documentation","url":"https://www.raspberrypi.com/documentation/computers/configuration.html","description":"Enable <strong>I2C</strong> &amp; <strong>SPI</strong> with raspi-config.","age":"2 days ago"},
 {"title":"SPI on the Pi","url":"https://learn.example.org/spi","description":"Use spidev0.0 for chip select 0."},
 {"title":"Third","url":"https://example.com/3","description":""}]}}`

func TestWebSearchKeyed(t *testing.T) {
	srv, hits := braveFake(t, "bsk-test-key", http.StatusOK, braveResults)
	r := searchRegistry(WebSearchOptions{APIKey: "bsk-test-key", APIBase: srv.URL + "/res/v1/"})

	res := r.Execute(context.Background(), "web_search", `{"query":"raspberry pi i2c & spi","count":2}`)
	wantOK(t, res)
	want := `Results for "raspberry pi i2c & spi" (search API):

1. Configuration - Raspberry Pi Documentation
   https://www.raspberrypi.com/documentation/computers/configuration.html
   Enable I2C & SPI with raspi-config.

2. SPI on the Pi
   https://learn.example.org/spi
   Use spidev0.0 for chip select 0.`
	if res.ForLLM != want {
		t.Errorf("got:\n%s\nwant:\n%s", res.ForLLM, want)
	}

	res = r.Execute(context.Background(), "web_search", `{"query":"raspberry pi i2c & spi"}`)
	if !strings.Contains(res.ForLLM, "3. Third\n   https://example.com/3") || strings.Contains(res.ForLLM, "4.") {
		t.Errorf("default count: %s", res.ForLLM)
	}
	if hits.Load() != 2 {
		t.Errorf("fake saw %d requests", hits.Load())
	}
}

func TestWebSearchKeyedSendsCount(t *testing.T) {
	var count string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		count = r.URL.Query().Get("count")
		w.Write([]byte(`{"web":{"results":[]}}`))
	}))
	defer srv.Close()
	r := searchRegistry(WebSearchOptions{APIKey: "k", APIBase: srv.URL})
	res := r.Execute(context.Background(), "web_search", `{"query":"nothing","count":7}`)
	if count != "7" {
		t.Errorf("count sent = %q", count)
	}
	if res.ForLLM != `No results for "nothing" (search API). Try other words.` {
		t.Errorf("empty result: %q", res.ForLLM)
	}
}

// TestWebSearchKeyStaysHome: a redirect to another host takes the search
// key with it only to the same host. net/http drops Authorization on such
// a redirect but not X-Subscription-Token, which went to the host the
// answer named.
func TestWebSearchKeyStaysHome(t *testing.T) {
	var got sync.Map // host -> key received
	results := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Host, r.Header.Get("X-Subscription-Token"))
		w.Write([]byte(`{"web":{"results":[]}}`))
	}))
	defer results.Close()
	// 127.0.0.1 and localhost are two hosts to net/http, as two domains.
	elsewhere := strings.Replace(results.URL, "127.0.0.1", "localhost", 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hop") == "" {
			http.Redirect(w, r, r.URL.Path+"?hop=1&"+r.URL.RawQuery, http.StatusFound) // same host: the key goes
			return
		}
		got.Store("api-hop", r.Header.Get("X-Subscription-Token"))
		http.Redirect(w, r, elsewhere+r.URL.Path, http.StatusFound)
	}))
	defer api.Close()
	r := searchRegistry(WebSearchOptions{APIKey: "bsk-secret-key", APIBase: api.URL})
	r.Execute(context.Background(), "web_search", `{"query":"x"}`)
	if k, _ := got.Load("api-hop"); k != "bsk-secret-key" {
		t.Errorf("a redirect on the same host carried key %q", k)
	}
	host := strings.TrimPrefix(elsewhere, "http://")
	if k, ok := got.Load(host); !ok || k != "" {
		t.Errorf("the other host (reached: %v) got the key %q", ok, k)
	}
}

func TestWebSearchKeyedErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   []string
	}{
		{"key rejected", 401, `{"type":"ErrorResponse","error":{"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"The provided subscription token is invalid.","status":401}}`,
			[]string{"rejected the key (HTTP 401: The provided subscription token is invalid.)", "tools.web.search.api_key"}},
		{"forbidden", 403, `{}`, []string{"rejected the key (HTTP 403)"}},
		{"rate limited", 429, `{"error":{"detail":"Request rate limit exceeded for plan."}}`, []string{"rate limit was reached (HTTP 429: Request rate limit exceeded for plan.)", "wait"}},
		{"server error", 502, `<html>bad gateway</html>`, []string{"answered HTTP 502"}},
		{"not JSON", 200, `<html>hello</html>`, []string{"not the expected JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := braveFake(t, "bsk-SECRET", tt.status, tt.body)
			r := searchRegistry(WebSearchOptions{APIKey: "bsk-SECRET", APIBase: srv.URL + "/res/v1"})
			res := r.Execute(context.Background(), "web_search", `{"query":"raspberry pi i2c & spi"}`)
			wantErr(t, res, append([]string{"web_search: "}, tt.want...)...)
			if strings.Contains(res.ForLLM, "SECRET") {
				t.Errorf("the key leaked: %s", res.ForLLM)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		r := searchRegistry(WebSearchOptions{APIKey: "bsk-SECRET", APIBase: srv.URL})
		res := r.Execute(context.Background(), "web_search", `{"query":"x"}`)
		wantErr(t, res, "the search API did not answer")
		if strings.Contains(res.ForLLM, "SECRET") || strings.Contains(res.ForLLM, "q=x") {
			t.Errorf("error repeats the request: %s", res.ForLLM)
		}
	})
}

// ddgFake serves a stored DuckDuckGo HTML page to the form POST the page's
// own search box makes.
func ddgFake(t *testing.T, status int, page string) *httptest.Server {
	t.Helper()
	body, err := os.ReadFile("testdata/" + page)
	must(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/html/" {
			t.Errorf("request %s %s, want POST /html/", r.Method, r.URL.Path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
			t.Errorf("Content-Type = %q", ct)
		}
		if q := r.PostFormValue("q"); q != "raspberry pi i2c" {
			t.Errorf("q = %q", q)
		}
		if !strings.HasPrefix(r.UserAgent(), "Mozilla/5.0") {
			t.Errorf("User-Agent = %q", r.UserAgent())
		}
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestWebSearchKeyless(t *testing.T) {
	srv := ddgFake(t, http.StatusOK, "ddg_results.html")
	r := searchRegistry(WebSearchOptions{HTMLBase: srv.URL})
	res := r.Execute(context.Background(), "web_search", `{"query":"raspberry pi i2c","count":10}`)
	wantOK(t, res)
	want := `Results for "raspberry pi i2c" (DuckDuckGo):

1. Configuration - Raspberry Pi Documentation
   https://www.raspberrypi.com/documentation/computers/configuration.html#i2c
   Enable I2C with raspi-config: Interface Options > I2C. The bus appears as /dev/i2c-1 & is ready after a reboot.

2. Using I2C on the Pi: a tutorial
   https://learn.example.org/i2c?page=2&lang=en
   Wire SDA to GPIO 2 and SCL to GPIO 3, then run i2cdetect -y 1.

3. Changing the I2C bus speed
   https://direct.example.net/pi/i2c-speed
   Set dtparam=i2c_arm_baudrate=400000 in config.txt.

4. No snippet result
   http://forum.example.com/t/1234

5. Fifth
   https://example.com/five
   Five.

6. Sixth
   https://example.com/six
   Six.`
	if res.ForLLM != want {
		t.Errorf("got:\n%s\nwant:\n%s", res.ForLLM, want)
	}
	res = r.Execute(context.Background(), "web_search", `{"query":"raspberry pi i2c","count":1}`)
	if strings.Count(res.ForLLM, "\n   https://") != 1 {
		t.Errorf("count=1 gave:\n%s", res.ForLLM)
	}
}

func TestWebSearchKeylessRefusals(t *testing.T) {
	tests := []struct {
		name, page string
		status     int
		wantErr    []string
		want       string
	}{
		{"bot check", "ddg_anomaly.html", http.StatusOK, []string{"bot check", "tools.web.search.api_key"}, ""},
		{"bot check with 202", "ddg_anomaly.html", http.StatusAccepted, []string{"answered HTTP 202", "tools.web.search.api_key"}, ""},
		{"blocked", "ddg_anomaly.html", http.StatusForbidden, []string{"answered HTTP 403"}, ""},
		{"no results", "ddg_noresults.html", http.StatusOK, nil, `No results for "raspberry pi i2c" (DuckDuckGo). Try other words.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ddgFake(t, tt.status, tt.page)
			r := searchRegistry(WebSearchOptions{HTMLBase: srv.URL + "/"})
			res := r.Execute(context.Background(), "web_search", `{"query":"raspberry pi i2c"}`)
			if tt.wantErr != nil {
				wantErr(t, res, tt.wantErr...)
				return
			}
			if res.ForLLM != tt.want {
				t.Errorf("got %q", res.ForLLM)
			}
		})
	}
}

func TestWebSearchArguments(t *testing.T) {
	r := searchRegistry(WebSearchOptions{HTMLBase: "http://127.0.0.1:1"})
	for args, want := range map[string]string{
		`{"query":"  "}`:           "query is empty",
		`{"query":"x","count":0}`:  `"count" must be at least 1`,
		`{"query":"x","count":11}`: `"count" must be at most 10`,
		`{}`:                       `missing required argument "query"`,
	} {
		wantErr(t, r.Execute(context.Background(), "web_search", args), want)
	}
}

func TestDDGTarget(t *testing.T) {
	for href, want := range map[string]string{
		"//duckduckgo.com/l/?uddg=https%3A%2F%2Fa.example%2Fx%3Fy%3D1&rut=z":                 "https://a.example/x?y=1",
		"/l/?uddg=http%3A%2F%2Fb.example%2F":                                                 "http://b.example/",
		"https://duckduckgo.com/l/?uddg=https%3A%2F%2Fduckduckgo.com%2Fy.js%3Fad_domain%3Dx": "",
		"https://duckduckgo.com/y.js?ad_domain=x":                                            "",
		"https://c.example/page":                                                             "https://c.example/page",
		"https://notduckduckgo.com/l/?uddg=x":                                                "https://notduckduckgo.com/l/?uddg=x",
		"javascript:alert(1)":                                                                "",
		"/relative":                                                                          "",
		"%zz":                                                                                "",
	} {
		if got := ddgTarget(href); got != want {
			t.Errorf("ddgTarget(%q) = %q, want %q", href, got, want)
		}
	}
}

func TestInlineText(t *testing.T) {
	if got := inlineText("<strong>Pi</strong>  &amp;\n<em>I2C</em> &lt;tag&gt;"); got != "Pi & I2C <tag>" {
		t.Errorf("inlineText = %q", got)
	}
}

// A name that did not resolve is said without the resolver's address,
// which Go's message names: the answer may reach a stranger.
func TestSearchErrorHidesTheResolver(t *testing.T) {
	err := &url.Error{Op: "Get", URL: "https://html.duckduckgo.com/html/?q=x", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Name: "html.duckduckgo.com", Server: "192.168.1.1:53", Err: "no such host", IsNotFound: true}}}
	if !strings.Contains(err.Error(), "192.168.1.1") {
		t.Fatalf("the example no longer names the resolver: %v", err)
	}
	got := redactURLError(err).Error()
	if strings.Contains(got, "192.168.1.1") || strings.Contains(got, "q=x") || !strings.Contains(got, "html.duckduckgo.com could not be resolved (no such host)") {
		t.Errorf("redacted: %s", got)
	}
}
