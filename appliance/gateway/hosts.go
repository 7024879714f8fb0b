package gateway

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The board's addresses and hostname are read again at most every
// hostRefresh, and only when a request names a host not known yet (an
// address DHCP just gave) or the last reading is older than hostMaxAge. So
// a request that names a known host costs no system call, and a flood of
// foreign names costs one reading per hostRefresh.
const (
	hostRefresh = 2 * time.Second
	hostMaxAge  = time.Minute
)

// hostPolicy decides which Host header values name this board, against DNS
// rebinding: a page of the attacker's site, whose name the attacker
// re-points at the board's address, makes the browser send the attacker's
// host name. IP literals cannot be re-pointed, but only the board's own are
// taken, so that a Host naming some other machine is refused as well.
type hostPolicy struct {
	names map[string]bool     // configured names, lower case, no final dot
	ips   map[netip.Addr]bool // configured addresses

	snap atomic.Pointer[hostSnapshot]
	mu   sync.Mutex // one reading at a time

	// Where the board's names come from; tests replace them.
	addrs    func() ([]net.Addr, error)
	hostname func() (string, error)
	now      func() time.Time
}

// hostSnapshot is one reading of the board's hostname and addresses.
type hostSnapshot struct {
	names map[string]bool
	ips   map[netip.Addr]bool
	at    time.Time
}

func (s *hostSnapshot) has(name string, ip netip.Addr) bool {
	if ip.IsValid() {
		return s.ips[ip]
	}
	return s.names[name]
}

// newHostPolicy takes gateway.host and gateway.allowed_hosts.
func newHostPolicy(gwHost string, allowed []string) *hostPolicy {
	p := &hostPolicy{names: map[string]bool{}, ips: map[netip.Addr]bool{},
		addrs: net.InterfaceAddrs, hostname: os.Hostname, now: time.Now}
	for _, h := range append([]string{gwHost}, allowed...) {
		name, ip, ok := parseHost(h)
		switch {
		case !ok:
		case ip.IsValid():
			p.ips[ip] = true
		default:
			p.names[name] = true
		}
	}
	return p
}

// allowed reports whether host (a Host header: name or address, with an
// optional port) names this board.
func (p *hostPolicy) allowed(host string) bool {
	if host == "" {
		return true // HTTP/1.0 without Host: not a browser
	}
	name, ip, ok := parseHost(host)
	if !ok {
		return false
	}
	if ip.IsValid() {
		// 0.0.0.0 and :: reach this machine like loopback does.
		if ip.IsLoopback() || ip.IsUnspecified() || p.ips[ip] {
			return true
		}
	} else if name == "localhost" || strings.HasSuffix(name, ".localhost") || p.names[name] {
		// *.localhost resolves to loopback in browsers (RFC 6761).
		return true
	}
	now := p.now()
	snap := p.snap.Load()
	if snap != nil && now.Sub(snap.at) < hostMaxAge && snap.has(name, ip) {
		return true
	}
	if snap == nil || now.Sub(snap.at) >= hostRefresh {
		snap = p.refresh(now)
	}
	return snap.has(name, ip)
}

// refresh reads the board's hostname and addresses, unless another request
// just did.
func (p *hostPolicy) refresh(now time.Time) *hostSnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.snap.Load()
	if old != nil && now.Sub(old.at) < hostRefresh {
		return old
	}
	s := &hostSnapshot{names: map[string]bool{}, ips: map[netip.Addr]bool{}, at: now}
	if h, err := p.hostname(); err == nil {
		if name, _, ok := parseHost(h); ok && name != "" {
			short, _, _ := strings.Cut(name, ".")
			s.names[name], s.names[short], s.names[short+".local"] = true, true, true
		}
	} else if old != nil {
		s.names = old.names
	}
	if addrs, err := p.addrs(); err == nil {
		for _, a := range addrs {
			var ip net.IP
			switch a := a.(type) {
			case *net.IPNet:
				ip = a.IP
			case *net.IPAddr:
				ip = a.IP
			}
			if ip, ok := netip.AddrFromSlice(ip); ok {
				s.ips[ip.Unmap()] = true
			}
		}
	} else if old != nil {
		s.ips = old.ips // keep what was known rather than refuse the board's own address
	}
	p.snap.Store(s)
	return s
}

// parseHost splits a Host value into a lower-case name without its final
// dot, or an address without zone; ok is false for what is neither.
func parseHost(h string) (name string, ip netip.Addr, ok bool) {
	if h == "" {
		return "", netip.Addr{}, false
	}
	if h[0] == '[' {
		end := strings.IndexByte(h, ']')
		if end < 0 || !validPort(h[end+1:]) {
			return "", netip.Addr{}, false
		}
		a, err := netip.ParseAddr(h[1:end])
		if err != nil {
			return "", netip.Addr{}, false
		}
		return "", a.WithZone("").Unmap(), true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if strings.IndexByte(h[:i], ':') >= 0 { // a bare IPv6 address
			a, err := netip.ParseAddr(h)
			if err != nil {
				return "", netip.Addr{}, false
			}
			return "", a.WithZone("").Unmap(), true
		}
		if !validPort(h[i:]) {
			return "", netip.Addr{}, false
		}
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return "", a.Unmap(), true
	}
	if !validName(h) {
		return "", netip.Addr{}, false
	}
	return strings.ToLower(h), netip.Addr{}, true
}

// validPort accepts "" or ":" followed by digits.
func validPort(s string) bool {
	if s == "" {
		return true
	}
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validName accepts DNS-style names: letters, digits, '-', '_' and '.'.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
