package firstboot

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// The cloud-init seed files Raspberry Pi Imager writes on the boot
// partition when "OS customisation" is used, and meta-data beside them.
const (
	UserDataName      = "user-data"
	NetworkConfigName = "network-config"
	MetaDataName      = "meta-data"
)

// CloudInit is what Perch applies from Imager's seed files. Everything else
// in them (packages, keyboard, runcmd scripts, passwords) is reported in
// Ignored and not applied: there is no cloud-init on the board.
type CloudInit struct {
	Hostname string
	Timezone string
	// Users are accounts to create, with their SSH keys and no password.
	Users []User
	// Keys are top-level ssh_authorized_keys (cloud-init's default user).
	Keys []string
	// WiFi are the networks of network-config.
	WiFi []WiFi
	// Country is the Wi-Fi regulatory domain.
	Country string
	// Ignored names the settings that were not applied, and why.
	Ignored []string
}

// User is an account from user-data's users list.
type User struct {
	Name   string
	Groups []string
	Keys   []string
}

// WiFi is one wireless network.
type WiFi struct {
	SSID string
	// Passphrase is 8 to 63 characters, or 64 hex digits (a derived key,
	// as Imager writes it); empty for an open network.
	Passphrase string
	Hidden     bool
}

// Imager 1.8 sets the Wi-Fi country with this runcmd line.
var regdomainRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`REGDOMAIN=([A-Za-z]{2})\b`) })

// ParseUserData reads a #cloud-config user-data file.
func ParseUserData(data []byte) (*CloudInit, error) {
	ci := &CloudInit{}
	if err := ci.addUserData(data); err != nil {
		return nil, err
	}
	return ci, nil
}

func (ci *CloudInit) addUserData(data []byte) error {
	text := strings.TrimPrefix(string(data), "\ufeff")
	first, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	first = strings.TrimSpace(first)
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if strings.HasPrefix(first, "#!") {
		return fmt.Errorf("%w: %s is a script (%q); only #cloud-config files are read", ErrSetup, UserDataName, clip(first))
	}
	if first != "#cloud-config" {
		return fmt.Errorf("%w: %s must start with the line #cloud-config", ErrSetup, UserDataName)
	}
	root, err := parseYAML(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSetup, UserDataName, err)
	}
	if root.kind == nullNode {
		return nil // the image's placeholder: comments only
	}
	if root.kind != mapNode {
		return fmt.Errorf("%w: %s must be a mapping of settings (key: value lines)", ErrSetup, UserDataName)
	}
	bad := func(key string, n *node, want string) error {
		return fmt.Errorf("%w: %s: line %d: %s must be %s", ErrSetup, UserDataName, n.line, key, want)
	}
	for i, key := range root.keys {
		v := root.vals[i]
		switch key {
		case "hostname":
			s, ok := v.text()
			if !ok {
				return bad(key, v, "a name")
			}
			if err := checkHostname(s); err != nil {
				return fmt.Errorf("%w: %s: line %d: hostname %v", ErrSetup, UserDataName, v.line, err)
			}
			ci.Hostname = s
		case "timezone":
			s, ok := v.text()
			if !ok {
				return bad(key, v, "a zone name")
			}
			if err := checkZoneName(s); err != nil {
				return fmt.Errorf("%w: %s: line %d: timezone %v", ErrSetup, UserDataName, v.line, err)
			}
			ci.Timezone = s
		case "ssh_authorized_keys":
			keys, err := keyList(v, key)
			if err != nil {
				return err
			}
			ci.Keys = append(ci.Keys, keys...)
		case "users":
			if err := ci.addUsers(v); err != nil {
				return err
			}
		case "runcmd":
			// Scripts are not run. Imager 1.8 carries the Wi-Fi country in
			// one of them; take it from there.
			walkScalars(v, func(s string) {
				if m := regdomainRE().FindStringSubmatch(s); m != nil && ci.Country == "" {
					ci.Country = strings.ToUpper(m[1])
				}
			})
			ci.Ignored = append(ci.Ignored, "runcmd (commands are not run on first boot)")
		case "ssh_pwauth":
			ci.Ignored = append(ci.Ignored, "ssh_pwauth (no account has a password; SSH takes keys only)")
		case "enable_ssh":
			// SSH is on exactly when a key is given.
		case "manage_etc_hosts", "preserve_hostname", "fqdn", "prefer_fqdn_over_hostname":
			// /etc/hosts follows the hostname anyway.
		case "packages", "package_update", "package_upgrade":
			ci.Ignored = append(ci.Ignored, key+" (nothing is installed on first boot; the image announces <hostname>.local itself)")
		case "apt":
			// Imager turns off apt's date check for boards without a clock;
			// the image waits for time sync instead.
		default:
			ci.Ignored = append(ci.Ignored, key)
		}
	}
	return nil
}

func (ci *CloudInit) addUsers(v *node) error {
	if v.kind == nullNode {
		return nil
	}
	if v.kind != seqNode {
		return fmt.Errorf("%w: %s: line %d: users must be a list (- name: ...)", ErrSetup, UserDataName, v.line)
	}
	for _, it := range v.items {
		if s, ok := it.text(); ok && it.kind == scalarNode {
			if s != "default" {
				return fmt.Errorf("%w: %s: line %d: users entry %q must be \"default\" or a mapping with a name", ErrSetup, UserDataName, it.line, s)
			}
			continue // cloud-init's default user: root gets the top-level keys
		}
		if it.kind != mapNode {
			return fmt.Errorf("%w: %s: line %d: each users entry must be a mapping (name: ...)", ErrSetup, UserDataName, it.line)
		}
		var u User
		for i, key := range it.keys {
			fv := it.vals[i]
			switch key {
			case "name":
				s, ok := fv.text()
				if !ok || !validUserName(s) {
					return fmt.Errorf("%w: %s: line %d: users name %q is not a valid user name (lower-case letters, digits, '-' and '_', starting with a letter)", ErrSetup, UserDataName, fv.line, s)
				}
				u.Name = s
			case "groups":
				gs, err := groupList(fv)
				if err != nil {
					return err
				}
				u.Groups = gs
			case "ssh_authorized_keys", "ssh-authorized-keys":
				keys, err := keyList(fv, "users ssh_authorized_keys")
				if err != nil {
					return err
				}
				u.Keys = append(u.Keys, keys...)
			case "passwd", "hashed_passwd", "plain_text_passwd":
				ci.Ignored = append(ci.Ignored, "users "+key+" (no account has a password; log in with an SSH key)")
			case "sudo":
				ci.Ignored = append(ci.Ignored, "users sudo (administer the board as root with the same SSH key)")
			case "shell", "lock_passwd", "lock-passwd", "gecos", "primary_group", "homedir":
			default:
				ci.Ignored = append(ci.Ignored, "users "+key)
			}
		}
		if u.Name == "" {
			return fmt.Errorf("%w: %s: line %d: a users entry has no name", ErrSetup, UserDataName, it.line)
		}
		if u.Name == "root" || u.Name == "perch" {
			return fmt.Errorf("%w: %s: line %d: users name %q is reserved; choose another", ErrSetup, UserDataName, it.line, u.Name)
		}
		ci.Users = append(ci.Users, u)
	}
	return nil
}

// validUserName follows Debian's default NAME_REGEX for useradd.
func validUserName(s string) bool {
	if s == "" || len(s) > 32 || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '_') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func groupList(v *node) ([]string, error) {
	var out []string
	switch v.kind {
	case nullNode:
	case scalarNode:
		for _, g := range strings.Split(v.str, ",") {
			if g = strings.TrimSpace(g); g != "" {
				out = append(out, g)
			}
		}
	case seqNode:
		for _, it := range v.items {
			s, ok := it.text()
			if !ok {
				return nil, fmt.Errorf("%w: %s: line %d: groups must be names", ErrSetup, UserDataName, it.line)
			}
			out = append(out, strings.TrimSpace(s))
		}
	default:
		return nil, fmt.Errorf("%w: %s: line %d: groups must be a comma-separated list", ErrSetup, UserDataName, v.line)
	}
	return out, nil
}

func keyList(v *node, what string) ([]string, error) {
	var items []*node
	switch v.kind {
	case nullNode:
		return nil, nil
	case scalarNode:
		items = []*node{v}
	case seqNode:
		items = v.items
	default:
		return nil, fmt.Errorf("%w: %s: line %d: %s must be a list of public keys", ErrSetup, UserDataName, v.line, what)
	}
	var keys []string
	for _, it := range items {
		s, ok := it.text()
		if !ok {
			return nil, fmt.Errorf("%w: %s: line %d: %s must be a list of public keys", ErrSetup, UserDataName, it.line, what)
		}
		s = strings.TrimSpace(s)
		if err := checkSSHKey(s); err != nil {
			return nil, fmt.Errorf("%w: %s: line %d: SSH key %v", ErrSetup, UserDataName, it.line, err)
		}
		keys = append(keys, s)
	}
	return keys, nil
}

func walkScalars(n *node, fn func(string)) {
	if n == nil {
		return
	}
	switch n.kind {
	case scalarNode:
		fn(n.str)
	case seqNode:
		for _, it := range n.items {
			walkScalars(it, fn)
		}
	case mapNode:
		for _, v := range n.vals {
			walkScalars(v, fn)
		}
	}
}

// ParseNetworkConfig reads a network-config file (netplan version 2, as
// Imager writes it: with or without the top-level "network:" key).
func ParseNetworkConfig(data []byte) (*CloudInit, error) {
	ci := &CloudInit{}
	if err := ci.addNetworkConfig(data); err != nil {
		return nil, err
	}
	return ci, nil
}

func (ci *CloudInit) addNetworkConfig(data []byte) error {
	root, err := parseYAML(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSetup, NetworkConfigName, err)
	}
	if root.kind == nullNode {
		return nil
	}
	if root.kind != mapNode {
		return fmt.Errorf("%w: %s must be a mapping (version: 2, wifis: ...)", ErrSetup, NetworkConfigName)
	}
	if n := root.get("network"); n != nil {
		root = n
		if root.kind != mapNode {
			return fmt.Errorf("%w: %s: line %d: network must be a mapping", ErrSetup, NetworkConfigName, root.line)
		}
	}
	if v, _ := root.get("version").text(); v != "2" {
		return fmt.Errorf("%w: %s: version %q is not supported; write version: 2 (netplan format, as Raspberry Pi Imager does)", ErrSetup, NetworkConfigName, v)
	}
	for i, key := range root.keys {
		v := root.vals[i]
		switch key {
		case "version", "renderer":
		case "wifis":
			if err := ci.addWifis(v); err != nil {
				return err
			}
		case "ethernets":
			ci.Ignored = append(ci.Ignored, "network-config ethernets (every wired port uses DHCP)")
		default:
			ci.Ignored = append(ci.Ignored, "network-config "+key)
		}
	}
	return nil
}

func (ci *CloudInit) addWifis(v *node) error {
	if v.kind == nullNode {
		return nil
	}
	if v.kind != mapNode {
		return fmt.Errorf("%w: %s: line %d: wifis must be a mapping of interfaces (wlan0: ...)", ErrSetup, NetworkConfigName, v.line)
	}
	for i, ifname := range v.keys {
		iface := v.vals[i]
		if ifname == "renderer" && iface.kind == scalarNode {
			continue // Imager 1.8 writes "renderer: networkd" here
		}
		if iface.kind != mapNode {
			return fmt.Errorf("%w: %s: line %d: wifis %s must be a mapping (access-points: ...)", ErrSetup, NetworkConfigName, iface.line, ifname)
		}
		if ifname != "wlan0" {
			ci.Ignored = append(ci.Ignored, fmt.Sprintf("network-config wifis %s (its networks are joined on wlan0)", ifname))
		}
		if rd := iface.get("regulatory-domain"); rd != nil {
			c, ok := rd.text()
			if !ok || checkCountry(c) != nil {
				return fmt.Errorf("%w: %s: line %d: regulatory-domain must be a two-letter country code", ErrSetup, NetworkConfigName, rd.line)
			}
			ci.Country = strings.ToUpper(c)
		}
		aps := iface.get("access-points")
		if aps == nil || aps.kind == nullNode {
			continue
		}
		if aps.kind != mapNode {
			return fmt.Errorf("%w: %s: line %d: access-points must map network names to settings", ErrSetup, NetworkConfigName, aps.line)
		}
		for j, ssid := range aps.keys {
			ap := aps.vals[j]
			if err := checkSSID(ssid); err != nil {
				return fmt.Errorf("%w: %s: line %d: network name %v", ErrSetup, NetworkConfigName, ap.line, err)
			}
			w := WiFi{SSID: ssid}
			if ap.kind != nullNode && ap.kind != mapNode {
				return fmt.Errorf("%w: %s: line %d: access point %q must be a mapping (password: ...)", ErrSetup, NetworkConfigName, ap.line, ssid)
			}
			pw := ap.get("password")
			if auth := ap.get("auth"); pw == nil && auth != nil {
				pw = auth.get("password")
			}
			if pw != nil {
				s, ok := pw.text()
				if !ok {
					return fmt.Errorf("%w: %s: line %d: the password of %q must be text", ErrSetup, NetworkConfigName, pw.line, ssid)
				}
				if err := checkPassphrase(s); err != nil {
					return fmt.Errorf("%w: %s: line %d: the password of %q %v", ErrSetup, NetworkConfigName, pw.line, ssid, err)
				}
				w.Passphrase = s
			}
			if h := ap.get("hidden"); h != nil {
				b, ok := h.boolean()
				if !ok {
					return fmt.Errorf("%w: %s: line %d: hidden must be true or false", ErrSetup, NetworkConfigName, h.line)
				}
				w.Hidden = b
			}
			if !slices.ContainsFunc(ci.WiFi, func(x WiFi) bool { return x.SSID == w.SSID }) {
				ci.WiFi = append(ci.WiFi, w)
			}
		}
	}
	return nil
}
