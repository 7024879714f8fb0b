package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMQTTDefaults: an absent mqtt section is a disabled link with Home
// Assistant's discovery prefix and a minute between publishes; client id
// and topic prefix stay empty, meaning "from the hostname" at start.
func TestMQTTDefaults(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	want := MQTT{DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60}
	if cfg.MQTT != want {
		t.Errorf("mqtt = %+v, want %+v", cfg.MQTT, want)
	}
}

func TestMQTTErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name, mqtt string
		want       []string
	}{
		{"enabled without broker", `{"enabled":true}`, []string{"mqtt.broker", "is empty", "mqtt://"}},
		{"unknown key", `{"enabled":true,"brokr":"mqtt://h"}`, []string{`"mqtt.brokr"`, `"mqtt.broker"`}},
		{"wrong scheme", `{"broker":"http://h:1883"}`, []string{"mqtt.broker", "mqtt://, mqtts://, ws:// or wss://"}},
		{"no host", `{"broker":"mqtt://:1883"}`, []string{"mqtt.broker", "no host"}},
		{"bad port", `{"broker":"mqtt://h:99999"}`, []string{"mqtt.broker", "port"}},
		{"path on tcp", `{"broker":"mqtt://h/x"}`, []string{"mqtt.broker", "no path"}},
		{"query", `{"broker":"ws://h/mqtt?x=1"}`, []string{"mqtt.broker", "query"}},
		{"credentials in url", `{"broker":"mqtt://bob:hunter2@h"}`, []string{"mqtt.broker", "mqtt.username and mqtt.password"}},
		{"password without user", `{"password":"p"}`, []string{"mqtt.password", "mqtt.username"}},
		{"wildcard prefix", `{"topic_prefix":"perch/+"}`, []string{"mqtt.topic_prefix", "wildcard"}},
		{"slash prefix", `{"topic_prefix":"/perch"}`, []string{"mqtt.topic_prefix", "empty level"}},
		{"dollar prefix", `{"topic_prefix":"$SYS/x"}`, []string{"mqtt.topic_prefix", "reserve"}},
		{"blank prefix", `{"topic_prefix":" "}`, []string{"mqtt.topic_prefix", "space"}},
		{"padded discovery", `{"discovery_prefix":" homeassistant"}`, []string{"mqtt.discovery_prefix", "space"}},
		{"padded level", `{"topic_prefix":"perch /kitchen"}`, []string{"mqtt.topic_prefix", "space"}},
		{"empty discovery", `{"discovery_prefix":""}`, []string{"mqtt.discovery_prefix", "homeassistant"}},
		{"client id slash", `{"client_id":"a/b"}`, []string{"mqtt.client_id"}},
		{"ca on plain", `{"broker":"mqtt://h","ca_file":"/ca.pem"}`, []string{"mqtt.ca_file", "mqtts://"}},
		{"interval", `{"publish_interval_seconds":1}`, []string{"mqtt.publish_interval_seconds", "between 5 and 86400"}},
		{"bool type", `{"enabled":"yes"}`, []string{`"mqtt.enabled"`, "true or false"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(Options{Path: writeConfig(t, `{"mqtt":`+c.mqtt+`}`), Env: noEnv})
			if err == nil {
				t.Fatal("loaded without error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error repeats the password from the URL: %v", err)
			}
		})
	}
}

func TestParseBrokerFillsDefaultPorts(t *testing.T) {
	for in, want := range map[string]string{
		"mqtt://ha.local":          "mqtt://ha.local:1883",
		"MQTTS://ha.local":         "mqtts://ha.local:8883",
		"ws://ha.local/mqtt":       "ws://ha.local:80/mqtt",
		"wss://ha.local:8443/mqtt": "wss://ha.local:8443/mqtt",
		"mqtt://[::1]":             "mqtt://[::1]:1883",
		"mqtt://10.0.0.2:1884/":    "mqtt://10.0.0.2:1884/",
		// Paho's names for the same transports, as copied from Zigbee2MQTT
		// or Node-RED.
		"tcp://ha.local":      "mqtt://ha.local:1883",
		"ssl://ha.local":      "mqtts://ha.local:8883",
		"TLS://ha.local:8884": "mqtts://ha.local:8884",
	} {
		u, err := ParseBroker(in)
		if err != nil {
			t.Errorf("ParseBroker(%q): %v", in, err)
			continue
		}
		if u.String() != want {
			t.Errorf("ParseBroker(%q) = %s, want %s", in, u, want)
		}
	}
}

// TestMQTTEnvOverrides: every mqtt key has its PERCH_MQTT_* variable, the
// password included, and the result is validated like the file.
func TestMQTTEnvOverrides(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{"mqtt":{"broker":"mqtt://file:1883"}}`), Env: envMap(map[string]string{
		"PERCH_MQTT_ENABLED":                  "true",
		"PERCH_MQTT_BROKER":                   "mqtts://env.example:8883",
		"PERCH_MQTT_USERNAME":                 "perch",
		"PERCH_MQTT_PASSWORD":                 "s3cret",
		"PERCH_MQTT_CLIENT_ID":                "perch-greenhouse",
		"PERCH_MQTT_TOPIC_PREFIX":             "farm/greenhouse",
		"PERCH_MQTT_DISCOVERY_PREFIX":         "ha",
		"PERCH_MQTT_CA_FILE":                  "ca.pem",
		"PERCH_MQTT_PUBLISH_INTERVAL_SECONDS": "30",
		"PERCH_MQTT_ALLOW_ALL_TOOLS":          "true",
	})})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.MQTT
	want := MQTT{Enabled: true, Broker: "mqtts://env.example:8883", Username: "perch", Password: "s3cret",
		ClientID: "perch-greenhouse", TopicPrefix: "farm/greenhouse", DiscoveryPrefix: "ha", CAFile: "ca.pem",
		PublishIntervalSeconds: 30, AllowAllTools: true}
	if m != want {
		t.Errorf("mqtt = %+v, want %+v", m, want)
	}
	if got := cfg.MQTTCAFile(); got != filepath.Join(cfg.Dir(), "ca.pem") {
		t.Errorf("relative ca_file resolves to %s", got)
	}
	_, err = Load(Options{Path: writeConfig(t, `{}`), Env: envMap(map[string]string{"PERCH_MQTT_PUBLISH_INTERVAL_SECONDS": "0"})})
	if err == nil || !strings.Contains(err.Error(), "mqtt.publish_interval_seconds") {
		t.Errorf("env value not validated: %v", err)
	}
}

// TestMQTTPasswordIsASecret: status lists it as set/not set, it never
// prints, and Save writes it back for the next start.
func TestMQTTPasswordIsASecret(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{"mqtt":{"username":"u","password":"hunter2"}}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range cfg.Secrets() {
		if s.Path == "mqtt.password" {
			found = s.Set
		}
	}
	if !found {
		t.Error("mqtt.password is not listed as a set secret")
	}
	js, _ := json.Marshal(cfg.MQTT)
	if out := fmt.Sprintf("%v %+v %s", cfg.MQTT, cfg.MQTT, js); strings.Contains(out, "hunter2") {
		t.Errorf("password printed: %s", out)
	}
	if err := cfg.Save(); err != nil {
		t.Fatal(err)
	}
	again, err := Load(Options{Path: cfg.Path(), Env: noEnv})
	if err != nil || again.MQTT.Password.Value() != "hunter2" {
		t.Errorf("password did not survive Save: %v", err)
	}
}

// TestOnboardWritesTheMQTTSection: the onboarded file shows every mqtt key,
// disabled, so a user fills it in rather than guessing names.
func TestOnboardWritesTheMQTTSection(t *testing.T) {
	t.Setenv("PERCH_HOME", t.TempDir())
	res, err := Onboard("", false)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(res.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		MQTT map[string]any `json:"mqtt"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"enabled", "broker", "username", "password", "client_id", "topic_prefix",
		"discovery_prefix", "ca_file", "publish_interval_seconds", "allow_all_tools"} {
		if _, ok := f.MQTT[k]; !ok {
			t.Errorf("onboarded config lacks mqtt.%s", k)
		}
	}
	if f.MQTT["enabled"] != false || f.MQTT["discovery_prefix"] != "homeassistant" || f.MQTT["publish_interval_seconds"] != 60.0 {
		t.Errorf("mqtt section = %v", f.MQTT)
	}
}

func TestMQTTHostnameDefaults(t *testing.T) {
	for host, want := range map[string]string{
		"kitchen":           "kitchen",
		"Greenhouse-2.lan":  "greenhouse-2",
		"raspberrypi.local": "raspberrypi",
		"my box":            "my-box",
		"":                  "board",
		"日本":                "board",
	} {
		if got := HostLabel(host); got != want {
			t.Errorf("HostLabel(%q) = %q, want %q", host, got, want)
		}
	}
	r := MQTT{}.Resolved("Kitchen.lan")
	if r.ClientID != "perch-kitchen" || r.TopicPrefix != "perch/kitchen" {
		t.Errorf("resolved = %+v", r)
	}
	set := MQTT{ClientID: "mine", TopicPrefix: "house/x"}.Resolved("kitchen")
	if set.ClientID != "mine" || set.TopicPrefix != "house/x" {
		t.Errorf("configured values replaced: %+v", set)
	}
}

func TestMQTTSummaryShowsNoPassword(t *testing.T) {
	m := MQTT{Enabled: true, Broker: "mqtt://ha.local", Username: "perch", Password: "hunter2", DiscoveryPrefix: "homeassistant"}
	s := m.Summary("kitchen")
	for _, w := range []string{"mqtt://ha.local:1883", "perch-kitchen", "user perch, password set", "perch/kitchen", "homeassistant"} {
		if !strings.Contains(s, w) {
			t.Errorf("summary %q lacks %q", s, w)
		}
	}
	if strings.Contains(s, "hunter2") {
		t.Errorf("summary shows the password: %s", s)
	}
	if s := (MQTT{}).Summary("x"); !strings.Contains(s, "disabled") {
		t.Errorf("disabled summary = %q", s)
	}
}
