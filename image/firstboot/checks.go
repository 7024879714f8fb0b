package firstboot

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/perchhq/perch/appliance/config"
)

// checkHostname accepts one DNS label (RFC 1123): what <name>.local needs.
func checkHostname(h string) error {
	if len(h) < 1 || len(h) > 63 {
		return fmt.Errorf("must be 1 to 63 characters, got %d", len(h))
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
		if !ok {
			return fmt.Errorf("%q may hold only letters, digits and '-' (no dots, spaces or underscores)", h)
		}
	}
	if h[0] == '-' || h[len(h)-1] == '-' {
		return fmt.Errorf("%q must not start or end with '-'", h)
	}
	return nil
}

// checkZoneName accepts the shape of an IANA zone name; whether the zone
// exists is checked against the board's tzdata when it is applied.
func checkZoneName(z string) error {
	if strings.HasPrefix(z, "/") || strings.Contains(z, "..") || strings.ContainsAny(z, " \\\n\t") || len(z) > 64 {
		return fmt.Errorf("%q is not a time zone name; use an IANA name such as Europe/Berlin or America/New_York", z)
	}
	return nil
}

// checkHostOrIP accepts an IP address or a host name.
func checkHostOrIP(s string) error {
	if net.ParseIP(s) != nil {
		return nil
	}
	if s == "" || len(s) > 253 {
		return fmt.Errorf("%q is not a host name or IP address", s)
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if checkHostname(label) != nil {
			return fmt.Errorf("%q is not a host name or IP address", s)
		}
	}
	return nil
}

// checkSSID accepts 1 to 32 bytes, as 802.11 does.
func checkSSID(s string) error {
	if len(s) < 1 || len(s) > 32 {
		return fmt.Errorf("must be 1 to 32 bytes, got %d", len(s))
	}
	return nil
}

// checkPassphrase accepts what WPA accepts: 8 to 63 printable ASCII
// characters, or the 64 hex digits of the derived key; empty means an open
// network.
func checkPassphrase(p string) error {
	if p == "" || isHexPSK(p) {
		return nil
	}
	if len(p) < 8 || len(p) > 63 {
		return fmt.Errorf("must be 8 to 63 characters (or 64 hex digits), got %d", len(p))
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 32 || p[i] > 126 {
			return errors.New("may hold only printable ASCII characters")
		}
	}
	return nil
}

func isHexPSK(p string) bool {
	if len(p) != 64 {
		return false
	}
	_, err := hex.DecodeString(p)
	return err == nil
}

// checkCountry accepts an ISO 3166-1 alpha-2 code.
func checkCountry(c string) error {
	if len(c) != 2 || !isUpperOrLowerAlpha(c[0]) || !isUpperOrLowerAlpha(c[1]) {
		return fmt.Errorf("%q is not a two-letter country code (GB, DE, US, ...)", c)
	}
	return nil
}

func isUpperOrLowerAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// sshKeyTypes are the public key types OpenSSH accepts in authorized_keys.
var sshKeyTypes = []string{
	"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
	"sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
}

// checkSSHKey accepts one public key line, "TYPE BASE64 [comment]", whose
// decoded blob names the same type: a pasted private key, a truncated key or
// a fingerprint is refused here rather than locking the owner out later.
func checkSSHKey(k string) error {
	if strings.Contains(k, "PRIVATE KEY") {
		return errors.New("is a private key; paste the public key (the .pub file) instead")
	}
	if strings.ContainsAny(k, "\r\n") {
		return errors.New("holds more than one line; give each key as its own list entry")
	}
	f := strings.Fields(k)
	if len(f) < 2 {
		return errors.New("is not an SSH public key line (\"ssh-ed25519 AAAA... you@laptop\")")
	}
	typ := f[0]
	known := false
	for _, t := range sshKeyTypes {
		if t == typ {
			known = true
		}
	}
	if !known {
		return fmt.Errorf("starts with %q, not a key type (%s); options before the key are not supported", clip(typ), strings.Join(sshKeyTypes[:3], ", "))
	}
	blob, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return fmt.Errorf("has a damaged key (base64: %v); copy the whole .pub line again", err)
	}
	if len(blob) < 4 {
		return errors.New("has a truncated key; copy the whole .pub line again")
	}
	n := binary.BigEndian.Uint32(blob)
	if uint64(n)+4 > uint64(len(blob)) || !bytes.Equal(blob[4:4+n], []byte(typ)) {
		return fmt.Errorf("has a key whose data is not a %s key; copy the whole .pub line again", typ)
	}
	return nil
}

// checkToken accepts a bearer token that a browser and curl can send, as
// long as the gateway asks of one it serves to the LAN (the board listens
// on 0.0.0.0): printable ASCII without spaces.
func checkToken(t string) error {
	if len(t) < config.MinTokenLength {
		return fmt.Errorf("must be at least %d characters, got %d (make one with 'openssl rand -hex 24', or leave it out and the board makes one)", config.MinTokenLength, len(t))
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= 32 || t[i] > 126 {
			return errors.New("may hold only printable ASCII characters without spaces")
		}
	}
	return nil
}
