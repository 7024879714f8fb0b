package mqtt

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/perchhq/perch/appliance/config"
)

func minimalConfig() config.MQTT {
	return config.MQTT{Enabled: true, Broker: "mqtt://broker.lan", DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60}
}

func TestParseRequest(t *testing.T) {
	cases := []struct {
		name, in         string
		msg, session, id string
		err              string
	}{
		{"json", `{"message":"hello","session_key":"ha:morning","id":"42"}`, "hello", "ha:morning", `"42"`, ""},
		{"numeric id", `{"message":"hi","id":7}`, "hi", defaultSession, "7", ""},
		{"unknown fields ignored", `{"message":"hi","extra":true}`, "hi", defaultSession, "", ""},
		{"plain text", "  What is the temperature?\n", "What is the temperature?", defaultSession, "", ""},
		{"command", "/sensors", "/sensors", defaultSession, "", ""},
		{"no message", `{"id":"9"}`, "", defaultSession, `"9"`, "no message"},
		{"empty", "", "", defaultSession, "", "no message"},
		{"bad json", `{"message":`, "", "", "", "not valid JSON"},
		{"long session", `{"message":"x","session_key":"` + strings.Repeat("k", 401) + `"}`, "x", "", "", "session_key"},
		{"control in session", `{"message":"x","session_key":"a\nb"}`, "x", "", "", "session_key"},
		{"not utf-8", "\xff\xfe", "", "", "", "UTF-8"},
		{"message a number", `{"message":5}`, "", "", "", `"message" must be a string, not a number`},
		{"another channel's session", `{"message":"x","session_key":"telegram:42"}`, "x", "", "", "belongs to a conversation on telegram"},
		{"a cron job's session", `{"message":"x","session_key":"cron:abc"}`, "x", "", "", "on cron"},
		{"a name of its own", `{"message":"x","session_key":"ha:morning"}`, "x", "ha:morning", "", ""},
		{"a prefix without its colon", `{"message":"x","session_key":"telegrammy"}`, "x", "telegrammy", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := parseRequest([]byte(c.in), []string{"telegram", "cron"})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if req.Message != c.msg || req.SessionKey != c.session || string(req.ID) != c.id {
				t.Errorf("request %+v (id %s)", req, req.ID)
			}
		})
	}
}

// TestBackoffGrowsWithJitterAndFlaps: failed attempts wait longer each time
// up to the cap, never less than half the step; a reconnection after a
// long-lived connection is immediate, after a flapping one it waits.
func TestBackoffGrowsWithJitterAndFlaps(t *testing.T) {
	l, err := New(Options{Config: minimalConfig(), Hostname: "x", MinBackoff: time.Second, MaxBackoff: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d := l.backoff(0); d != 0 {
		t.Errorf("first attempt waits %s", d)
	}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 8: 2 * time.Minute, 40: 2 * time.Minute} {
		for range 20 {
			if d := l.backoff(n); d < want/2 || d > want {
				t.Errorf("attempt %d waits %s, want within [%s, %s]", n, d, want/2, want)
			}
		}
	}
	l.st.upAt = time.Now().Add(-time.Hour)
	if d := l.backoff(0); d != 0 {
		t.Errorf("reconnect after an hour up waits %s", d)
	}
	l.st.upAt = time.Now().Add(-time.Second)
	if d := l.backoff(0); d < 500*time.Millisecond {
		t.Errorf("reconnect after a 1 s connection waits %s", d)
	}
	l.st.upAt = time.Now().Add(-time.Second)
	if d := l.backoff(0); d < time.Second {
		t.Errorf("second flap waits %s, want at least 1 s", d)
	}
}

// TestDescribeNamesTheKeyToFix: each way a connection fails says what to
// change.
func TestDescribeNamesTheKeyToFix(t *testing.T) {
	l, err := New(Options{Config: minimalConfig(), Hostname: "x"})
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(err error) error { return fmt.Errorf("failed to connect to %s: %w", l.broker, err) }
	cases := []struct {
		err  error
		want []string
	}{
		{autopaho.NewConnackError(errors.New("x"), &paho.Connack{ReasonCode: 0x86}), []string{"refused the login", "bad user name or password", "mqtt.username", "mqtt.password"}},
		{autopaho.NewConnackError(errors.New("x"), &paho.Connack{ReasonCode: 0x87}), []string{"not authorized", "mqtt.username", "mqtt.password"}},
		{autopaho.NewConnackError(errors.New("x"), &paho.Connack{ReasonCode: 0x85}), []string{"mqtt.client_id"}},
		{autopaho.NewConnackError(errors.New("x"), &paho.Connack{ReasonCode: 0x84}), []string{"MQTT 5"}},
		{wrap(x509.UnknownAuthorityError{}), []string{"unknown authority", "mqtt.ca_file"}},
		{wrap(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "broker.lan"}), []string{"mqtt.broker"}},
		{wrap(errors.New("dial tcp 10.0.0.2:1883: connect: connection refused")), []string{"cannot connect to the broker mqtt://broker.lan:1883", "connection refused"}},
	}
	for _, c := range cases {
		got := l.describe(c.err)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("describe(%v) = %q, lacks %q", c.err, got, w)
			}
		}
	}
}

func TestNewRefusesAnUnreadableCAFile(t *testing.T) {
	cfg := minimalConfig()
	cfg.Broker = "mqtts://broker.lan"
	_, err := New(Options{Config: cfg, CAFile: filepath.Join(t.TempDir(), "missing.pem")})
	if err == nil || !strings.Contains(err.Error(), "mqtt.ca_file") {
		t.Errorf("missing CA file: %v", err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	_, err = New(Options{Config: cfg, CAFile: notPEM})
	if err == nil || !strings.Contains(err.Error(), "mqtt.ca_file") || !strings.Contains(err.Error(), "BEGIN CERTIFICATE") {
		t.Errorf("CA file without a certificate: %v", err)
	}
	cfg.Broker = "http://x"
	if _, err := New(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "mqtt.broker") {
		t.Errorf("bad broker: %v", err)
	}
}

func TestDefaultsComeFromTheHostname(t *testing.T) {
	l, err := New(Options{Config: minimalConfig(), Hostname: "Greenhouse.lan"})
	if err != nil {
		t.Fatal(err)
	}
	st := l.Status()
	if st.ClientID != "perch-greenhouse" || st.TopicPrefix != "perch/greenhouse" || l.topics.request != "perch/greenhouse/agent/request" {
		t.Errorf("status %+v, request topic %s", st, l.topics.request)
	}
	if ok, msg := l.Check(t.Context()); ok || !strings.Contains(msg, "not started") {
		t.Errorf("check before start: %v %q", ok, msg)
	}
}

func TestBoardModel(t *testing.T) {
	root := t.TempDir()
	if got := boardModel(root + "/"); !strings.HasPrefix(got, "Linux ") {
		t.Errorf("no model files: %q", got)
	}
	os.MkdirAll(filepath.Join(root, "sys/class/dmi/id"), 0o755)
	os.WriteFile(filepath.Join(root, "sys/class/dmi/id/sys_vendor"), []byte("QEMU\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sys/class/dmi/id/product_name"), []byte("Standard PC (Q35 + ICH9, 2009)\n"), 0o644)
	if got := boardModel(root + "/"); got != "QEMU Standard PC (Q35 + ICH9, 2009)" {
		t.Errorf("PC: %q", got)
	}
	os.MkdirAll(filepath.Join(root, "proc/device-tree"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/device-tree/model"), []byte("Raspberry Pi 4 Model B Rev 1.4\x00"), 0o644)
	if got := boardModel(root + "/"); got != "Raspberry Pi 4 Model B Rev 1.4" {
		t.Errorf("Pi: %q", got)
	}
}

func TestStepIgnoresNoise(t *testing.T) {
	for _, c := range []struct {
		q          string
		last, next float64
		publish    bool
	}{
		{"temperature", 21.5, 21.6, false},
		{"temperature", 21.5, 21.7, true},
		{"humidity", 40, 40.5, false},
		{"humidity", 40, 41.2, true},
		{"pressure", 1009.4, 1009.6, false},
		{"pressure", 1009.4, 1010, true},
		{"illuminance", 2000, 2050, false},
		{"illuminance", 2000, 2150, true},
		{"illuminance", 0, 1, true},
		{"temperature", 21.7, 21.5, true},
	} {
		if got := moved(c.q, c.last, c.next); got != c.publish {
			t.Errorf("%s %v -> %v: publish %v", c.q, c.last, c.next, got)
		}
	}
}
