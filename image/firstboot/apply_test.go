package firstboot

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/perchhq/perch/appliance/config"
)

// testSystem is the real HostSystem (useradd, ssh-keygen inside the test
// root) except for the kernel's host name, which belongs to the machine
// running the test; the QEMU boot test covers sethostname on a real board.
type testSystem struct {
	HostSystem
	hostnames []string
}

func (s *testSystem) SetHostname(name string) error {
	s.hostnames = append(s.hostnames, name)
	return nil
}

// perchUID owns /etc/perch in the test root, as the perch user does on a
// board; the config must end up owned by it.
const perchUID = 4242

// newRoot builds a small Debian-like system tree and its boot partition.
func newRoot(t *testing.T) (root string, sys *testSystem) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: first boot creates accounts and gives files to them")
	}
	for _, tool := range []string{"useradd", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (packages passwd, openssh-client): %v", tool, err)
		}
	}
	root = t.TempDir()
	files := map[string]string{
		"etc/passwd":                        "root:x:0:0:root:/root:/bin/bash\nperch:x:4242:4242::/var/lib/perch:/usr/sbin/nologin\n",
		"etc/group":                         "root:x:0:\nadm:x:4:\ndialout:x:20:\nsudo:x:27:\nusers:x:100:\nplugdev:x:46:\ni2c:x:997:perch\nspi:x:996:perch\ngpio:x:995:perch\nperch:x:4242:\n",
		"etc/shadow":                        "root:*:20000:0:99999:7:::\nperch:!*:20000::::::\n",
		"etc/gshadow":                       "root:*::\nadm:*::\ndialout:*::\nsudo:*::\nusers:*::\nplugdev:*::\ni2c:!::perch\nspi:!::perch\ngpio:!::perch\nperch:!::\n",
		"etc/hosts":                         "127.0.0.1\tlocalhost\n127.0.1.1\tperch\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname":                      "perch\n",
		strings.TrimPrefix(SSHOffFlag, "/"): "",
	}
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"root", "home", "boot/firmware", "usr/share/zoneinfo/Europe"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	etcPerch := filepath.Join(root, "etc/perch")
	if err := os.Mkdir(etcPerch, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(etcPerch, perchUID, perchUID); err != nil {
		t.Fatal(err)
	}
	zone, err := os.ReadFile("/usr/share/zoneinfo/Europe/Berlin")
	if err != nil {
		t.Fatalf("the host's tzdata is needed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/share/zoneinfo/Europe/Berlin"), zone, 0o644); err != nil {
		t.Fatal(err)
	}
	return root, &testSystem{}
}

func putSeed(t *testing.T, root, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, "boot/firmware", name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runFirstboot(t *testing.T, root string, sys System) (*Report, error) {
	t.Helper()
	return Run(context.Background(), Options{Root: root, System: sys, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func loadConfig(t *testing.T, root string) *config.Config {
	t.Helper()
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Load(config.Options{Path: filepath.Join(root, DefaultConfig), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRunAppliesSeedsAndRemovesThem: perch-setup.json and Imager's files
// together reach the system's own files and Perch's config, and leave the
// boot partition.
func TestRunAppliesSeedsAndRemovesThem(t *testing.T) {
	root, sys := newRoot(t)
	putSeed(t, root, SetupFileName, fixture(t, "perch-setup.json"))
	for _, n := range []string{UserDataName, NetworkConfigName, MetaDataName} {
		putSeed(t, root, n, fixture(t, "imager-2.0/"+n))
	}
	rep, err := runFirstboot(t, root, sys)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.FirstBoot || rep.TokenGenerated {
		t.Errorf("FirstBoot %v, TokenGenerated %v; want true, false (the file gave a token)", rep.FirstBoot, rep.TokenGenerated)
	}

	// Perch's config: 0600, the perch user's, with the secrets.
	cfgPath := filepath.Join(root, DefaultConfig)
	fi, err := os.Stat(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != perchUID {
		t.Errorf("config mode %v uid %d; want 0600 owned by %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid, perchUID)
	}
	cfg := loadConfig(t, root)
	d := cfg.Agents.Defaults
	if d.Provider != "openrouter" || d.Model != "anthropic/claude-sonnet-4" || cfg.Providers.OpenRouter.APIKey.Value() != "sk-or-v1-0123456789abcdef" {
		t.Errorf("provider %q model %q key set %v", d.Provider, d.Model, cfg.Providers.OpenRouter.APIKey.IsSet())
	}
	if cfg.Gateway.APIToken.Value() != "7d3f0c1e9a2b4c6d8e0f1a2b3c4d5e6f" || cfg.Gateway.Host != "0.0.0.0" {
		t.Errorf("gateway %q token from the file: %v", cfg.Gateway.Host, cfg.Gateway.APIToken.Value() == "7d3f0c1e9a2b4c6d8e0f1a2b3c4d5e6f")
	}
	tg, sl := cfg.Channels.Telegram, cfg.Channels.Slack
	if !tg.Enabled || !tg.Token.IsSet() || len(tg.AllowFrom) != 1 || !sl.Enabled || !sl.AppToken.IsSet() || cfg.Channels.Discord.Enabled {
		t.Errorf("channels: telegram %v/%v/%v slack %v/%v discord %v", tg.Enabled, tg.Token.IsSet(), tg.AllowFrom, sl.Enabled, sl.AppToken.IsSet(), cfg.Channels.Discord.Enabled)
	}

	// The system: perch-setup.json's host name wins over user-data's.
	if got := readFile(t, filepath.Join(root, "etc/hostname")); got != "perch-kitchen\n" {
		t.Errorf("hostname file %q", got)
	}
	if hosts := readFile(t, filepath.Join(root, "etc/hosts")); !strings.Contains(hosts, "127.0.1.1\tperch-kitchen\n") || strings.Count(hosts, "127.0.1.1") != 1 || !strings.HasPrefix(hosts, "127.0.0.1\tlocalhost") {
		t.Errorf("hosts:\n%s", hosts)
	}
	if len(sys.hostnames) != 1 || sys.hostnames[0] != "perch-kitchen" {
		t.Errorf("sethostname calls %v", sys.hostnames)
	}
	if lt, _ := os.Readlink(filepath.Join(root, "etc/localtime")); lt != "/usr/share/zoneinfo/Europe/Berlin" {
		t.Errorf("localtime -> %q", lt)
	}
	if ntp := readFile(t, filepath.Join(root, ntpConf)); !strings.Contains(ntp, "\nNTP=192.168.1.1\n") {
		t.Errorf("timesyncd drop-in:\n%s", ntp)
	}

	// Wi-Fi: both networks, names in hex, passphrase and derived key.
	wpa := readFile(t, filepath.Join(root, wpaConf))
	for _, want := range []string{
		"country=DE\n",
		"ssid=" + hex.EncodeToString([]byte("Home Network")) + "\n",
		"psk=\"correct horse battery\"\n\tpriority=2",
		"ssid=" + hex.EncodeToString([]byte(`Cafe "Zur Post"`)) + "\n\tscan_ssid=1\n\tkey_mgmt=WPA-PSK\n\tpsk=1572cfd83e170938e34a74a222bb9c08143a12556546f3643ffbe05bf82e68c9\n",
	} {
		if !strings.Contains(wpa, want) {
			t.Errorf("wpa_supplicant config lacks %q:\n%s", want, wpa)
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, wpaConf)); fi.Mode().Perm() != 0o600 {
		t.Errorf("wpa_supplicant config mode %v; want 0600", fi.Mode().Perm())
	}

	// SSH: keys for root (each once), Imager's account with its keys and
	// no password, host keys made, the off switch gone.
	k1, k2 := fixtureKey(t, "imager-2.0/user-data", 1), fixtureKey(t, "imager-2.0/user-data", 2)
	if ak := readFile(t, filepath.Join(root, "root/.ssh/authorized_keys")); ak != k1+"\n"+k2+"\n" {
		t.Errorf("root's authorized_keys:\n%s", ak)
	}
	passwd, shadow, group := readFile(t, filepath.Join(root, "etc/passwd")), readFile(t, filepath.Join(root, "etc/shadow")), readFile(t, filepath.Join(root, "etc/group"))
	m := regexp.MustCompile(`(?m)^alice:x:(\d+):`).FindStringSubmatch(passwd)
	if m == nil {
		t.Fatalf("alice not created:\n%s", passwd)
	}
	if !regexp.MustCompile(`(?m)^alice:!:`).MatchString(shadow) {
		t.Errorf("alice's password is not locked:\n%s", shadow)
	}
	for _, g := range []string{"dialout", "plugdev", "i2c", "gpio", "users", "adm"} {
		if !regexp.MustCompile(`(?m)^` + g + `:x:\d+:.*\balice\b`).MatchString(group) {
			t.Errorf("alice is not in %s:\n%s", g, group)
		}
	}
	if regexp.MustCompile(`(?m)^sudo:.*alice`).MatchString(group) {
		t.Error("alice is in sudo; it grants nothing here and should not be given")
	}
	akPath := filepath.Join(root, "home/alice/.ssh/authorized_keys")
	if ak := readFile(t, akPath); ak != k1+"\n"+k2+"\n" {
		t.Errorf("alice's authorized_keys:\n%s", ak)
	}
	if fi, _ := os.Stat(akPath); fi.Sys().(*syscall.Stat_t).Uid == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("alice's authorized_keys is owned by root or not 0600")
	}
	if _, err := os.Stat(filepath.Join(root, SSHOffFlag)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: SSH stays off", SSHOffFlag)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/ssh/ssh_host_ed25519_key")); err != nil {
		t.Errorf("no host key made: %v", err)
	}

	// The boot partition no longer holds the files.
	left, _ := os.ReadDir(filepath.Join(root, "boot/firmware"))
	if len(left) != 0 {
		t.Errorf("left on the boot partition: %v", left)
	}
}

// TestSecondBootChangesNothing: with the seeds gone, a second run keeps the
// config, the token and the host keys exactly as they were.
func TestSecondBootChangesNothing(t *testing.T) {
	root, sys := newRoot(t)
	putSeed(t, root, SetupFileName, []byte(`{"ssh_authorized_keys": ["`+fixtureKey(t, "imager-2.0/user-data", 1)+`"]}`))
	if _, err := runFirstboot(t, root, sys); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, p := range []string{DefaultConfig, "etc/ssh/ssh_host_ed25519_key", "etc/hostname", "root/.ssh/authorized_keys", StateDir + "/state.json"} {
			fi, err := os.Stat(filepath.Join(root, p))
			if err != nil {
				t.Fatal(err)
			}
			out[p] = readFile(t, filepath.Join(root, p)) + fi.ModTime().String()
		}
		return out
	}
	before := snapshot()
	rep, err := runFirstboot(t, root, sys)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstBoot || len(rep.Applied) != 0 || len(rep.Found) != 0 {
		t.Errorf("second run: %+v", rep)
	}
	after := snapshot()
	for p := range before {
		if before[p] != after[p] {
			t.Errorf("%s changed on the second boot", p)
		}
	}
}

// TestFirstBootWithoutSeedsMakesItsOwnToken: no settings at all still
// gives the board a config of its own, with a token nobody else has, and
// the console is told to show it.
func TestFirstBootWithoutSeedsMakesItsOwnToken(t *testing.T) {
	root, sys := newRoot(t)
	rep, err := runFirstboot(t, root, sys)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.FirstBoot || !rep.TokenGenerated {
		t.Errorf("report %+v", rep)
	}
	cfg := loadConfig(t, root)
	tok := cfg.Gateway.APIToken.Value()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(tok) || cfg.Gateway.Host != "0.0.0.0" || cfg.Agents.Defaults.Provider != "" {
		t.Errorf("fresh config: host %q provider %q token ok %v", cfg.Gateway.Host, cfg.Agents.Defaults.Provider, tok != "")
	}
	st, err := LoadState(root)
	if err != nil || !st.TokenGenerated {
		t.Errorf("state %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(root, SSHOffFlag)); err != nil {
		t.Error("SSH was turned on without a key")
	}
	if _, err := os.Stat(filepath.Join(root, "etc/ssh/ssh_host_ed25519_key")); err == nil {
		t.Error("host keys made although SSH stays off")
	}
	// A later perch-setup.json with a token of the owner's: the console no
	// longer needs to show one.
	putSeed(t, root, SetupFileName, []byte(`{"api_token": "owner-chosen-token-12345678"}`))
	if rep, err = runFirstboot(t, root, sys); err != nil || rep.TokenGenerated {
		t.Errorf("second run: %+v, %v", rep, err)
	}
	if got := loadConfig(t, root).Gateway.APIToken.Value(); got != "owner-chosen-token-12345678" {
		t.Errorf("token %q", got)
	}
}

// TestBadSeedsAreKeptAndNothingApplied: one bad file stops all of them; the
// files stay for the owner to fix, the problem is kept for the console, and
// the board still gets a config so its page can offer setup.
func TestBadSeedsAreKeptAndNothingApplied(t *testing.T) {
	root, sys := newRoot(t)
	putSeed(t, root, SetupFileName, []byte(`{"hostname": "kitchen", "wifi": {"ssid": "Home", "passphrase": "short"}}`))
	putSeed(t, root, UserDataName, fixture(t, "imager-2.0/user-data"))
	_, err := runFirstboot(t, root, sys)
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), `"wifi.passphrase" must be 8 to 63 characters`) {
		t.Fatalf("error %v", err)
	}
	for _, n := range []string{SetupFileName, UserDataName} {
		if _, err := os.Stat(filepath.Join(root, "boot/firmware", n)); err != nil {
			t.Errorf("%s was removed although it was not applied", n)
		}
	}
	if got := readFile(t, filepath.Join(root, "etc/hostname")); got != "perch\n" || len(sys.hostnames) != 0 {
		t.Errorf("hostname changed to %q from a rejected file", got)
	}
	if strings.Contains(readFile(t, filepath.Join(root, "etc/passwd")), "alice") {
		t.Error("user-data applied although perch-setup.json was rejected")
	}
	st, _ := LoadState(root)
	if !strings.Contains(st.Problem, "wifi.passphrase") || !st.TokenGenerated {
		t.Errorf("state %+v", st)
	}
	if loadConfig(t, root).Gateway.APIToken.Value() == "" {
		t.Error("no config made on the first boot")
	}

	// Fixed: applied, removed, problem cleared.
	putSeed(t, root, SetupFileName, []byte(`{"hostname": "kitchen", "wifi": {"ssid": "Home", "passphrase": "long enough"}}`))
	if _, err := runFirstboot(t, root, sys); err != nil {
		t.Fatal(err)
	}
	if st, _ := LoadState(root); st.Problem != "" {
		t.Errorf("problem kept after the fix: %q", st.Problem)
	}
	if got := readFile(t, filepath.Join(root, "etc/hostname")); got != "kitchen\n" {
		t.Errorf("hostname %q", got)
	}
}

// TestSetupThatMakesABadConfigIsRefused: validation stays in
// appliance/config; its message names the config key.
func TestSetupThatMakesABadConfigIsRefused(t *testing.T) {
	root, sys := newRoot(t)
	putSeed(t, root, SetupFileName, []byte(`{"hostname": "kitchen", "provider": "openai", "model": "m", "api_key": "sk-secret-1", "api_base": "ftp://example.com"}`))
	_, err := runFirstboot(t, root, sys)
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "providers.openai.api_base") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), "sk-secret-1") {
		t.Errorf("error reveals the key: %v", err)
	}
	if got := readFile(t, filepath.Join(root, "etc/hostname")); got != "perch\n" {
		t.Errorf("hostname changed by a refused file: %q", got)
	}
}

// TestUnknownZoneRefused: the zone is checked against the board's tzdata.
func TestUnknownZoneRefused(t *testing.T) {
	root, sys := newRoot(t)
	putSeed(t, root, SetupFileName, []byte(`{"timezone": "Europe/Atlantis"}`))
	if _, err := runFirstboot(t, root, sys); !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), `timezone "Europe/Atlantis" is not a zone this board knows`) {
		t.Fatalf("error %v", err)
	}
}

// TestExistingConfigKeepsOtherSettings: a later perch-setup.json changes
// only what it names.
func TestExistingConfigKeepsOtherSettings(t *testing.T) {
	root, sys := newRoot(t)
	cfg := config.Fresh(filepath.Join(root, DefaultConfig))
	cfg.Agents.Defaults.MaxToolIterations = 7
	if err := cfg.Save(); err != nil {
		t.Fatal(err)
	}
	token := cfg.Gateway.APIToken.Value()
	putSeed(t, root, SetupFileName, []byte(`{"provider": "openai", "model": "gpt-4o-mini", "api_key": "sk-1"}`))
	if _, err := runFirstboot(t, root, sys); err != nil {
		t.Fatal(err)
	}
	got := loadConfig(t, root)
	if got.Agents.Defaults.MaxToolIterations != 7 || got.Gateway.APIToken.Value() != token || got.Agents.Defaults.Model != "gpt-4o-mini" {
		t.Errorf("merged config: iterations %d, token kept %v, model %q", got.Agents.Defaults.MaxToolIterations, got.Gateway.APIToken.Value() == token, got.Agents.Defaults.Model)
	}
	var st State
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(root, StateDir, "state.json"))), &st); err != nil || st.TokenGenerated {
		t.Errorf("state %+v %v: a config that existed was not the board's own making", st, err)
	}
	if bytes.Contains([]byte(readFile(t, filepath.Join(root, StateDir, "state.json"))), []byte("sk-1")) {
		t.Error("state holds a secret")
	}
}
