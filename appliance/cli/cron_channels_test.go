package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCronAddRefusesChannelThatDoesNotDeliver: without a gateway, perch
// cron add applies the gateway's rule from the config: a job may deliver
// only to a channel the gateway will run (the page, enabled platforms), so
// "cron list" never reports a delivery to nowhere.
func TestCronAddRefusesChannelThatDoesNotDeliver(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	cfg := filepath.Join(home, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"channels":{"telegram":{"enabled":true,"token":"123:abc"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "cron", "add", "--message", "x", "--at", "60", "--deliver", "--channel", "bogus", "--to", "1")
	if code != 1 || !strings.Contains(stderr, `no channel "bogus" is enabled`) || !strings.Contains(stderr, "channels that deliver: telegram, web") {
		t.Errorf("bogus channel: exit %d, %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "cron", "add", "--message", "x", "--at", "60", "--deliver", "--channel", "slack", "--to", "C1")
	if code != 1 || !strings.Contains(stderr, `no channel "slack" is enabled`) {
		t.Errorf("disabled channel: exit %d, %q", code, stderr)
	}
	out, stderr, code := runCLI(t, "cron", "list")
	if code != 0 || !strings.Contains(out, "No scheduled jobs.") {
		t.Errorf("refused jobs were stored: %q %q", out, stderr)
	}
	for _, ch := range []string{"telegram", "web"} {
		if _, stderr, code := runCLI(t, "cron", "add", "--message", "x", "--at", "60", "--deliver", "--channel", ch, "--to", "home"); code != 0 {
			t.Errorf("%s refused: %q", ch, stderr)
		}
	}
}
