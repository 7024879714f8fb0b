package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// MinTokenLength is the shortest gateway.api_token accepted when the
// gateway listens beyond loopback. perch onboard writes 32 hex digits;
// even at the gateway's limit on wrong tokens, 24 random characters are
// out of reach of guessing, and a short password is not.
const MinTokenLength = 24

// validate checks the gateway keys that need more than a range.
func (g *Gateway) validate(bad func(key, format string, a ...any)) {
	if n := len(g.APIToken.Value()); n > 0 && n < MinTokenLength && !IsLoopbackHost(g.Host) {
		bad("gateway.api_token", "is %d characters; a gateway that listens beyond this machine (gateway.host %q) needs at least %d "+
			"so that it cannot be guessed: run 'perch onboard --force' for a new config with a random one (it replaces the file), "+
			"or set one made by 'openssl rand -hex 24'", n, g.Host, MinTokenLength)
	}
	for i, h := range g.AllowedHosts {
		if !isHostName(h) {
			bad(fmt.Sprintf("gateway.allowed_hosts[%d]", i), "%q is not a host name or address; give the name alone, "+
				`as the browser's address bar shows it, e.g. "perch.example.net" (no scheme, port, path or wildcard)`, h)
		}
	}
}

// isHostName accepts a DNS-style name (letters, digits, '-', '_', '.') or
// an IP address, IPv6 with or without brackets.
func isHostName(h string) bool {
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err == nil {
		return true
	}
	if h == "" || len(h) > 253 || strings.Trim(h, ".") == "" {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
