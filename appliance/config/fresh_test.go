package config

import (
	"path/filepath"
	"regexp"
	"testing"
)

// TestFreshIsWhatOnboardWrites: a board's first boot and `perch onboard`
// start from the same config, each with a token of its own.
func TestFreshIsWhatOnboardWrites(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PERCH_HOME", dir)
	a, b := Fresh(filepath.Join(dir, "a.json")), Fresh(filepath.Join(dir, "b.json"))
	if a.Gateway.APIToken == b.Gateway.APIToken || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(a.Gateway.APIToken.Value()) {
		t.Errorf("tokens %q %q: want two different 32-hex-digit tokens", a.Gateway.APIToken.Value(), b.Gateway.APIToken.Value())
	}
	if err := a.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := Load(Options{Path: a.Path(), Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if got.Gateway.Host != "0.0.0.0" || !got.Devices.Enabled || got.Gateway.APIToken != a.Gateway.APIToken {
		t.Errorf("saved fresh config: host %q devices %v", got.Gateway.Host, got.Devices.Enabled)
	}
	res, err := Onboard(filepath.Join(dir, "onboard.json"), false)
	if err != nil {
		t.Fatal(err)
	}
	on, err := Load(Options{Path: res.ConfigPath, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if on.Gateway.Host != got.Gateway.Host || on.Devices != got.Devices {
		t.Errorf("onboard and Fresh differ: %q/%v vs %q/%v", on.Gateway.Host, on.Devices, got.Gateway.Host, got.Devices)
	}
}
