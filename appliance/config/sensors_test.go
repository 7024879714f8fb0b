package config

import (
	"strings"
	"testing"
)

// TestSensorsBothForms: the original array form stays valid and keeps the
// default interval; the object form sets the interval and holds the parts.
func TestSensorsBothForms(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		every      int
		parts      int
	}{
		{"absent", `{}`, 60, 0},
		{"array form", `{"sensors":[{"name":"greenhouse","type":"sht3x","bus":"1"}]}`, 60, 1},
		{"empty array", `{"sensors":[]}`, 60, 0},
		{"object form", `{"sensors":{"sample_seconds":30,"parts":[{"name":"a","type":"bh1750"},{"name":"b","type":"sht3x"}]}}`, 30, 2},
		{"object without interval", `{"sensors":{"parts":[{"name":"a","type":"bh1750"}]}}`, 60, 1},
		{"object without parts", `{"sensors":{"sample_seconds":600}}`, 600, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(Options{Path: writeConfig(t, tc.body), Env: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Sensors.SampleSeconds != tc.every || len(cfg.Sensors.Parts) != tc.parts {
				t.Errorf("sensors = %+v, want every %d s and %d parts", cfg.Sensors, tc.every, tc.parts)
			}
		})
	}
}

// TestSensorsStrict: unknown keys in either form, a wrong shape and an
// interval out of range are refused with the key to fix.
func TestSensorsStrict(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key in the object", `{"sensors":{"sample_second":30}}`, `unknown key "sensors.sample_second" (did you mean "sensors.sample_seconds"?)`},
		{"unknown key in an array entry", `{"sensors":[{"name":"a","type":"bh1750","adress":35}]}`, `unknown key "sensors[0].adress" (did you mean "sensors[0].address"?)`},
		{"unknown key in a part", `{"sensors":{"parts":[{"name":"a","type":"bh1750","adress":35}]}}`, `unknown key "sensors.parts[0].adress"`},
		{"a string", `{"sensors":"bme280"}`, `"sensors" must be a list of parts`},
		{"interval too short", `{"sensors":{"sample_seconds":1}}`, "sensors.sample_seconds: must be between 10 and 3600 seconds, got 1"},
		{"interval not a number", `{"sensors":{"sample_seconds":"60"}}`, "sample_seconds"},
		{"bad part in the object", `{"sensors":{"parts":[{"name":"a","type":"dht22"}]}}`, `sensors.parts[0].type: "dht22" is not a supported part`},
		{"bad part in the array", `{"sensors":[{"name":"a","type":"dht22"}]}`, `sensors[0].type: "dht22" is not a supported part`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(Options{Path: writeConfig(t, tc.body), Env: noEnv})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "invalid JSON") {
				t.Errorf("err = %v: the file is valid JSON", err)
			}
		})
	}
}

// TestSensorsFromEnvironment: PERCH_SENSORS still sets the whole key (in
// either form) and PERCH_SENSORS_SAMPLE_SECONDS the interval, which wins.
func TestSensorsFromEnvironment(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{"sensors":[{"name":"a","type":"bh1750"}]}`), Env: envMap(map[string]string{
		"PERCH_SENSORS_SAMPLE_SECONDS": "120",
	})})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sensors.SampleSeconds != 120 || len(cfg.Sensors.Parts) != 1 {
		t.Errorf("sensors = %+v", cfg.Sensors)
	}
	cfg, err = Load(Options{Path: writeConfig(t, `{}`), Env: envMap(map[string]string{
		"PERCH_SENSORS":                `{"sample_seconds":20,"parts":[{"name":"x","type":"sht3x"}]}`,
		"PERCH_SENSORS_SAMPLE_SECONDS": "30",
	})})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sensors.SampleSeconds != 30 || len(cfg.Sensors.Parts) != 1 || cfg.Sensors.Parts[0].Name != "x" {
		t.Errorf("sensors = %+v", cfg.Sensors)
	}
	_, err = Load(Options{Path: writeConfig(t, `{}`), Env: envMap(map[string]string{"PERCH_SENSORS_SAMPLE_SECONDS": "often"})})
	if err == nil || !strings.Contains(err.Error(), "PERCH_SENSORS_SAMPLE_SECONDS") || !strings.Contains(err.Error(), "sensors.sample_seconds") {
		t.Errorf("err = %v", err)
	}
	warn, err := Load(Options{Path: writeConfig(t, `{}`), Env: noEnv, Environ: func() []string {
		return []string{"PERCH_SENSORS_SAMPLE_SECONDS=60", "PERCH_SENSORS=[]", "PERCH_SENSORS_PARTS=[]"}
	}})
	if err != nil || len(warn.Warnings()) != 0 {
		t.Errorf("known variables warned about: %v %v", warn.Warnings(), err)
	}
}

// TestSensorsSavedAsObject: Save writes the object form, which loads back
// the same.
func TestSensorsSavedAsObject(t *testing.T) {
	cfg, err := Load(Options{Path: writeConfig(t, `{"sensors":[{"name":"a","type":"bh1750","address":35}]}`), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"sample_seconds": 60`) || !strings.Contains(string(b), `"parts": [`) {
		t.Errorf("encoded sensors:\n%s", b)
	}
	if err := cfg.Save(); err != nil {
		t.Fatal(err)
	}
	again, err := Load(Options{Path: cfg.Path(), Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if again.Sensors.SampleSeconds != 60 || len(again.Sensors.Parts) != 1 || again.Sensors.Parts[0].Address != 35 {
		t.Errorf("reloaded sensors = %+v", again.Sensors)
	}
}
