package tools

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// ErrBlockedAddress is wrapped by web_fetch's refusal to connect to a
// loopback, private, link-local or otherwise non-public address.
var ErrBlockedAddress = errors.New("address not allowed")

// dialGuard decides which addresses web_fetch may connect to. It runs as the
// net.Dialer's Control hook, which sees each address after DNS resolution and
// before the connection is made: a name that resolves to 127.0.0.1 (DNS
// rebinding included) and a redirect to a private host are caught by the
// same check as a literal address.
type dialGuard struct {
	allowPrivate bool
	allow        []netip.Prefix
}

func (g dialGuard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot check dial address %q", ErrBlockedAddress, address)
	}
	return g.check(ap.Addr())
}

func (g dialGuard) check(ip netip.Addr) error {
	if g.allowPrivate {
		return nil
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range g.allow {
		if p.Contains(ip) {
			return nil
		}
	}
	if reason := nonPublic(ip); reason != "" {
		return &blockedError{addr: ip, reason: reason}
	}
	return nil
}

// blockedError is the guard's refusal; it matches ErrBlockedAddress.
type blockedError struct {
	addr   netip.Addr
	reason string
}

func (e *blockedError) Error() string {
	article := "a"
	if strings.IndexByte("aeiou", e.reason[0]) >= 0 {
		article = "an"
	}
	return fmt.Sprintf("%s is %s %s address", e.addr, article, e.reason)
}

func (e *blockedError) Is(target error) bool { return target == ErrBlockedAddress }

// Ranges that are not the public internet, beyond what netip's predicates
// name.
var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	reserved4   = []netip.Prefix{
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),    // documentation
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("198.51.100.0/24"), // documentation
		netip.MustParsePrefix("203.0.113.0/24"),  // documentation
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	}
	reserved6 = []netip.Prefix{
		netip.MustParsePrefix("::/96"),         // IPv4-compatible (deprecated)
		netip.MustParsePrefix("100::/64"),      // discard
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("fec0::/10"),     // site-local (deprecated)
	}
	// Prefixes that embed an IPv4 address, which is checked in turn.
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// nonPublic names the kind of a non-public address, or returns "" for a
// public one.
func nonPublic(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	if ip.Is4() {
		switch {
		case cgnat.Contains(ip):
			return "shared (CGNAT)"
		case thisNetwork.Contains(ip):
			return "this-network"
		}
		for _, p := range reserved4 {
			if p.Contains(ip) {
				return "reserved"
			}
		}
		return ""
	}
	for _, p := range reserved6 {
		if p.Contains(ip) {
			return "reserved"
		}
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		return embedded(netip.AddrFrom4([4]byte(b[12:16])))
	case sixTo4.Contains(ip):
		return embedded(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return ""
}

func embedded(v4 netip.Addr) string {
	if r := nonPublic(v4); r != "" {
		return r + " (embedded in IPv6)"
	}
	return ""
}
