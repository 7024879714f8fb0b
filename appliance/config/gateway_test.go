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
