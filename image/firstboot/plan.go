package firstboot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Seeds are the settings files found on the boot partition, parsed.
type Seeds struct {
	// Found lists the files read, by name.
	Found []string
	// Setup is perch-setup.json, nil when absent.
	Setup *SetupFile
	// CloudInit merges user-data and network-config, nil when both are
	// absent.
	CloudInit *CloudInit
}

// ReadSeeds reads and parses every settings file in dir (the FAT boot
// partition). All files are parsed before anything is applied, and every
// problem is reported at once, so one reboot after a fix is enough.
func ReadSeeds(dir string) (*Seeds, error) {
	s := &Seeds{}
	var errs []error
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("firstboot: read %s: %w", name, err))
			return nil
		}
		s.Found = append(s.Found, name)
		return data
	}
	if data := read(SetupFileName); data != nil {
		setup, err := ParseSetup(data)
		if err != nil {
			errs = append(errs, err)
		}
		s.Setup = setup
	}
	ci := &CloudInit{}
	var haveCI bool
	if data := read(UserDataName); data != nil {
		haveCI = true
		if err := ci.addUserData(data); err != nil {
			errs = append(errs, err)
		}
	}
	if data := read(NetworkConfigName); data != nil {
		haveCI = true
		if err := ci.addNetworkConfig(data); err != nil {
			errs = append(errs, err)
		}
	}
	read(MetaDataName) // carries nothing Perch uses; removed with the rest
	if haveCI {
		s.CloudInit = ci
	}
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	return s, nil
}

// Empty reports whether the seeds ask for nothing (absent, or the image's
// own placeholder user-data).
func (s *Seeds) Empty() bool {
	if s.Setup != nil {
		return false
	}
	ci := s.CloudInit
	return ci == nil || (ci.Hostname == "" && ci.Timezone == "" && len(ci.Users) == 0 && len(ci.Keys) == 0 && len(ci.WiFi) == 0 && ci.Country == "")
}

// Plan is what first boot applies, merged from all seeds: perch-setup.json
// wins where both name a value, and SSH keys and Wi-Fi networks add up.
type Plan struct {
	Hostname   string
	Timezone   string
	NTPServers []string
	WiFi       []WiFi
	Country    string
	// RootKeys are authorized for root: every key given anywhere, since
	// root is how the board is administered (there is no sudo).
	RootKeys []string
	// Users are Imager's accounts, created with their own keys.
	Users []User
	// Setup carries the Perch settings (provider, tokens, channels).
	Setup *SetupFile
	// Ignored lists seed settings that were not applied.
	Ignored []string
}

// Plan merges the seeds.
func (s *Seeds) Plan() *Plan {
	p := &Plan{}
	addKeys := func(keys []string) {
		for _, k := range keys {
			if !slices.Contains(p.RootKeys, k) {
				p.RootKeys = append(p.RootKeys, k)
			}
		}
	}
	if st := s.Setup; st != nil {
		p.Setup = st
		p.Hostname = strings.ToLower(st.Hostname)
		p.Timezone = st.Timezone
		p.NTPServers = st.NTPServers
		if w := st.WiFi; w != nil {
			p.WiFi = append(p.WiFi, WiFi{SSID: w.SSID, Passphrase: w.Passphrase.Value(), Hidden: w.Hidden})
			p.Country = strings.ToUpper(w.Country)
		}
		addKeys(st.SSHAuthorizedKeys)
	}
	if ci := s.CloudInit; ci != nil {
		if p.Hostname == "" {
			p.Hostname = strings.ToLower(ci.Hostname)
		}
		if p.Timezone == "" {
			p.Timezone = ci.Timezone
		}
		for _, w := range ci.WiFi {
			if !slices.ContainsFunc(p.WiFi, func(x WiFi) bool { return x.SSID == w.SSID }) {
				p.WiFi = append(p.WiFi, w)
			}
		}
		if p.Country == "" {
			p.Country = ci.Country
		}
		addKeys(ci.Keys)
		for _, u := range ci.Users {
			addKeys(u.Keys)
			p.Users = append(p.Users, u)
		}
		p.Ignored = append(p.Ignored, ci.Ignored...)
	}
	return p
}
