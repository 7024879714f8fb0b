package firstboot

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perchhq/perch/appliance/config"
)

// Where things live on the board, relative to Options.Root.
const (
	DefaultBoot   = "/boot/firmware"
	DefaultConfig = "/etc/perch/config.json"
	StateDir      = "/var/lib/perch-firstboot"
	// SSHOffFlag is Debian's switch that keeps ssh.service from starting;
	// the image ships it, and first boot removes it when a key is given.
	SSHOffFlag = "/etc/ssh/sshd_not_to_be_run"
	wpaConf    = "/etc/wpa_supplicant/wpa_supplicant-wlan0.conf"
	ntpConf    = "/etc/systemd/timesyncd.conf.d/50-perch.conf"
)

// Options configure Run.
type Options struct {
	// Root is the system to configure: "/" on the board, a directory in
	// tests. Every path below is inside it.
	Root string
	// Boot is the FAT boot partition holding the seed files.
	Boot string
	// Config is Perch's config file.
	Config string
	// System makes the changes that are not files. Nil means the running
	// machine (HostSystem).
	System System
	Log    *slog.Logger
	Now    func() time.Time
}

// Report says what Run did.
type Report struct {
	// FirstBoot is true on the board's first start.
	FirstBoot bool
	// Found lists the seed files read from the boot partition.
	Found []string
	// Applied describes each change, without secrets.
	Applied []string
	// Ignored lists seed settings that were not applied.
	Ignored []string
	// TokenGenerated is true when the board made its own API token.
	TokenGenerated bool
}

// State is kept across boots in StateDir/state.json (root only).
type State struct {
	FirstBoot time.Time `json:"first_boot"`
	// TokenGenerated means gateway.api_token was made on the board, so the
	// console shows it (nobody else knows it).
	TokenGenerated bool `json:"token_generated"`
	// Problem is why the seed files were not applied, for the console.
	Problem string `json:"problem,omitempty"`
}

func (o *Options) defaults() {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Boot == "" {
		o.Boot = DefaultBoot
	}
	if o.Config == "" {
		o.Config = DefaultConfig
	}
	if o.System == nil {
		o.System = HostSystem{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) path(p string) string { return filepath.Join(o.Root, p) }

// Run applies the seed files of the boot partition to the system and to
// Perch's config, then removes them from the partition (which anyone who
// pulls the card can read). On the first boot it also creates the config
// with a token of the board's own. Seeds that do not parse are left in
// place, nothing of them is applied, and the problem is kept for the
// console; the error says what to fix. Running it again with no seeds
// changes nothing.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	rep := &Report{}
	st, err := LoadState(o.Root)
	if err != nil {
		return nil, err
	}
	orig := *st
	if st.FirstBoot.IsZero() {
		rep.FirstBoot = true
		st.FirstBoot = o.Now().UTC()
	}
	seeds, seedErr := ReadSeeds(o.path(o.Boot))
	rep.Found = seeds.Found
	var plan *Plan
	if seedErr == nil {
		plan = seeds.Plan()
		seedErr = o.check(plan)
	}
	if seedErr != nil {
		st.Problem = seedErr.Error()
		plan = &Plan{} // the config still gets created on a first boot
	} else {
		st.Problem = ""
	}

	cfg, created, err := o.loadConfig()
	if err != nil {
		return rep, errors.Join(seedErr, err)
	}
	if created && (plan.Setup == nil || !plan.Setup.APIToken.IsSet()) {
		st.TokenGenerated = true
	}
	changed := created
	if plan.Setup != nil {
		if err := applySetup(cfg, plan.Setup); err != nil {
			return rep, err
		}
		changed = true
		if plan.Setup.APIToken.IsSet() {
			st.TokenGenerated = false
		}
	}
	if changed {
		if err := cfg.Validate(); err != nil {
			return rep, fmt.Errorf("%w: %s would make an invalid config: %w", ErrSetup, SetupFileName, err)
		}
	}

	if err := o.applySystem(ctx, plan, rep); err != nil {
		return rep, err
	}
	if changed {
		if err := o.saveConfig(cfg); err != nil {
			return rep, err
		}
		if created {
			rep.Applied = append(rep.Applied, "created "+o.Config+" with a new API token")
		}
		if plan.Setup != nil {
			rep.Applied = append(rep.Applied, describeSetup(plan.Setup)...)
		}
	}
	rep.TokenGenerated = st.TokenGenerated
	rep.Ignored = plan.Ignored
	if *st != orig {
		if err := SaveState(o.Root, st); err != nil {
			return rep, err
		}
	}
	if seedErr != nil {
		return rep, seedErr
	}
	if len(seeds.Found) > 0 {
		if err := o.removeSeeds(seeds.Found); err != nil {
			return rep, err
		}
		rep.Applied = append(rep.Applied, "removed "+strings.Join(seeds.Found, ", ")+" from the boot partition")
	}
	return rep, nil
}

// check validates the plan against the board: the zone must exist in its
// tzdata.
func (o *Options) check(p *Plan) error {
	if p.Timezone != "" {
		zi := o.path(filepath.Join("/usr/share/zoneinfo", p.Timezone))
		if fi, err := os.Stat(zi); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: timezone %q is not a zone this board knows; use an IANA name such as Europe/Berlin", ErrSetup, p.Timezone)
		}
	}
	return nil
}

// loadConfig reads the config file as it is on disk (no environment
// overrides: they must not be written into the file), or starts a fresh one
// when there is none.
func (o *Options) loadConfig() (*config.Config, bool, error) {
	p := o.path(o.Config)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return config.Fresh(p), true, nil
	}
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Load(config.Options{Path: p, Env: noEnv})
	if err != nil {
		return nil, false, fmt.Errorf("firstboot: the existing config cannot be updated: %w", err)
	}
	return cfg, false, nil
}

// saveConfig writes the config (0600) and gives it to the owner of its
// directory, the perch user, which reads it and rewrites it from the page.
func (o *Options) saveConfig(cfg *config.Config) error {
	dir := filepath.Dir(cfg.Path())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	if err := cfg.Save(); err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		if err := os.Chown(cfg.Path(), int(s.Uid), int(s.Gid)); err != nil {
			return fmt.Errorf("firstboot: give %s to the owner of %s: %w", cfg.Path(), dir, err)
		}
	}
	return nil
}

// applySetup moves perch-setup.json's Perch settings into the config, as
// the web page's setup form and a hand edit would.
func applySetup(cfg *config.Config, s *SetupFile) error {
	if s.Provider != "" {
		p, ok := cfg.Provider(s.Provider)
		if !ok {
			return fmt.Errorf("%w: unknown provider %q", ErrSetup, s.Provider)
		}
		cfg.Agents.Defaults.Provider = s.Provider
		cfg.Agents.Defaults.Model = strings.TrimSpace(s.Model)
		if s.APIKey.IsSet() {
			p.APIKey = s.APIKey
		}
		if s.APIBase != "" {
			p.APIBase = s.APIBase
		}
	}
	if s.APIToken.IsSet() {
		cfg.Gateway.APIToken = s.APIToken
	}
	if cfg.Gateway.Host == "127.0.0.1" || cfg.Gateway.Host == "localhost" {
		// A board is reached over the LAN.
		cfg.Gateway.Host = "0.0.0.0"
	}
	if c := s.Channels; c != nil {
		ch := &cfg.Channels
		if b := c.Telegram; b != nil {
			ch.Telegram.Enabled, ch.Telegram.Token = true, b.Token
			if b.AllowFrom != nil {
				ch.Telegram.AllowFrom = b.AllowFrom
			}
		}
		if b := c.Discord; b != nil {
			ch.Discord.Enabled, ch.Discord.Token = true, b.Token
			if b.AllowFrom != nil {
				ch.Discord.AllowFrom = b.AllowFrom
			}
		}
		if b := c.Slack; b != nil {
			ch.Slack.Enabled, ch.Slack.BotToken, ch.Slack.AppToken = true, b.BotToken, b.AppToken
			if b.AllowFrom != nil {
				ch.Slack.AllowFrom = b.AllowFrom
			}
		}
		if b := c.LINE; b != nil {
			ch.LINE.Enabled, ch.LINE.ChannelSecret, ch.LINE.ChannelAccessToken = true, b.ChannelSecret, b.ChannelAccessToken
			if b.AllowFrom != nil {
				ch.LINE.AllowFrom = b.AllowFrom
			}
		}
	}
	return nil
}

func describeSetup(s *SetupFile) []string {
	var out []string
	if s.Provider != "" {
		out = append(out, fmt.Sprintf("provider %s, model %s, api key %s", s.Provider, s.Model, s.APIKey.SetState()))
	}
	if s.APIToken.IsSet() {
		out = append(out, "api token set from "+SetupFileName)
	}
	if c := s.Channels; c != nil {
		for name, on := range map[string]bool{"telegram": c.Telegram != nil, "discord": c.Discord != nil, "slack": c.Slack != nil, "line": c.LINE != nil} {
			if on {
				out = append(out, "channel "+name+" enabled")
			}
		}
		slices.Sort(out)
	}
	return out
}

func (o *Options) applySystem(ctx context.Context, p *Plan, rep *Report) error {
	if p.Hostname != "" {
		if err := o.setHostname(p.Hostname); err != nil {
			return err
		}
		rep.Applied = append(rep.Applied, "hostname "+p.Hostname)
	}
	if p.Timezone != "" {
		lt := o.path("/etc/localtime")
		if err := os.Remove(lt); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("firstboot: %w", err)
		}
		if err := os.Symlink("/usr/share/zoneinfo/"+p.Timezone, lt); err != nil {
			return fmt.Errorf("firstboot: set the time zone: %w", err)
		}
		if err := writeFile(o.path("/etc/timezone"), []byte(p.Timezone+"\n"), 0o644); err != nil {
			return err
		}
		rep.Applied = append(rep.Applied, "time zone "+p.Timezone)
	}
	if len(p.NTPServers) > 0 {
		body := "# Written by perch firstboot from " + SetupFileName + ".\n[Time]\nNTP=" + strings.Join(p.NTPServers, " ") + "\n"
		if err := writeFile(o.path(ntpConf), []byte(body), 0o644); err != nil {
			return err
		}
		rep.Applied = append(rep.Applied, "time servers "+strings.Join(p.NTPServers, " "))
	}
	if len(p.WiFi) > 0 {
		if err := writeFile(o.path(wpaConf), wpaSupplicantConf(p.WiFi, p.Country), 0o600); err != nil {
			return err
		}
		var names []string
		for _, w := range p.WiFi {
			names = append(names, strconv.Quote(w.SSID))
		}
		rep.Applied = append(rep.Applied, fmt.Sprintf("wi-fi %s (country %s)", strings.Join(names, ", "), orNone(p.Country)))
	}
	for _, u := range p.Users {
		groups, err := existingGroups(o.path("/etc/group"), u.Groups)
		if err != nil {
			return err
		}
		if err := o.System.AddUser(ctx, o.Root, u.Name, groups); err != nil {
			return err
		}
		home, uid, gid, err := lookupUser(o.path("/etc/passwd"), u.Name)
		if err != nil {
			return err
		}
		if len(u.Keys) > 0 {
			if err := addAuthorizedKeys(o.path(home), uid, gid, u.Keys); err != nil {
				return err
			}
		}
		rep.Applied = append(rep.Applied, fmt.Sprintf("account %s (no password, %d SSH keys, groups %s)", u.Name, len(u.Keys), strings.Join(groups, ",")))
	}
	if len(p.RootKeys) > 0 {
		if err := addAuthorizedKeys(o.path("/root"), 0, 0, p.RootKeys); err != nil {
			return err
		}
		if err := o.System.SSHHostKeys(ctx, o.Root); err != nil {
			return err
		}
		if err := os.Remove(o.path(SSHOffFlag)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("firstboot: turn SSH on: %w", err)
		}
		rep.Applied = append(rep.Applied, fmt.Sprintf("ssh on, %d keys for root", len(p.RootKeys)))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "not set"
	}
	return s
}

func (o *Options) setHostname(name string) error {
	if err := writeFile(o.path("/etc/hostname"), []byte(name+"\n"), 0o644); err != nil {
		return err
	}
	hosts := o.path("/etc/hosts")
	data, err := os.ReadFile(hosts)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("firstboot: %w", err)
	}
	var out []string
	replaced := false
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "127.0.1.1" {
			if !replaced {
				out = append(out, "127.0.1.1\t"+name)
				replaced = true
			}
			continue
		}
		if l != "" || len(out) > 0 {
			out = append(out, l)
		}
	}
	if !replaced {
		out = append(out, "127.0.1.1\t"+name)
	}
	if err := writeFile(hosts, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return o.System.SetHostname(name)
}

// wpaSupplicantConf writes the networks for wpa_supplicant@wlan0. SSIDs are
// written in hex, so no name needs escaping; a passphrase also serves WPA3
// (SAE), a 64-digit key only WPA2.
func wpaSupplicantConf(nets []WiFi, country string) []byte {
	var b strings.Builder
	b.WriteString("# Written by perch firstboot from the boot partition's settings.\n")
	b.WriteString("ctrl_interface=DIR=/run/wpa_supplicant GROUP=netdev\nupdate_config=0\nap_scan=1\n")
	if country != "" {
		b.WriteString("country=" + country + "\n")
	}
	for i, w := range nets {
		b.WriteString("\nnetwork={\n")
		b.WriteString("\tssid=" + hex.EncodeToString([]byte(w.SSID)) + "\n")
		if w.Hidden {
			b.WriteString("\tscan_ssid=1\n")
		}
		switch {
		case w.Passphrase == "":
			b.WriteString("\tkey_mgmt=NONE\n")
		case isHexPSK(w.Passphrase):
			b.WriteString("\tkey_mgmt=WPA-PSK\n\tpsk=" + strings.ToLower(w.Passphrase) + "\n")
		default:
			b.WriteString("\tkey_mgmt=WPA-PSK WPA-PSK-SHA256 SAE\n\tieee80211w=1\n\tpsk=\"" + w.Passphrase + "\"\n")
		}
		// Earlier networks (perch-setup.json's first) are preferred.
		fmt.Fprintf(&b, "\tpriority=%d\n}\n", len(nets)-i)
	}
	return []byte(b.String())
}

// addAuthorizedKeys appends keys missing from home/.ssh/authorized_keys.
func addAuthorizedKeys(home string, uid, gid int, keys []string) error {
	dir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	path := filepath.Join(dir, "authorized_keys")
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("firstboot: %w", err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(old), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	out := string(old)
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	for _, k := range keys {
		if !have[k] {
			out += k + "\n"
			have[k] = true
		}
	}
	if err := writeFile(path, []byte(out), 0o600); err != nil {
		return err
	}
	for _, p := range []string{dir, path} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("firstboot: %w", err)
		}
	}
	return nil
}

// existingGroups keeps the groups that exist in the group file: Imager names
// Raspberry Pi OS groups (gpio, render, ...) that a Debian system may lack.
func existingGroups(groupFile string, want []string) ([]string, error) {
	f, err := os.Open(groupFile)
	if err != nil {
		return nil, fmt.Errorf("firstboot: %w", err)
	}
	defer f.Close()
	have := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), ":")
		have[name] = true
	}
	var out []string
	for _, g := range want {
		// sudo grants nothing without the sudo program; root is the way.
		if have[g] && g != "sudo" && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out, sc.Err()
}

func lookupUser(passwd, name string) (home string, uid, gid int, err error) {
	data, err := os.ReadFile(passwd)
	if err != nil {
		return "", 0, 0, fmt.Errorf("firstboot: %w", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Split(l, ":")
		if len(f) >= 6 && f[0] == name {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				break
			}
			return f[5], uid, gid, nil
		}
	}
	return "", 0, 0, fmt.Errorf("firstboot: account %s was not created", name)
}

func (o *Options) removeSeeds(names []string) error {
	dir := o.path(o.Boot)
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("firstboot: remove %s from the boot partition: %w", n, err)
		}
	}
	// The files held secrets: make their removal reach the card now.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("firstboot: sync the boot partition: %w", err)
	}
	return nil
}

// writeFile replaces path atomically, creating its directory.
func writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	if err := config.WriteFileAtomic(path, data, perm); err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	return nil
}

// LoadState reads the state kept across boots; absent means first boot.
func LoadState(root string) (*State, error) {
	st := &State{}
	data, err := os.ReadFile(filepath.Join(root, StateDir, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("firstboot: %w", err)
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("firstboot: %s/state.json is damaged (%v); delete it to redo first boot", StateDir, err)
	}
	return st, nil
}

// SaveState writes the state, readable by root only.
func SaveState(root string, st *State) error {
	dir := filepath.Join(root, StateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("firstboot: %w", err)
	}
	data, _ := json.MarshalIndent(st, "", "  ")
	return writeFile(filepath.Join(dir, "state.json"), append(data, '\n'), 0o600)
}
