package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway/gatewaytest"
)

// newServer returns a server with one route of each access level that
// answers {"ok": true}.
func newServer(host string, token config.Secret) *Server {
	s := New(Options{Host: host, Port: 0, Token: token, Log: slog.New(slog.DiscardHandler)})
	ok := func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, http.StatusOK, map[string]bool{"ok": true}) }
	s.Handle(http.MethodGet, "/open", Open, ok)
	s.Handle(http.MethodGet, "/protected", Protected, ok)
	s.Handle(http.MethodPost, "/protected", Protected, func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		if !DecodeJSON(w, r, &v) {
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
	s.Handle(http.MethodPost, "/webhook", SelfGuarded, ok)
	s.HandleParams(http.MethodGet, "/items/:id", Protected, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		WriteJSON(w, http.StatusOK, map[string]string{"id": ps.ByName("id")})
	})
	return s
}

// do sends a request straight into the router.
func do(t testing.TB, h http.Handler, method, path, remote string, body io.Reader, header ...string) (*http.Response, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, body)
	req.Host = "127.0.0.1:8080" // httptest's example.com does not name this board
	if remote != "" {
		req.RemoteAddr = remote
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	var m map[string]any
	data, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json (body %s)", method, path, ct, data)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s %s: body is not a JSON object: %s", method, path, data)
	}
	return resp, m
}

// errorOf returns the "error" field, failing when the body has none.
func errorOf(t testing.TB, body map[string]any) string {
	t.Helper()
	e, ok := body["error"].(string)
	if !ok || e == "" {
		t.Fatalf("body has no error message: %v", body)
	}
	return e
}

func TestTokenAuth(t *testing.T) {
	s := newServer("0.0.0.0", "s3cret")
	tests := []struct {
		name   string
		auth   string
		status int
	}{
		{"missing", "", 401},
		{"wrong", "Bearer nope", 401},
		{"prefix of the token", "Bearer s3cre", 401},
		{"token with a suffix", "Bearer s3cretX", 401},
		{"other scheme", "Basic s3cret", 401},
		{"scheme only", "Bearer ", 401},
		{"no space", "Bearers3cret", 401},
		{"right", "Bearer s3cret", 200},
		{"lower-case scheme", "bearer s3cret", 200},
		{"upper-case scheme", "BEARER s3cret", 200},
		{"surrounding blanks", "Bearer  s3cret ", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{}
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			// A token is required from loopback clients too.
			resp, body := do(t, s, "GET", "/protected", "127.0.0.1:5000", nil, hdr...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, tt.status, body)
			}
			if tt.status == 401 {
				if msg := errorOf(t, body); !strings.Contains(msg, "gateway.api_token") {
					t.Errorf("401 message %q does not name gateway.api_token", msg)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
				if strings.Contains(fmt.Sprint(body), "s3cret") {
					t.Error("the error body reveals the token")
				}
			}
		})
	}
	t.Run("path parameters guarded too", func(t *testing.T) {
		resp, _ := do(t, s, "GET", "/items/7", "127.0.0.1:5000", nil)
		if resp.StatusCode != 401 {
			t.Errorf("status %d, want 401", resp.StatusCode)
		}
		resp, body := do(t, s, "GET", "/items/7", "127.0.0.1:5000", nil, "Authorization", "Bearer s3cret")
		if resp.StatusCode != 200 || body["id"] != "7" {
			t.Errorf("status %d %v, want 200 with id 7", resp.StatusCode, body)
		}
	})
}

// With no token on a non-loopback host, protected paths answer loopback
// clients only; open and self-guarded paths answer everyone.
func TestLoopbackOnlyWithoutToken(t *testing.T) {
	tests := []struct {
		name   string
		host   string
		token  config.Secret
		path   string
		method string
		remote string
		status int
	}{
		{"lan host, ipv4 loopback client", "0.0.0.0", "", "/protected", "GET", "127.0.0.1:41000", 200},
		{"lan host, ipv6 loopback client", "0.0.0.0", "", "/protected", "GET", "[::1]:41000", 200},
		{"lan host, other loopback address", "0.0.0.0", "", "/protected", "GET", "127.0.0.2:41000", 200},
		{"lan host, lan client", "0.0.0.0", "", "/protected", "GET", "192.168.1.5:41000", 403},
		{"lan host, lan client, path params", "0.0.0.0", "", "/items/1", "GET", "192.168.1.5:41000", 403},
		{"ipv6 wildcard host, lan client", "::", "", "/protected", "GET", "[fe80::1]:41000", 403},
		{"named host, lan client", "perch.local", "", "/protected", "GET", "10.0.0.9:41000", 403},
		{"lan host, lan client, open path", "0.0.0.0", "", "/open", "GET", "192.168.1.5:41000", 200},
		{"lan host, lan client, webhook", "0.0.0.0", "", "/webhook", "POST", "192.168.1.5:41000", 200},
		{"loopback host, any client", "127.0.0.1", "", "/protected", "GET", "192.168.1.5:41000", 200},
		{"localhost host, any client", "localhost", "", "/protected", "GET", "192.168.1.5:41000", 200},
		{"token set, lan client without it", "0.0.0.0", "t", "/protected", "GET", "192.168.1.5:41000", 401},
		{"token set, open path", "0.0.0.0", "t", "/open", "GET", "192.168.1.5:41000", 200},
		{"token set, webhook", "0.0.0.0", "t", "/webhook", "POST", "192.168.1.5:41000", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(tt.host, tt.token)
			resp, body := do(t, s, tt.method, tt.path, tt.remote, nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, tt.status, body)
			}
			if tt.status == 403 {
				if msg := errorOf(t, body); !strings.Contains(msg, "gateway.api_token") {
					t.Errorf("403 message %q does not name gateway.api_token", msg)
				}
			}
		})
	}
	t.Run("lan client with the token of a token-set server", func(t *testing.T) {
		s := newServer("0.0.0.0", "t")
		resp, _ := do(t, s, "GET", "/protected", "192.168.1.5:41000", nil, "Authorization", "Bearer t")
		if resp.StatusCode != 200 {
			t.Errorf("status %d, want 200", resp.StatusCode)
		}
	})
}

func TestUnknownPathAndMethod(t *testing.T) {
	s := newServer("127.0.0.1", "")
	resp, body := do(t, s, "GET", "/nope", "", nil)
	if resp.StatusCode != 404 || !strings.Contains(errorOf(t, body), "/nope") {
		t.Errorf("unknown path: %d %v, want 404 naming the path", resp.StatusCode, body)
	}
	resp, body = do(t, s, "DELETE", "/open", "", nil)
	if resp.StatusCode != 405 {
		t.Fatalf("wrong method: %d %v, want 405", resp.StatusCode, body)
	}
	msg := errorOf(t, body)
	if !strings.Contains(msg, "DELETE") || !strings.Contains(msg, "GET") {
		t.Errorf("405 message %q should name the method and the allowed ones", msg)
	}
	if allow := resp.Header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Errorf("Allow = %q, want GET listed", allow)
	}
}

func TestDecodeJSON(t *testing.T) {
	s := newServer("127.0.0.1", "")
	tests := []struct {
		name   string
		body   string
		status int
		substr string
	}{
		{"object", `{"a":1}`, 200, ""},
		{"malformed", `{"a":`, 400, "malformed JSON"},
		{"not JSON", `hello`, 400, "malformed JSON"},
		{"empty body", ``, 400, "the body is empty; send a JSON object"},
		{"ends early", `{"a":[1,`, 400, "malformed JSON body: it ends early (a missing } or ])"},
		{"wrong type", `[1,2]`, 400, "the body must be an object, not an array"},
		{"trailing word", `{"a":1} trailing`, 400, "something follows the JSON value"},
		{"two objects", `{"a":1}{"a":2}`, 400, "something follows the JSON value"},
		{"a stray brace", `{"a":1}}`, 400, "something follows the JSON value"},
		{"trailing white space", "{\"a\":1}\n \t\r\n", 200, ""},
		{"just under the cap", `{"a":"` + strings.Repeat("x", MaxBody-10) + `"}`, 200, ""},
		{"over the cap", `{"a":"` + strings.Repeat("x", MaxBody) + `"}`, 413, "request body is over 1048576 bytes (1 MiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, s, "POST", "/protected", "", strings.NewReader(tt.body), "Content-Type", "application/json")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%.200v)", resp.StatusCode, tt.status, body)
			}
			if tt.substr != "" && !strings.Contains(errorOf(t, body), tt.substr) {
				t.Errorf("error %q does not mention %q", body["error"], tt.substr)
			}
		})
	}
}

// TestDecodeJSONNamesTheField: a value of the wrong type is reported by its
// field's path and JSON's words, not Go's ("cannot unmarshal number into Go
// struct field ChatRequest.message of type string").
func TestDecodeJSONNamesTheField(t *testing.T) {
	type body struct {
		Message  string `json:"message"`
		Schedule struct {
			Every int64 `json:"every_seconds"`
		} `json:"schedule"`
		Tags []string `json:"tags"`
		On   bool     `json:"on"`
	}
	for _, tt := range []struct{ body, want string }{
		{`{"message":123}`, `"message" must be a string, not a number`},
		{`{"schedule":{"every_seconds":"60"}}`, `"schedule.every_seconds" must be a whole number, not a string`},
		{`{"schedule":{"every_seconds":1.5}}`, `"schedule.every_seconds" must be a whole number, not 1.5`},
		{`{"schedule":[]}`, `"schedule" must be an object, not an array`},
		{`{"tags":"a"}`, `"tags" must be an array, not a string`},
		{`{"on":"yes"}`, `"on" must be true or false, not a string`},
		{`"hello"`, `the body must be an object, not a string`},
	} {
		w := httptest.NewRecorder()
		var v body
		if DecodeJSON(w, httptest.NewRequest("POST", "/", strings.NewReader(tt.body)), &v) {
			t.Errorf("%s: accepted", tt.body)
			continue
		}
		var got map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 400 || got["error"] != tt.want {
			t.Errorf("%s: %d %s, want 400 %q", tt.body, w.Code, w.Body.Bytes(), tt.want)
		}
		if strings.Contains(w.Body.String(), "Go ") {
			t.Errorf("%s: %s names a Go type", tt.body, w.Body.Bytes())
		}
	}
}

// A handler's panic is a 500 JSON error, not a dropped connection.
func TestPanicIsJSON500(t *testing.T) {
	s := newServer("127.0.0.1", "")
	s.Handle("GET", "/boom", Open, func(http.ResponseWriter, *http.Request) { panic("boom") })
	resp, body := do(t, s, "GET", "/boom", "", nil)
	if resp.StatusCode != 500 || strings.Contains(errorOf(t, body), "boom") {
		t.Errorf("panic: %d %v, want 500 without the panic value", resp.StatusCode, body)
	}
}

func TestFormatUptime(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0h0m0s"},
		{5 * time.Second, "0h0m5s"},
		{1499 * time.Millisecond, "0h0m1s"},
		{1500 * time.Millisecond, "0h0m2s"},
		{59*time.Minute + 59*time.Second + 600*time.Millisecond, "1h0m0s"},
		{26*time.Hour + 3*time.Minute, "26h3m0s"},
		{100*time.Hour + 1*time.Second, "100h0m1s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatUptime(tt.d); got != tt.want {
				t.Errorf("FormatUptime(%v) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

// A busy port fails at Listen, naming gateway.port.
func TestListenBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	s := New(Options{Host: "127.0.0.1", Port: port, Log: slog.New(slog.DiscardHandler)})
	err = s.Listen()
	if err == nil {
		s.Stop(context.Background())
		t.Fatal("Listen on a busy port succeeded")
	}
	for _, want := range []string{"gateway:", fmt.Sprint(port), "already in use", "gateway.port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestListenBadHost(t *testing.T) {
	s := New(Options{Host: "256.1.1.1", Port: 0, Log: slog.New(slog.DiscardHandler)})
	err := s.Listen()
	if err == nil {
		s.Stop(context.Background())
		t.Fatal("Listen on an impossible address succeeded")
	}
	if !strings.Contains(err.Error(), "gateway.host") {
		t.Errorf("error %q does not name gateway.host", err)
	}
}

// Listen, Serve and Stop on a real loopback socket; Stop makes Serve return
// nil and refuses new connections.
func TestServeAndStop(t *testing.T) {
	s := newServer("127.0.0.1", "")
	if s.Addr() != "" {
		t.Errorf("Addr before Listen = %q, want empty", s.Addr())
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	resp, err := http.Get("http://" + s.Addr() + "/open")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /open over TCP: %d", resp.StatusCode)
	}
	s.SetReady(true)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.IsReady() {
		t.Error("still ready after Stop")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v after Stop, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Stop")
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Error("the port still accepts connections after Stop")
	}
}

// Stop before Serve releases the bound port.
func TestStopBeforeServeReleasesPort(t *testing.T) {
	s := newServer("127.0.0.1", "")
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port not released: %v", err)
	}
	ln.Close()
}

// Stop may come while Serve is starting (a signal during start-up): no data
// race on the server, and Serve then returns nil as after any Stop.
func TestStopWhileServeStarts(t *testing.T) {
	for range 20 {
		s := newServer("127.0.0.1", "")
		if err := s.Listen(); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve() }()
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("Serve after a concurrent Stop = %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after Stop")
		}
	}
}

// A listener that fails for good makes Serve return the error, so the
// composition root can stop the gateway instead of running without HTTP.
func TestServeReturnsListenerFailure(t *testing.T) {
	s := newServer("127.0.0.1", "")
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	gatewaytest.BreakListener(t, s.Addr())
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve returned nil after its listener failed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its listener failed")
	}
}
