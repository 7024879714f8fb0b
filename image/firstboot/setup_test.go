package firstboot

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestParseSetupEveryKey reads the documented example with every key.
func TestParseSetupEveryKey(t *testing.T) {
	s, err := ParseSetup(fixture(t, "perch-setup.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Hostname != "perch-kitchen" || s.Timezone != "Europe/Berlin" || len(s.NTPServers) != 1 {
		t.Errorf("system keys: %+v", s)
	}
	if s.WiFi == nil || s.WiFi.SSID != "Home Network" || s.WiFi.Passphrase.Value() != "correct horse battery" || s.WiFi.Country != "DE" {
		t.Errorf("wifi: %+v", s.WiFi)
	}
	if s.Provider != "openrouter" || s.Model != "anthropic/claude-sonnet-4" || !s.APIKey.IsSet() || !s.APIToken.IsSet() {
		t.Errorf("provider: %+v", s)
	}
	if s.Channels == nil || s.Channels.Telegram == nil || s.Channels.Slack == nil || len(s.SSHAuthorizedKeys) != 1 {
		t.Errorf("channels and keys: %+v", s)
	}
	// The parsed file prints no secret, whatever the verb.
	for _, out := range []string{fmt.Sprintf("%v", s), fmt.Sprintf("%+v", *s), fmt.Sprintf("%+v", *s.WiFi), fmt.Sprintf("%+v", *s.Channels.Telegram)} {
		for _, secret := range []string{"correct horse", "sk-or-v1", "7d3f0c1e", "ABC-DEF1234", "xoxb-1"} {
			if strings.Contains(out, secret) {
				t.Errorf("a secret (%s…) is printed: %s", secret, out)
			}
		}
	}
}

func TestParseSetupErrorsNameTheKey(t *testing.T) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHiIyFBJJIUsfpOIqrKXHlqg6uRt2lvMhrp1mWd7Ldxt a@b"
	tests := []struct{ name, in, want string }{
		{"empty", "  ", "is empty"},
		{"not an object", `["x"]`, "must hold one JSON object"},
		{"syntax", "{\n \"hostname\": \"x\",\n}", "invalid JSON at line 3"},
		{"trailing", `{} {}`, "unexpected text after the JSON object"},
		{"unknown key with hint", `{"hostnme": "x"}`, `unknown key "hostnme" (did you mean "hostname"?)`},
		{"unknown nested key", `{"wifi": {"ssid": "a", "pasphrase": "12345678"}}`, `unknown key "wifi.pasphrase" (did you mean "wifi.passphrase"?)`},
		{"unknown channel", `{"channels": {"matrix": {}}}`, `unknown key "channels.matrix" (known keys here: discord, line, slack, telegram)`},
		{"wrong type", `{"ssh_authorized_keys": "` + key + `"}`, `key "ssh_authorized_keys" must be a list`},
		{"hostname", `{"hostname": "my pi"}`, `"hostname" "my pi" may hold only letters`},
		{"timezone", `{"timezone": "../../etc/passwd"}`, `"timezone" "../../etc/passwd" is not a time zone name`},
		{"ntp", `{"ntp_servers": ["not a host"]}`, `"ntp_servers[0]"`},
		{"ssid", `{"wifi": {"ssid": ""}}`, `"wifi.ssid" must be 1 to 32 bytes`},
		{"passphrase", `{"wifi": {"ssid": "a", "passphrase": "short"}}`, `"wifi.passphrase" must be 8 to 63 characters`},
		{"country", `{"wifi": {"ssid": "a", "country": "Germany"}}`, `"wifi.country" "Germany" is not a two-letter`},
		{"private key", `{"ssh_authorized_keys": ["-----BEGIN OPENSSH PRIVATE KEY-----"]}`, `"ssh_authorized_keys[0]" is a private key`},
		{"key type", `{"ssh_authorized_keys": ["from=\"x\" ` + key + `"]}`, `"ssh_authorized_keys[0]" starts with`},
		{"key blob mismatch", `{"ssh_authorized_keys": ["ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIHiIyFBJJIUsfpOIqrKXHlqg6uRt2lvMhrp1mWd7Ldxt"]}`, "is not a ssh-rsa key"},
		{"provider unknown", `{"provider": "openia", "model": "m", "api_key": "k"}`, `"provider" is "openia"; use one of openai`},
		{"provider missing", `{"model": "m"}`, `"provider" is missing`},
		{"model missing", `{"provider": "openai", "api_key": "k"}`, `"model" is missing`},
		{"key missing", `{"provider": "openai", "model": "m"}`, `"api_key" is missing: the API key of your openai account`},
		{"weak token", `{"api_token": "abc"}`, `"api_token" must be at least 24 characters`},
		{"telegram token", `{"channels": {"telegram": {}}}`, `"channels.telegram.token" is missing`},
		{"slack half", `{"channels": {"slack": {"bot_token": "xoxb-1"}}}`, `"channels.slack" needs both`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSetup([]byte(tt.in))
			if err == nil || !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v\nwant ErrSetup containing %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "sk-") {
				t.Errorf("error reveals a secret: %v", err)
			}
		})
	}
}

// TestParseSetupOllamaNeedsNoKey: a keyless local provider is allowed, as
// on the web page.
func TestParseSetupOllamaNeedsNoKey(t *testing.T) {
	if _, err := ParseSetup([]byte(`{"provider": "ollama", "model": "llama3.2", "api_base": "http://192.168.1.5:11434/v1"}`)); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseSetup: any input parses or fails with ErrSetup.
func FuzzParseSetup(f *testing.F) {
	f.Add([]byte(`{"hostname":"a","wifi":{"ssid":"x","passphrase":"12345678"}}`))
	f.Add([]byte(`{"channels":{"slack":{"bot_token":"a","app_token":"b"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSetup(data)
		if err != nil && !errors.Is(err, ErrSetup) {
			t.Fatalf("error without ErrSetup: %v", err)
		}
		if err == nil && s == nil {
			t.Fatal("nil result without an error")
		}
	})
}

// TestShippedExampleParses: the example on every card's boot partition (and
// in IMAGE.md) is a valid file once renamed.
func TestShippedExampleParses(t *testing.T) {
	data, err := os.ReadFile("../perch-setup.example.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseSetup(data); err != nil {
		t.Fatal(err)
	}
}
