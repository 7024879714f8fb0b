package firstboot

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// fixtureKey returns line n (1-based) of a fixture that is an SSH key.
func fixtureKey(t *testing.T, file string, n int) string {
	t.Helper()
	var keys []string
	for _, l := range strings.Split(string(fixture(t, file)), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		if strings.HasPrefix(l, "ssh-") {
			keys = append(keys, l)
		}
	}
	if len(keys) < n {
		t.Fatalf("%s has %d keys", file, len(keys))
	}
	return keys[n-1]
}

var imagerGroups = strings.Split("users,adm,dialout,audio,netdev,video,plugdev,cdrom,games,input,gpio,spi,i2c,render,sudo", ",")

// TestImager18Seeds reads what Raspberry Pi Imager 1.8 writes: a user with a
// password hash (not applied) and a key, the Wi-Fi country hidden in a
// runcmd line, network-config without the network: key.
func TestImager18Seeds(t *testing.T) {
	ci, err := ParseUserData(fixture(t, "imager-1.8/user-data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ci.addNetworkConfig(fixture(t, "imager-1.8/network-config")); err != nil {
		t.Fatal(err)
	}
	want := &CloudInit{
		Hostname: "perch-kitchen",
		Timezone: "Europe/London",
		Users:    []User{{Name: "pi", Groups: imagerGroups, Keys: []string{fixtureKey(t, "imager-1.8/user-data", 1)}}},
		WiFi:     []WiFi{{SSID: "Home Network", Passphrase: "4f754670293a8f616999f7263c27c1aed73b003d32c26bda1df5e82f7555c653"}},
		Country:  "GB",
	}
	got := *ci
	got.Ignored = nil
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("got  %+v\nwant %+v", got, *want)
	}
	ignored := strings.Join(ci.Ignored, "; ")
	for _, w := range []string{"users passwd (no account has a password", "users sudo", "runcmd (commands are not run", "packages"} {
		if !strings.Contains(ignored, w) {
			t.Errorf("Ignored = %q; want it to mention %q", ignored, w)
		}
	}
}

// TestImager20Seeds reads Imager 2.x output: keyboard and rpi sections, a
// key-only user with two keys, network-config under network: with the
// regulatory domain and a hidden network whose name holds quotes.
func TestImager20Seeds(t *testing.T) {
	dir := filepath.Join("testdata", "imager-2.0")
	s, err := ReadSeeds(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{UserDataName, NetworkConfigName, MetaDataName}; !reflect.DeepEqual(s.Found, want) {
		t.Errorf("Found = %v; want %v", s.Found, want)
	}
	ci := s.CloudInit
	k1, k2 := fixtureKey(t, "imager-2.0/user-data", 1), fixtureKey(t, "imager-2.0/user-data", 2)
	if ci.Hostname != "perch-lab" || ci.Timezone != "Europe/Berlin" || ci.Country != "DE" {
		t.Errorf("hostname %q, zone %q, country %q", ci.Hostname, ci.Timezone, ci.Country)
	}
	if want := []User{{Name: "alice", Groups: imagerGroups, Keys: []string{k1, k2}}}; !reflect.DeepEqual(ci.Users, want) {
		t.Errorf("Users = %+v", ci.Users)
	}
	if want := []WiFi{{SSID: `Cafe "Zur Post"`, Passphrase: "1572cfd83e170938e34a74a222bb9c08143a12556546f3643ffbe05bf82e68c9", Hidden: true}}; !reflect.DeepEqual(ci.WiFi, want) {
		t.Errorf("WiFi = %+v", ci.WiFi)
	}
	if ig := strings.Join(ci.Ignored, ";"); !strings.Contains(ig, "keyboard") || !strings.Contains(ig, "rpi") {
		t.Errorf("Ignored = %q; want keyboard and rpi", ig)
	}
	p := s.Plan()
	if !reflect.DeepEqual(p.RootKeys, []string{k1, k2}) {
		t.Errorf("RootKeys = %v; the user's keys also administer the board as root", p.RootKeys)
	}
}

// TestImagerCountryOnly: runcmd in flow sequences parses; no network means
// no Wi-Fi change.
func TestImagerCountryOnly(t *testing.T) {
	ci, err := ParseUserData(fixture(t, "imager-2.0-country-only/user-data"))
	if err != nil {
		t.Fatal(err)
	}
	if ci.Hostname != "perch-shed" || ci.Timezone != "America/New_York" || len(ci.WiFi) != 0 {
		t.Errorf("%+v", ci)
	}
}

// TestPlaceholderUserDataIsEmpty: the image's own user-data (comments only,
// there so Imager picks cloud-init) asks for nothing.
func TestPlaceholderUserDataIsEmpty(t *testing.T) {
	dir := t.TempDir()
	placeholder := "#cloud-config\n# Raspberry Pi Imager replaces this file with your settings.\n"
	if err := os.WriteFile(filepath.Join(dir, UserDataName), []byte(placeholder), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSeeds(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Empty() {
		t.Errorf("placeholder seeds are not empty: %+v", s.CloudInit)
	}
}

func TestCloudInitErrorsNameTheLine(t *testing.T) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHiIyFBJJIUsfpOIqrKXHlqg6uRt2lvMhrp1mWd7Ldxt a@b"
	tests := []struct{ name, file, in, want string }{
		{"script", UserDataName, "#!/bin/sh\necho hi\n", "is a script"},
		{"no header", UserDataName, "hostname: x\n", "must start with the line #cloud-config"},
		{"bad hostname", UserDataName, "#cloud-config\nhostname: my_pi\n", "line 2: hostname"},
		{"bad key", UserDataName, "#cloud-config\nusers:\n- name: pi\n  ssh_authorized_keys:\n    - ssh-ed25519 AAAAnotbase64!!\n", "line 5: SSH key"},
		{"reserved user", UserDataName, "#cloud-config\nusers:\n- name: root\n  ssh_authorized_keys: [\"" + key + "\"]\n", `users name "root" is reserved`},
		{"bad user name", UserDataName, "#cloud-config\nusers:\n- name: Bad Name\n", "not a valid user name"},
		{"yaml", UserDataName, "#cloud-config\nhostname: &a x\n", "user-data: yaml: line 2"},
		{"network v1", NetworkConfigName, "version: 1\nconfig: []\n", `version "1" is not supported`},
		{"short passphrase", NetworkConfigName, "version: 2\nwifis:\n  wlan0:\n    access-points:\n      home:\n        password: short\n", `line 6: the password of "home" must be 8 to 63`},
		{"bad country", NetworkConfigName, "network:\n  version: 2\n  wifis:\n    wlan0:\n      regulatory-domain: Germany\n", "line 5: regulatory-domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.in), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadSeeds(dir)
			if err == nil || !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v; want ErrSetup containing %q", err, tt.want)
			}
		})
	}
}

// TestOpenNetworkAndAuthBlock: netplan's auth: form and an open network.
func TestOpenNetworkAndAuthBlock(t *testing.T) {
	ci, err := ParseNetworkConfig([]byte("network:\n  version: 2\n  wifis:\n    wlan0:\n      access-points:\n        open-cafe: {}\n        office:\n          auth:\n            key-management: psk\n            password: \"s3cret pass\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []WiFi{{SSID: "open-cafe"}, {SSID: "office", Passphrase: "s3cret pass"}}
	if !reflect.DeepEqual(ci.WiFi, want) {
		t.Errorf("WiFi = %+v", ci.WiFi)
	}
}
