package firstboot

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
)

// Banner is what the board prints on its console (screen and serial) once
// the gateway is up: where to find it, and what a person needs the first
// time. It holds the API token only when the board made it itself: then the
// console is the one place to read it, and it is no more exposed there than
// the card is to whoever holds the board.
type Banner struct {
	Hostname  string
	Port      int
	Addrs     []string // the board's LAN addresses
	SetupCode string   // the gateway's one-time setup code, when it issued one
	Token     string   // gateway.api_token when made on the board
	Problem   string   // why the boot partition's settings were not applied
}

var setupCodeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`setup_code=(\d{4}-\d{4})`) })

// SetupCode returns the last setup code in the gateway's log text.
func SetupCode(log string) string {
	m := setupCodeRE().FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// Text is the banner for /dev/console.
func (b Banner) Text() string {
	var s strings.Builder
	s.WriteString("\n")
	fmt.Fprintf(&s, "Perch is running: http://%s.local:%d/\n", b.Hostname, b.Port)
	for _, a := range b.Addrs {
		fmt.Fprintf(&s, "                  http://%s/\n", net.JoinHostPort(a, fmt.Sprint(b.Port)))
	}
	b.details(&s, func(v string) string { return v })
	s.WriteString("\n")
	return s.String()
}

// Issue is the banner for agetty's issue directory: \n and \4 are agetty's
// own escapes for the host name and the current IPv4 address, so the login
// prompt stays right when the address changes; everything else is escaped.
func (b Banner) Issue() string {
	var s strings.Builder
	fmt.Fprintf(&s, "Perch: http://\\n.local:%d/  http://\\4:%d/\n", b.Port, b.Port)
	b.details(&s, issueEscape)
	s.WriteString("\n")
	return s.String()
}

func (b Banner) details(s *strings.Builder, esc func(string) string) {
	if b.SetupCode != "" {
		fmt.Fprintf(s, "Setup code: %s  (open the page and enter it to choose a language model)\n", esc(b.SetupCode))
	}
	if b.Token != "" {
		fmt.Fprintf(s, "API token:  %s  (the page asks for it once)\n", esc(b.Token))
	}
	if b.Problem != "" {
		fmt.Fprintf(s, "The boot partition's settings were NOT applied:\n  %s\n", esc(strings.ReplaceAll(b.Problem, "\n", "\n  ")))
		s.WriteString("Fix the file on the card's boot partition and restart the board.\n")
	}
}

func issueEscape(v string) string { return strings.ReplaceAll(v, `\`, `\\`) }

// LANAddrs lists the addresses of the interfaces that are up, IPv4 first,
// without loopback and link-local IPv6.
func LANAddrs() []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var v4, v6 []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			if ipn.IP.To4() != nil {
				v4 = append(v4, ipn.IP.String())
			} else {
				v6 = append(v6, ipn.IP.String())
			}
		}
	}
	return append(v4, v6...)
}
