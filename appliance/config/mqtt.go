package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// MQTT is the link to an MQTT broker: Home Assistant discovery of the
// board's sensors and state, and the agent over MQTT.
//
// ClientID and TopicPrefix are empty by default, meaning perch-<hostname>
// and perch/<hostname> worked out at start: a config written once (by an
// image's first boot, say) then stays right when the board is renamed.
type MQTT struct {
	Enabled bool `json:"enabled"`
	// Broker is mqtt://host[:1883], mqtts://host[:8883], ws://host[:port]/path
	// or wss://host[:port]/path; tcp:// is read as mqtt://, ssl:// and
	// tls:// as mqtts://.
	Broker   string `json:"broker"`
	Username string `json:"username"`
	Password Secret `json:"password"`
	ClientID string `json:"client_id"`
	// TopicPrefix is where the board's own topics live (status, sensor
	// states, agent/request, agent/response, messages).
	TopicPrefix string `json:"topic_prefix"`
	// DiscoveryPrefix is Home Assistant's discovery prefix.
	DiscoveryPrefix string `json:"discovery_prefix"`
	// CAFile is a PEM file of the CA that signed the broker's certificate,
	// for a private CA; empty means the system's roots. Relative paths are
	// relative to the config directory.
	CAFile                 string `json:"ca_file"`
	PublishIntervalSeconds int    `json:"publish_interval_seconds"`
	// AllowAllTools lets requests over MQTT use every tool; by default they
	// get only the tools that cannot change the board, as the broker's
	// other clients are not known senders.
	AllowAllTools bool `json:"allow_all_tools"`
}

// Default ports of the broker URL schemes without one in the URL.
var mqttDefaultPorts = map[string]string{"mqtt": "1883", "mqtts": "8883", "ws": "80", "wss": "443"}

// mqttSchemeAliases are the other names Paho-based tools (Zigbee2MQTT,
// Node-RED, Home Assistant's docs) use for the same two transports, so an
// address copied from one of them works as written.
var mqttSchemeAliases = map[string]string{"tcp": "mqtt", "ssl": "mqtts", "tls": "mqtts"}

// ParseBroker checks an mqtt.broker value and returns it with the scheme's
// default port filled in. Its errors never repeat a password given in the
// URL.
func ParseBroker(s string) (*url.URL, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("is empty; set it to the broker's address, e.g. mqtt://homeassistant.local:1883")
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Error repeats the input, which may hold a password.
		return nil, errors.New("is not a URL; write it as mqtt://host:1883, mqtts://host:8883, ws://host:9001/mqtt or wss://host/mqtt")
	}
	scheme := strings.ToLower(u.Scheme)
	if alias, ok := mqttSchemeAliases[scheme]; ok {
		scheme = alias
	}
	port, ok := mqttDefaultPorts[scheme]
	if !ok {
		return nil, fmt.Errorf("%q must start with mqtt://, mqtts://, ws:// or wss://", u.Redacted())
	}
	u.Scheme = scheme
	if u.User != nil {
		return nil, fmt.Errorf("%q carries credentials; put them in mqtt.username and mqtt.password instead", u.Redacted())
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%q has no host", u.Redacted())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: port must be between 1 and 65535", u.Redacted())
		}
	} else {
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	if (scheme == "mqtt" || scheme == "mqtts") && strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("%q: an %s:// address has no path (a path belongs to ws:// and wss:// addresses)", u.Redacted(), scheme)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: remove the ?query or #fragment", u.Redacted())
	}
	return u, nil
}

// checkTopicPrefix reports what is wrong with a topic prefix, if anything.
func checkTopicPrefix(p string) error {
	switch {
	case strings.ContainsAny(p, "+#"):
		return fmt.Errorf("%q holds a wildcard (+ or #); a prefix is a plain topic such as perch/kitchen", p)
	case strings.HasPrefix(p, "$"):
		return fmt.Errorf("%q starts with $, which brokers reserve for themselves", p)
	case strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//"):
		return fmt.Errorf("%q has an empty level; write it without leading, trailing or double slashes, e.g. perch/kitchen", p)
	case strings.TrimSpace(p) != p || strings.Contains(p, " /") || strings.Contains(p, "/ ") || strings.TrimSpace(p) == "":
		// A space is part of a topic: " homeassistant" is not Home
		// Assistant's prefix, and nothing there would ever be seen.
		return fmt.Errorf("%q has a level that starts or ends with a space; remove the spaces", p)
	case len(p) > 200:
		return fmt.Errorf("is %d bytes long; keep it under 200", len(p))
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q holds a control character", p)
		}
	}
	return nil
}

// validate checks the mqtt section. A disabled link is checked too when
// keys are set, so a mistake shows before the day it is enabled.
func (m *MQTT) validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("mqtt.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	var scheme string
	if m.Enabled || m.Broker != "" {
		if u, err := ParseBroker(m.Broker); err != nil {
			bad("broker", "%v", err)
		} else {
			scheme = u.Scheme
		}
	}
	if m.Password.IsSet() && m.Username == "" {
		bad("password", "is set but mqtt.username is empty; brokers check a password against a user name, so set both")
	}
	if strings.ContainsAny(m.Username, "\x00\n\r") {
		bad("username", "holds a control character")
	}
	if m.ClientID != "" {
		if len(m.ClientID) > 128 || strings.ContainsFunc(m.ClientID, unicode.IsControl) || strings.ContainsAny(m.ClientID, "+#/") {
			bad("client_id", "%q must be up to 128 characters without control characters, '+', '#' or '/'; leave it empty for perch-<hostname>", m.ClientID)
		}
	}
	if m.TopicPrefix != "" {
		if err := checkTopicPrefix(m.TopicPrefix); err != nil {
			bad("topic_prefix", "%v", err)
		}
	}
	if m.DiscoveryPrefix == "" {
		bad("discovery_prefix", "is empty; Home Assistant's default is homeassistant")
	} else if err := checkTopicPrefix(m.DiscoveryPrefix); err != nil {
		bad("discovery_prefix", "%v", err)
	}
	if m.CAFile != "" && scheme != "" && scheme != "mqtts" && scheme != "wss" {
		bad("ca_file", "applies to mqtts:// and wss:// brokers only; the broker %s is not encrypted", scheme+"://")
	}
	if m.PublishIntervalSeconds < 5 || m.PublishIntervalSeconds > 86400 {
		bad("publish_interval_seconds", "must be between 5 and 86400, got %d", m.PublishIntervalSeconds)
	}
	return errs
}

// MQTTCAFile is mqtt.ca_file as an absolute path (relative paths are in the
// config directory), or "" when unset.
func (c *Config) MQTTCAFile() string {
	f := c.MQTT.CAFile
	if f == "" || filepath.IsAbs(f) {
		return f
	}
	return filepath.Join(c.dir, f)
}

// HostLabel turns a hostname into the label the MQTT defaults use: its first
// DNS label, lower-cased, with anything but letters, digits, '-' and '_'
// replaced by '-' ("Kitchen.lan" → "kitchen"); "board" when nothing is left.
func HostLabel(hostname string) string {
	h, _, _ := strings.Cut(strings.TrimSpace(hostname), ".")
	var sb strings.Builder
	for _, r := range strings.ToLower(h) {
		if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_') {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
	}
	if s := strings.Trim(sb.String(), "-"); s != "" {
		return s
	}
	return "board"
}

// Resolved returns m with the hostname defaults filled in: client_id
// perch-<host> and topic_prefix perch/<host>.
func (m MQTT) Resolved(hostname string) MQTT {
	host := HostLabel(hostname)
	if m.ClientID == "" {
		m.ClientID = "perch-" + host
	}
	if m.TopicPrefix == "" {
		m.TopicPrefix = "perch/" + host
	}
	return m
}

// Summary is one line for `perch status`: whether the link is on, and
// where it goes (never the password).
func (m MQTT) Summary(hostname string) string {
	if !m.Enabled {
		return "disabled (mqtt.enabled is false)"
	}
	r := m.Resolved(hostname)
	broker := r.Broker
	if u, err := ParseBroker(r.Broker); err == nil {
		broker = u.String()
	}
	user := "anonymous"
	if r.Username != "" {
		user = "user " + r.Username + ", password " + r.Password.SetState()
	}
	return fmt.Sprintf("%s as %s (%s), topics under %s, discovery under %s", broker, r.ClientID, user, r.TopicPrefix, r.DiscoveryPrefix)
}
