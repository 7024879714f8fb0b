package gateway

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newBrowserServer is newServer with a body-less POST route and a fixed
// view of the board: hostname "perch", addresses 192.168.1.20 and
// fd00::20 (besides loopback).
func newBrowserServer(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := New(opts)
	s.hosts.hostname = func() (string, error) { return "Perch", nil }
	s.hosts.addrs = func() ([]net.Addr, error) {
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)},
			&net.IPNet{IP: net.ParseIP("192.168.1.20"), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("fd00::20"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}
	ok := func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, http.StatusOK, map[string]bool{"ok": true}) }
	s.Handle(http.MethodGet, "/open", Open, ok)
	s.Handle(http.MethodGet, "/protected", Protected, ok)
	s.Handle(http.MethodPost, "/protected", Protected, ok)
	s.Handle(http.MethodPost, "/action", Protected, ok)
	s.Handle(http.MethodPost, "/webhook", SelfGuarded, ok)
	return s
}

// A browser's cross-site form or no-cors fetch can only send text/plain,
// form-urlencoded or multipart bodies without a preflight: POSTs need JSON.
func TestPostsNeedJSON(t *testing.T) {
	s := newBrowserServer(Options{Host: "127.0.0.1"})
	tests := []struct {
		name, path, ctype, body string
		status                  int
	}{
		{"json", "/protected", "application/json", `{}`, 200},
		{"json with charset", "/protected", "application/json; charset=utf-8", `{}`, 200},
		{"json in capitals", "/protected", "Application/JSON", `{}`, 200},
		{"text/plain", "/protected", "text/plain", `{"message":"x"}`, 415},
		{"text/plain with charset", "/protected", "text/plain;charset=UTF-8", `{}`, 415},
		{"form", "/protected", "application/x-www-form-urlencoded", `a=1`, 415},
		{"multipart", "/protected", "multipart/form-data; boundary=x", `--x--`, 415},
		{"json-ish prefix", "/protected", "application/jsonx", `{}`, 415},
		{"no type with a body", "/protected", "", `{}`, 415},
		{"no type, no body", "/action", "", ``, 200},
		{"text/plain without a body", "/action", "text/plain", ``, 415},
		{"webhook guards itself", "/webhook", "text/plain", `x`, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{}
			if tt.ctype != "" {
				hdr = append(hdr, "Content-Type", tt.ctype)
			}
			var body *strings.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			var resp *http.Response
			var m map[string]any
			if body == nil {
				resp, m = do(t, s, "POST", tt.path, "127.0.0.1:5000", nil, hdr...)
			} else {
				resp, m = do(t, s, "POST", tt.path, "127.0.0.1:5000", body, hdr...)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, tt.status, m)
			}
			if tt.status == 415 {
				if msg := errorOf(t, m); !strings.Contains(msg, "Content-Type: application/json") {
					t.Errorf("415 message %q does not say which Content-Type to send", msg)
				}
			}
		})
	}
}

// A page of another origin must not make this gateway act: its POSTs carry
// an Origin (and, in current browsers, Sec-Fetch-Site) that give it away.
func TestCrossOriginPostsRefused(t *testing.T) {
	s := newBrowserServer(Options{Host: "127.0.0.1"})
	tests := []struct {
		name, method, path string
		header             []string
		status             int
	}{
		{"other origin", "POST", "/protected", []string{"Origin", "http://evil.example"}, 403},
		{"other port of this host", "POST", "/protected", []string{"Origin", "http://127.0.0.1:9999"}, 403},
		{"opaque origin", "POST", "/protected", []string{"Origin", "null"}, 403},
		{"cross-site fetch", "POST", "/protected", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"same-site fetch", "POST", "/protected", []string{"Sec-Fetch-Site", "same-site"}, 403},
		{"same origin by Origin", "POST", "/protected", []string{"Origin", "http://127.0.0.1:8080"}, 200},
		{"same origin by Sec-Fetch-Site", "POST", "/protected", []string{"Sec-Fetch-Site", "same-origin", "Origin", "http://127.0.0.1:8080"}, 200},
		{"typed by the user", "POST", "/protected", []string{"Sec-Fetch-Site", "none"}, 200},
		{"non-browser client", "POST", "/protected", nil, 200},
		{"cross-origin GET reads nothing", "GET", "/protected", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 200},
		{"webhook guards itself", "POST", "/webhook", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := append([]string{"Content-Type", "application/json"}, tt.header...)
			var resp *http.Response
			var m map[string]any
			if tt.method == "POST" {
				resp, m = do(t, s, tt.method, tt.path, "127.0.0.1:5000", strings.NewReader(`{}`), hdr...)
			} else {
				resp, m = do(t, s, tt.method, tt.path, "127.0.0.1:5000", nil, hdr...)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, tt.status, m)
			}
			if tt.status == 403 {
				if msg := errorOf(t, m); !strings.Contains(msg, "cross-origin") {
					t.Errorf("403 message %q does not say the request is cross-origin", msg)
				}
			}
		})
	}
}

// DNS rebinding makes a browser send requests of an attacker's page, named
// by the attacker's host name, to this board: only Host values that name
// the board are answered.
func TestHostMustNameTheBoard(t *testing.T) {
	tests := []struct {
		name    string
		gwHost  string
		allowed []string
		host    string
		status  int
	}{
		{"loopback address", "127.0.0.1", nil, "127.0.0.1:8080", 200},
		{"other loopback address", "127.0.0.1", nil, "127.0.0.53", 200},
		{"localhost", "127.0.0.1", nil, "localhost:8080", 200},
		{"localhost in capitals", "127.0.0.1", nil, "LOCALHOST", 200},
		{"localhost with a final dot", "127.0.0.1", nil, "localhost.:8080", 200},
		{"a .localhost name", "127.0.0.1", nil, "perch.localhost:8080", 200},
		{"ipv6 loopback", "127.0.0.1", nil, "[::1]:8080", 200},
		{"unspecified address", "0.0.0.0", nil, "0.0.0.0:8080", 200},
		{"no Host (HTTP/1.0)", "127.0.0.1", nil, "", 200},
		{"the board's hostname", "0.0.0.0", nil, "perch:8080", 200},
		{"the board's mDNS name", "0.0.0.0", nil, "perch.local:8080", 200},
		{"the board's mDNS name, final dot", "0.0.0.0", nil, "PERCH.LOCAL.", 200},
		{"the board's LAN address", "0.0.0.0", nil, "192.168.1.20:8080", 200},
		{"the board's ipv6 address", "0.0.0.0", nil, "[fd00::20]:8080", 200},
		{"the configured host name", "perch.example.net", nil, "perch.example.net", 200},
		{"an allowed name", "0.0.0.0", []string{"Perch.Example.NET"}, "perch.example.net:443", 200},
		{"an allowed address", "0.0.0.0", []string{"203.0.113.7"}, "203.0.113.7:8080", 200},
		{"a foreign name", "0.0.0.0", nil, "evil.example:8080", 403},
		{"a foreign name on a loopback gateway", "127.0.0.1", nil, "evil.example", 403},
		{"a name that starts like the hostname", "0.0.0.0", nil, "perch.evil.example", 403},
		{"a foreign .local name", "0.0.0.0", nil, "other.local", 403},
		{"an address that is not the board's", "0.0.0.0", nil, "192.168.1.99:8080", 403},
		{"an allowed name does not allow others", "0.0.0.0", []string{"perch.example.net"}, "evil.example", 403},
		{"garbage", "0.0.0.0", nil, "a b", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newBrowserServer(Options{Host: tt.gwHost, AllowedHosts: tt.allowed})
			for _, path := range []string{"/open", "/protected"} {
				resp, m := do(t, s, "GET", path, "127.0.0.1:5000", nil, "Host", tt.host)
				if resp.StatusCode != tt.status {
					t.Fatalf("GET %s with Host %q: status %d, want %d (%v)", path, tt.host, resp.StatusCode, tt.status, m)
				}
				if tt.status == 403 {
					msg := errorOf(t, m)
					if !strings.Contains(msg, "gateway.allowed_hosts") {
						t.Errorf("403 message %q does not name gateway.allowed_hosts", msg)
					}
				}
			}
		})
	}
	t.Run("the message names the refused host", func(t *testing.T) {
		s := newBrowserServer(Options{Host: "0.0.0.0"})
		_, m := do(t, s, "GET", "/open", "127.0.0.1:5000", nil, "Host", "evil.example:8080")
		if msg := errorOf(t, m); !strings.Contains(msg, `"evil.example"`) {
			t.Errorf("message %q does not name evil.example", msg)
		}
	})
	t.Run("the webhook guards itself", func(t *testing.T) {
		// Called by the platform through a tunnel or proxy under a public
		// name; its HMAC signature is the guard.
		s := newBrowserServer(Options{Host: "0.0.0.0"})
		resp, m := do(t, s, "POST", "/webhook", "192.0.2.1:5000", strings.NewReader(`{}`), "Host", "perch-tunnel.example.com", "Content-Type", "application/json")
		if resp.StatusCode != 200 {
			t.Errorf("webhook under a public name: %d %v", resp.StatusCode, m)
		}
	})
	t.Run("X-Forwarded-Host is not trusted", func(t *testing.T) {
		s := newBrowserServer(Options{Host: "0.0.0.0"})
		resp, _ := do(t, s, "GET", "/open", "127.0.0.1:5000", nil, "Host", "evil.example", "X-Forwarded-Host", "localhost")
		if resp.StatusCode != 403 {
			t.Errorf("status %d, want 403", resp.StatusCode)
		}
	})
}

// The board's addresses change (DHCP, a new interface): a Host naming a new
// address is answered once the policy has looked again, and a stream of
// foreign names costs at most one look per refresh interval.
func TestHostPolicyFollowsAddressChanges(t *testing.T) {
	s := newBrowserServer(Options{Host: "0.0.0.0"})
	now := time.Unix(1_000_000, 0)
	s.hosts.now = func() time.Time { return now }
	var looks atomic.Int32
	current := "192.168.1.20"
	s.hosts.addrs = func() ([]net.Addr, error) {
		looks.Add(1)
		return []net.Addr{&net.IPNet{IP: net.ParseIP(current), Mask: net.CIDRMask(24, 32)}}, nil
	}
	status := func(host string) int {
		resp, _ := do(t, s, "GET", "/open", "127.0.0.1:5000", nil, "Host", host)
		return resp.StatusCode
	}
	if got := status("192.168.1.20"); got != 200 {
		t.Fatalf("first address: %d", got)
	}
	current = "10.0.0.5" // the lease changed
	if got := status("10.0.0.5"); got != 403 {
		t.Fatalf("a new address within the refresh interval: %d, want 403 (the addresses were just read)", got)
	}
	now = now.Add(hostRefresh + time.Millisecond)
	if got := status("10.0.0.5"); got != 200 {
		t.Fatalf("new address after the refresh interval: %d, want 200", got)
	}
	before := looks.Load()
	for range 1000 {
		if status("evil.example") != 403 {
			t.Fatal("foreign name answered")
		}
	}
	if n := looks.Load() - before; n > 1 {
		t.Errorf("1000 foreign names in one interval looked up the addresses %d times, want at most 1", n)
	}
	for range 1000 {
		if status("10.0.0.5") != 200 {
			t.Fatal("known address refused")
		}
	}
	if n := looks.Load() - before; n > 1 {
		t.Errorf("known names looked up the addresses again (%d looks)", n)
	}
}

// The browser rules cost microseconds on the hot path.
func BenchmarkBrowserRules(b *testing.B) {
	s := newBrowserServer(Options{Host: "0.0.0.0", AllowedHosts: []string{"perch.example.net"}})
	for _, host := range []string{"127.0.0.1:8080", "perch.local:8080", "192.168.1.20:8080"} {
		b.Run(host, func(b *testing.B) {
			r, _ := http.NewRequest("POST", "http://"+host+"/chat", nil)
			r.Host = host
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Origin", "http://"+host)
			r.ContentLength = 10
			if !s.hosts.allowed(r.Host) {
				b.Fatal("refused")
			}
			for b.Loop() {
				if status, _ := s.browserRules(r); status != 0 {
					b.Fatal("refused")
				}
			}
		})
	}
}
