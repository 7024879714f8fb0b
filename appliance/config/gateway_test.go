package config

import (
	"strings"
	"testing"
)

// gateway.allowed_hosts takes host names and addresses only: a URL or a
// port there would never match a Host header, silently.
func TestAllowedHosts(t *testing.T) {
	good := `{"gateway":{"allowed_hosts":["perch.example.net","Perch.LAN","192.168.1.20","fd00::20","[fd00::21]","perch-tunnel_1.trycloudflare.com"]}}`
	cfg, err := Load(Options{Path: writeConfig(t, good), Env: noEnv})
	if err != nil {
		t.Fatalf("valid allowed_hosts refused: %v", err)
	}
	if len(cfg.Gateway.AllowedHosts) != 6 {
		t.Errorf("allowed_hosts = %v", cfg.Gateway.AllowedHosts)
	}
	def, err := Load(Options{Path: writeConfig(t, `{}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if def.Gateway.AllowedHosts == nil || len(def.Gateway.AllowedHosts) != 0 {
		t.Errorf("default allowed_hosts = %#v, want []", def.Gateway.AllowedHosts)
	}
	env, err := Load(Options{Path: writeConfig(t, `{}`), Env: envMap(map[string]string{"PERCH_GATEWAY_ALLOWED_HOSTS": "a.example,b.example"})})
	if err != nil || len(env.Gateway.AllowedHosts) != 2 || env.Gateway.AllowedHosts[1] != "b.example" {
		t.Errorf("PERCH_GATEWAY_ALLOWED_HOSTS: %v %v", env.Gateway.AllowedHosts, err)
	}
	for _, bad := range []string{"http://perch.example.net", "perch.example.net:8080", "perch.example.net/", "", " ", "a b", "*.example.net"} {
		t.Run(bad, func(t *testing.T) {
			body := `{"gateway":{"allowed_hosts":["ok.example",` + quote(bad) + `]}}`
			_, err := Load(Options{Path: writeConfig(t, body), Env: noEnv})
			if err == nil {
				t.Fatalf("allowed_hosts entry %q accepted", bad)
			}
			for _, w := range []string{"gateway.allowed_hosts[1]", "perch.example.net"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// A gateway that listens beyond loopback needs a token long enough that
// guessing it is hopeless; loopback-only gateways and tokenless ones (which
// answer loopback clients only) take any.
func TestAPITokenLengthBeyondLoopback(t *testing.T) {
	long := strings.Repeat("a1", MinTokenLength/2)
	tests := []struct {
		name, host, token string
		ok                bool
	}{
		{"LAN, short", "0.0.0.0", "hunter2", false},
		{"LAN, one short of the minimum", "0.0.0.0", long[:MinTokenLength-1], false},
		{"LAN, minimum", "0.0.0.0", long, true},
		{"LAN, onboard's token", "0.0.0.0", NewToken(), true},
		{"LAN name, short", "perch.local", "hunter2", false},
		{"ipv6 wildcard, short", "::", "hunter2", false},
		{"LAN, no token", "0.0.0.0", "", true},
		{"loopback, short", "127.0.0.1", "t", true},
		{"localhost, short", "localhost", "t", true},
		{"ipv6 loopback, short", "::1", "t", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"gateway":{"host":` + quote(tt.host) + `,"api_token":` + quote(tt.token) + `}}`
			_, err := Load(Options{Path: writeConfig(t, body), Env: noEnv})
			if tt.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("a short token beyond loopback was accepted")
			}
			for _, w := range []string{"gateway.api_token", "perch onboard --force", "openssl rand -hex 24", "gateway.host"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tt.token) {
				t.Errorf("the error shows the token: %q", err)
			}
		})
	}
	t.Run("from the environment", func(t *testing.T) {
		_, err := Load(Options{Path: writeConfig(t, `{"gateway":{"host":"0.0.0.0"}}`), Env: envMap(map[string]string{"PERCH_GATEWAY_API_TOKEN": "short"})})
		if err == nil || !strings.Contains(err.Error(), "gateway.api_token") {
			t.Errorf("a short token from PERCH_GATEWAY_API_TOKEN: %v", err)
		}
	})
}
