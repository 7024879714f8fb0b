package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// pairingHome writes a config with a Telegram allow list and a pending
// pairing code for sender 99, as the bot would have left it.
func pairingHome(t *testing.T) (cfgPath, code string) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	t.Setenv("PERCH_CHANNELS_TELEGRAM_TOKEN", "")
	cfgPath = filepath.Join(home, "config.json")
	if err := os.WriteFile(cfgPath, []byte(`{"channels":{"telegram":{"allow_from":["42"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(home, "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	code, err = channel.RequestPairing(db, channel.Pairing{Channel: "telegram", SenderID: "99", Username: "bob", Name: "Bob", ChatID: "99"}, time.Now())
	if err != nil || code == "" {
		t.Fatalf("pairing: %q, %v", code, err)
	}
	return cfgPath, code
}

func allowFrom(t *testing.T, path string) []string {
	t.Helper()
	cfg, err := config.Load(config.Options{Path: path, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Channels.Telegram.AllowFrom
}

// Without a gateway, approve works on the database and the config file.
func TestChannelsApproveOffline(t *testing.T) {
	cfgPath, code := pairingHome(t)
	out, errOut, rc := runCLI(t, "channels", "pending")
	if rc != 0 || !strings.Contains(out, code) || !strings.Contains(out, "Bob (@bob, id 99)") {
		t.Fatalf("pending: %d %q %q", rc, out, errOut)
	}
	out, errOut, rc = runCLI(t, "channels", "approve", strings.ToLower(code))
	if rc != 0 || !strings.Contains(out, "channels.telegram.allow_from") {
		t.Fatalf("approve: exit %d, %q, %q", rc, out, errOut)
	}
	if got := allowFrom(t, cfgPath); strings.Join(got, ",") != "42,99" {
		t.Errorf("allow_from = %v, want [42 99]", got)
	}
	if st, err := os.Stat(cfgPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config file mode %v, %v; want 0600", st.Mode(), err)
	}
	_, errOut, rc = runCLI(t, "channels", "approve", code)
	if rc != 1 || !strings.Contains(errOut, "no such pairing code") {
		t.Errorf("a spent code: exit %d, %q", rc, errOut)
	}
	if got := allowFrom(t, cfgPath); len(got) != 2 {
		t.Errorf("a failed approval changed allow_from: %v", got)
	}
}

// With the gateway running, approve goes through its API and the running
// channel admits the sender without a restart.
func TestChannelsApproveThroughTheGateway(t *testing.T) {
	_, code := pairingHome(t)
	home := os.Getenv("PERCH_HOME")
	data, _ := os.ReadFile(filepath.Join(home, "config.json"))
	var file map[string]any
	json.Unmarshal(data, &file)
	db := filepath.Join(home, "perch.db")
	g := appliancetest.StartAt(t, home, file, nil)
	out, errOut, rc := runCLI(t, "channels", "approve", code)
	if rc != 0 || !strings.Contains(out, "They can talk to the bot now") {
		t.Fatalf("approve via the gateway: exit %d, %q, %q (db %s)", rc, out, errOut, db)
	}
	if got := allowFrom(t, g.ConfigPath); strings.Join(got, ",") != "42,99" {
		t.Errorf("allow_from = %v", got)
	}
}
