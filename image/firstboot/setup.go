package firstboot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/perchhq/perch/appliance/config"
)

// SetupFileName is Perch's own settings file on the boot partition.
const SetupFileName = "perch-setup.json"

// ErrSetup marks a perch-setup.json (or cloud-init seed) the owner must fix.
var ErrSetup = errors.New("setup")

// SetupFile is perch-setup.json. Every key is optional; unknown keys are an
// error naming the key, so a typo never silently drops a setting. Secrets
// are config.Secret, which never prints its value.
type SetupFile struct {
	// Hostname is the board's name on the LAN (<hostname>.local).
	Hostname string `json:"hostname"`
	// Timezone is an IANA zone such as Europe/Berlin.
	Timezone string `json:"timezone"`
	// NTPServers replace the default time servers (a LAN without
	// internet access, or a router that serves time).
	NTPServers []string `json:"ntp_servers"`
	// WiFi joins one wireless network.
	WiFi *SetupWiFi `json:"wifi"`
	// SSHAuthorizedKeys turn SSH on, for root, with these keys only.
	SSHAuthorizedKeys []string `json:"ssh_authorized_keys"`
	// Provider, Model, APIKey and APIBase configure the language model as
	// the web page's setup form does.
	Provider string        `json:"provider"`
	Model    string        `json:"model"`
	APIKey   config.Secret `json:"api_key"`
	APIBase  string        `json:"api_base"`
	// APIToken protects /chat, /admin and the page's API. Absent: the
	// board makes one and shows it on its console.
	APIToken config.Secret `json:"api_token"`
	// Channels turns on the chat platforms given a credential.
	Channels *SetupChannels `json:"channels"`
}

// SetupWiFi is one wireless network.
type SetupWiFi struct {
	SSID string `json:"ssid"`
	// Passphrase is 8 to 63 characters, or the 64 hex digits of the
	// derived key; empty for an open network.
	Passphrase config.Secret `json:"passphrase"`
	// Country is the ISO 3166 code of the regulatory domain (GB, DE, US).
	Country string `json:"country"`
	// Hidden networks are probed for by name.
	Hidden bool `json:"hidden"`
}

// SetupChannels are chat platform credentials.
type SetupChannels struct {
	Telegram *SetupBot   `json:"telegram"`
	Discord  *SetupBot   `json:"discord"`
	Slack    *SetupSlack `json:"slack"`
	LINE     *SetupLINE  `json:"line"`
}

// SetupBot is a platform reached with one bot token.
type SetupBot struct {
	Token     config.Secret `json:"token"`
	AllowFrom []string      `json:"allow_from"`
}

// SetupSlack is Slack in Socket Mode.
type SetupSlack struct {
	BotToken  config.Secret `json:"bot_token"`
	AppToken  config.Secret `json:"app_token"`
	AllowFrom []string      `json:"allow_from"`
}

// SetupLINE is the LINE Messaging API.
type SetupLINE struct {
	ChannelSecret      config.Secret `json:"channel_secret"`
	ChannelAccessToken config.Secret `json:"channel_access_token"`
	AllowFrom          []string      `json:"allow_from"`
}

// ParseSetup reads perch-setup.json strictly: one JSON object, known keys
// only, the right types, and values that make sense. The error names the key
// and what to write instead.
func ParseSetup(data []byte) (*SetupFile, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: %s is empty; write {} or delete it", ErrSetup, SetupFileName)
	}
	var raw any
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrSetup, SetupFileName, jsonProblem(data, err))
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: %s: unexpected text after the JSON object (at %s)", ErrSetup, SetupFileName, position(data, d.InputOffset()))
	}
	if _, ok := raw.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: %s must hold one JSON object: {\"hostname\": \"...\", ...}", ErrSetup, SetupFileName)
	}
	if err := knownKeys(raw, reflect.TypeOf(SetupFile{}), ""); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSetup, SetupFileName, err)
	}
	var s SetupFile
	if err := json.Unmarshal(data, &s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: %s: key %q must be %s, not %s", ErrSetup, SetupFileName, te.Field, kindName(te.Type), te.Value)
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrSetup, SetupFileName, jsonProblem(data, err))
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSetup, SetupFileName, err)
	}
	return &s, nil
}

func (s *SetupFile) validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%q %s", key, fmt.Sprintf(format, a...)))
	}
	if s.Hostname != "" {
		if err := checkHostname(s.Hostname); err != nil {
			bad("hostname", "%v", err)
		}
	}
	if s.Timezone != "" {
		if err := checkZoneName(s.Timezone); err != nil {
			bad("timezone", "%v", err)
		}
	}
	for i, srv := range s.NTPServers {
		if err := checkHostOrIP(srv); err != nil {
			bad(fmt.Sprintf("ntp_servers[%d]", i), "%v", err)
		}
	}
	if w := s.WiFi; w != nil {
		if err := checkSSID(w.SSID); err != nil {
			bad("wifi.ssid", "%v", err)
		}
		if err := checkPassphrase(w.Passphrase.Value()); err != nil {
			bad("wifi.passphrase", "%v", err)
		}
		if w.Country != "" {
			if err := checkCountry(w.Country); err != nil {
				bad("wifi.country", "%v", err)
			}
		}
	}
	for i, k := range s.SSHAuthorizedKeys {
		if err := checkSSHKey(k); err != nil {
			bad(fmt.Sprintf("ssh_authorized_keys[%d]", i), "%v", err)
		}
	}
	if s.Provider != "" || s.Model != "" || s.APIKey.IsSet() || s.APIBase != "" {
		switch {
		case s.Provider == "":
			bad("provider", "is missing: name the provider the model and key are for (one of %s)", strings.Join(config.ProviderNames, ", "))
		case !slices.Contains(config.ProviderNames, s.Provider):
			bad("provider", "is %q; use one of %s", s.Provider, strings.Join(config.ProviderNames, ", "))
		}
		if strings.TrimSpace(s.Model) == "" {
			bad("model", "is missing: the model id the provider should use (e.g. gpt-4o-mini)")
		}
		if s.Provider != "ollama" && !s.APIKey.IsSet() {
			bad("api_key", "is missing: the API key of your %s account", s.Provider)
		}
	}
	if s.APIToken.IsSet() {
		if err := checkToken(s.APIToken.Value()); err != nil {
			bad("api_token", "%v", err)
		}
	}
	if c := s.Channels; c != nil {
		if c.Telegram != nil && !c.Telegram.Token.IsSet() {
			bad("channels.telegram.token", "is missing: the bot token from @BotFather (or remove channels.telegram)")
		}
		if c.Discord != nil && !c.Discord.Token.IsSet() {
			bad("channels.discord.token", "is missing: the bot token from the Discord developer portal (or remove channels.discord)")
		}
		if c.Slack != nil && (!c.Slack.BotToken.IsSet() || !c.Slack.AppToken.IsSet()) {
			bad("channels.slack", "needs both bot_token (xoxb-…) and app_token (xapp-…)")
		}
		if c.LINE != nil && (!c.LINE.ChannelSecret.IsSet() || !c.LINE.ChannelAccessToken.IsSet()) {
			bad("channels.line", "needs both channel_secret and channel_access_token")
		}
	}
	return errors.Join(errs...)
}

// knownKeys reports the first key of raw that the struct type t lacks, with
// its dotted path and the closest known key.
func knownKeys(raw any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil // a type error, reported by json.Unmarshal
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = f.Type
			names = append(names, name)
		}
		for _, k := range slices.Sorted(mapKeys(m)) {
			ft, ok := fields[k]
			if !ok {
				msg := fmt.Sprintf("unknown key %q", joinKey(path, k))
				if c := closest(k, names); c != "" {
					return fmt.Errorf("%s (did you mean %q?)", msg, joinKey(path, c))
				}
				slices.Sort(names)
				return fmt.Errorf("%s (known keys here: %s)", msg, strings.Join(names, ", "))
			}
			if err := knownKeys(m[k], ft, joinKey(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if a, ok := raw.([]any); ok {
			for i, e := range a {
				if err := knownKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func joinKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// closest returns the candidate within edit distance 2 of s, if any.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func jsonProblem(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at %s: %v", position(data, se.Offset), se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "invalid JSON: the file ends early (a missing } or ])"
	}
	return "invalid JSON: " + err.Error()
}

func position(data []byte, off int64) string {
	off = min(off, int64(len(data)))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(data[:off], '\n'))
	return fmt.Sprintf("line %d, column %d", line, col)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string in double quotes"
	case reflect.Slice:
		return "a list [\"...\", ...]"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return "an object {...}"
	}
	return t.String()
}
