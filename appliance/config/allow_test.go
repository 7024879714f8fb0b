package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddAllowFromWritesOnlyTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(`{"channels":{"line":{"allow_from":["U0123456789abcdef0123456789abcdef"]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A secret given in the environment must not land in the file.
	t.Setenv("PERCH_CHANNELS_LINE_CHANNEL_SECRET", "env-secret-value")
	id := "Ufedcba9876543210fedcba9876543210"
	for i := 0; i < 2; i++ { // twice: listed once
		if err := AddAllowFrom(path, "line", id); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "env-secret-value") {
		t.Fatal("an environment override was written into the file")
	}
	cfg, err := Load(Options{Path: path, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Channels.LINE.AllowFrom, ","); got != "U0123456789abcdef0123456789abcdef,"+id {
		t.Errorf("allow_from = %s", got)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if err := AddAllowFrom(filepath.Join(t.TempDir(), "absent.json"), "telegram", "1"); err == nil || !strings.Contains(err.Error(), "perch onboard") {
		t.Errorf("absent file: %v", err)
	}
	if err := AddAllowFrom(path, "irc", "1"); err == nil {
		t.Error("an unknown channel was accepted")
	}
}

func TestChannelDefaultsAndMediaCap(t *testing.T) {
	d := Default()
	if d.Channels.Discord.APIBase != "https://discord.com/api/v10" {
		t.Errorf("discord api_base default %q", d.Channels.Discord.APIBase)
	}
	for _, sec := range d.Channels.Sections() {
		if sec.MaxMediaMB != 20 {
			t.Errorf("channels.%s.max_media_mb default %d, want 20", sec.Name, sec.MaxMediaMB)
		}
	}
	d.Channels.Slack.MaxMediaMB = 0
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "channels.slack.max_media_mb") {
		t.Errorf("max_media_mb 0: %v", err)
	}
}
