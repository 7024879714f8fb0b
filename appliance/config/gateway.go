package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// validate checks the gateway keys that need more than a range.
func (g *Gateway) validate(bad func(key, format string, a ...any)) {
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
