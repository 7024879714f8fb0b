package mqtt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
)

// linkState is what Check and Status report; guarded by Link.mu.
type linkState struct {
	state     string // not started, connecting, connected, down, stopped
	connected bool
	// subscribed is set once this connection's subscriptions were
	// granted: until then a request published is not delivered to the
	// board, so the link is not ready.
	subscribed bool
	// gen counts connections, so a subscription granted on one that has
	// dropped since does not make the next ready.
	gen   uint64
	since time.Time // of the current state
	upAt  time.Time // when the last connection came up
	// problem is why the link is down, with the key to fix when it is a
	// setting (login, certificate, client id).
	problem    string
	lastErr    string
	refusals   map[string]string // what the broker refused (its ACL), by action
	reconnects int
	flaps      int // connections in a row that dropped within flapWindow (for the backoff)
	// drops counts the same for Check: two or more short-lived connections
	// in a row are a broker dropping the board, most often for a twin with
	// the same client id.
	drops    int
	entities int
	answered uint64
	// redelivered counts requests the broker handed over again while
	// their turn ran or after it was answered: acknowledged, not rerun.
	redelivered uint64
	published   uint64
}

// flapWindow: a connection that drops sooner than this (a twin board with
// the same client_id takes it over, a broker that drops the board at once)
// is followed by a growing wait, as a failed attempt is, rather than an
// immediate reconnect that would fight the other client forever.
const flapWindow = 30 * time.Second

func (l *Link) clientConfig() autopaho.ClientConfig {
	keepAlive := l.opts.KeepAlive
	if keepAlive <= 0 {
		keepAlive = 30 * time.Second
	}
	cc := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{l.broker},
		TlsCfg:                        l.tlsCfg,
		KeepAlive:                     uint16(keepAlive / time.Second),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         sessionExpiry,
		ReconnectBackoff:              l.backoff,
		ConnectTimeout:                10 * time.Second,
		ConnectUsername:               l.cfg.Username,
		ConnectPassword:               []byte(l.cfg.Password.Value()),
		// The last will: the broker says "offline" for a board that lost
		// power or network; no delay, so Home Assistant shows it at once.
		WillMessage:    &paho.WillMessage{Topic: l.topics.status, Payload: []byte(payloadOffline), QoS: 1, Retain: true},
		WillProperties: &paho.WillProperties{},
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			rm, mps := uint16(receiveMaximum), uint32(maxPacketSize)
			cp.Properties.ReceiveMaximum = &rm
			cp.Properties.MaximumPacketSize = &mps
			return cp, nil
		},
		OnConnectionUp:   l.onConnectionUp,
		OnConnectionDown: l.onConnectionDown,
		OnConnectError:   l.onConnectError,
		ClientConfig: paho.ClientConfig{
			ClientID:                   l.cfg.ClientID,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){l.onPublish},
			EnableManualAcknowledgment: true,
			OnClientError:              l.onClientError,
			OnServerDisconnect:         l.onServerDisconnect,
		},
	}
	if l.cfg.Username == "" {
		cc.ConnectPassword = nil
	}
	return cc
}

// backoff is the wait before connection attempt n (0: the first after a
// drop, immediate unless the connection was flapping).
func (l *Link) backoff(attempt int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := attempt
	if attempt == 0 {
		if l.st.upAt.IsZero() || time.Since(l.st.upAt) >= flapWindow {
			l.st.flaps = 0
			return 0
		}
		l.st.flaps++
		n = l.st.flaps
	}
	lo, hi := l.opts.MinBackoff, l.opts.MaxBackoff
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 2 * time.Minute
	}
	d := hi
	if n < 30 && lo<<(n-1) < hi {
		d = lo << (n - 1)
	}
	// Jitter within [d/2, d]: boards that lost one broker do not all come
	// back in the same instant.
	return d/2 + rand.N(d/2+1)
}

// Connects is how many times the connection to the broker came up; the
// gateway's idle trimmer watches it (a connection's set-up and the
// discovery it publishes are start-up work, whenever they happen).
func (l *Link) Connects() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.upAt.IsZero() {
		return 0
	}
	return uint64(l.st.reconnects) + 1
}

func (l *Link) onConnectionUp(_ *autopaho.ConnectionManager, ca *paho.Connack) {
	l.mu.Lock()
	if !l.st.upAt.IsZero() {
		l.st.reconnects++
	}
	l.st.state, l.st.connected, l.st.problem, l.st.subscribed = "connected", true, "", false
	l.st.gen++
	l.st.since, l.st.upAt = time.Now(), time.Now()
	l.mu.Unlock()
	l.log.Info("connected to the MQTT broker", "broker", l.broker.String(), "session_present", ca.SessionPresent)
	select {
	case l.up <- struct{}{}:
	default:
	}
}

func (l *Link) onConnectionDown() bool {
	l.mu.Lock()
	if time.Since(l.st.upAt) < flapWindow {
		l.st.drops++
	} else {
		l.st.drops = 0
	}
	l.st.state, l.st.connected, l.st.since, l.st.subscribed = "down", false, time.Now(), false
	why := l.st.lastErr
	l.mu.Unlock()
	l.log.Warn("MQTT connection lost; reconnecting", "broker", l.broker.String(), "err", why)
	return true
}

func (l *Link) onConnectError(err error) {
	problem := l.describe(err)
	l.mu.Lock()
	repeated := problem == l.st.problem
	l.st.problem, l.st.lastErr = problem, err.Error()
	if !l.st.connected && l.st.state != "stopped" {
		l.st.state = "connecting"
	}
	l.mu.Unlock()
	if repeated {
		l.log.Debug("MQTT connection attempt failed", "problem", problem)
		return
	}
	l.log.Warn("MQTT connection attempt failed; retrying with backoff", "problem", problem)
}

func (l *Link) onClientError(err error) {
	l.mu.Lock()
	l.st.lastErr = err.Error()
	l.mu.Unlock()
}

func (l *Link) onServerDisconnect(d *paho.Disconnect) {
	why := reasonText(d.ReasonCode)
	if d.Properties != nil && d.Properties.ReasonString != "" {
		why += ": " + d.Properties.ReasonString
	}
	l.mu.Lock()
	l.st.lastErr = "the broker disconnected the board (" + why + ")"
	if d.ReasonCode == 0x8E {
		l.st.drops = max(l.st.drops, 2)
	}
	l.mu.Unlock()
}

// twinProblem is the check's message for a broker that keeps dropping the
// board soon after each login. Mosquitto closes the older of two
// connections with one client id without a reason code, so the pattern,
// not a code, tells of a twin.
func (l *Link) twinProblem() string {
	return fmt.Sprintf("the broker %s keeps closing the connection soon after each login (%d times in a row): most likely "+
		"another client took the session over with the same client_id %q (two boards with the same hostname?); "+
		"set mqtt.client_id and mqtt.topic_prefix to names of their own", l.broker, l.st.drops, l.cfg.ClientID)
}

// describe turns a connection error into what to do about it.
func (l *Link) describe(err error) string {
	b := l.broker.String()
	var ce *autopaho.ConnackError
	if errors.As(err, &ce) {
		switch ce.ReasonCode {
		case 0x86, 0x87, 0x8C:
			return fmt.Sprintf("the broker %s refused the login (%s): check mqtt.username and mqtt.password "+
				"(and that the broker's password file has the user)", b, reasonText(ce.ReasonCode))
		case 0x85:
			return fmt.Sprintf("the broker %s refused the client id %q: set mqtt.client_id to one it accepts", b, l.cfg.ClientID)
		case 0x84:
			return fmt.Sprintf("the broker %s does not speak MQTT 5, which Perch needs (Mosquitto 1.6 or later does)", b)
		}
		return fmt.Sprintf("the broker %s refused the connection (%s)", b, reasonText(ce.ReasonCode))
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ua):
		if l.opts.CAFile != "" {
			return fmt.Sprintf("the certificate of %s is not signed by the CA in mqtt.ca_file (%s); point mqtt.ca_file at the CA that signed it", b, l.opts.CAFile)
		}
		return fmt.Sprintf("cannot verify the certificate of %s: it is signed by an unknown authority; set mqtt.ca_file to the PEM file of the CA that signed it", b)
	case errors.As(err, &he):
		return fmt.Sprintf("the certificate of %s is not for %q (%v); use a broker address the certificate names in mqtt.broker", b, l.broker.Hostname(), he.Error())
	case errors.As(err, &ci):
		return fmt.Sprintf("the certificate of %s is not valid (%v); renew it on the broker", b, ci.Error())
	case errors.As(err, &rh):
		return fmt.Sprintf("%s does not answer TLS on that port; use mqtt:// or the broker's TLS port in mqtt.broker", b)
	}
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "failed to connect to "+b+": ")
	if l.tlsCfg != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		// A plain MQTT listener drops a TLS hello as a malformed packet.
		return fmt.Sprintf("cannot connect to the broker %s: %s; if that port is not the broker's TLS listener (8883 by default), fix the port or scheme in mqtt.broker", b, msg)
	}
	return fmt.Sprintf("cannot connect to the broker %s: %s; retrying", b, msg)
}

// refused records an action the broker refused (its ACL).
func (l *Link) refused(action string, code byte) {
	user := l.cfg.Username
	if user == "" {
		user = "(anonymous)"
	}
	msg := fmt.Sprintf("the broker refused %s (%s): let user %s write %s/# and %s/# and read %s/# in the broker's ACL",
		action, reasonText(code), user, l.cfg.TopicPrefix, l.cfg.DiscoveryPrefix, l.cfg.TopicPrefix)
	l.mu.Lock()
	if l.st.refusals == nil {
		l.st.refusals = map[string]string{}
	}
	_, seen := l.st.refusals[action]
	l.st.refusals[action] = msg
	l.mu.Unlock()
	if !seen {
		l.log.Warn("MQTT broker refused an action", "problem", msg)
	}
}

func (l *Link) clearRefusal(topic string) {
	l.mu.Lock()
	delete(l.st.refusals, "publishing to "+topic)
	l.mu.Unlock()
}

// Check is the /ready check: ok only while connected and nothing was
// refused. It fails (without stopping anything) for a login the broker
// rejects, naming mqtt.username and mqtt.password, for a certificate it
// cannot verify, naming mqtt.ca_file, and while the broker is away.
func (l *Link) Check(context.Context) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.st
	flapping := st.drops >= 2 && (!st.connected || time.Since(st.upAt) < flapWindow)
	switch {
	case flapping:
		return false, l.twinProblem()
	case st.connected && len(st.refusals) > 0:
		msgs := make([]string, 0, len(st.refusals))
		for _, m := range st.refusals {
			msgs = append(msgs, m)
		}
		sort.Strings(msgs)
		return false, fmt.Sprintf("connected to %s, but %s", l.broker, strings.Join(msgs, "; "))
	case st.connected && !st.subscribed:
		return false, fmt.Sprintf("connected to %s; subscribing to %s", l.broker, l.topics.request)
	case st.connected:
		return true, fmt.Sprintf("connected to %s as %s since %s; %d Home Assistant entities under %s/; %d requests answered",
			l.broker, l.cfg.ClientID, st.since.Format(time.RFC3339), st.entities, l.cfg.DiscoveryPrefix, st.answered)
	case st.problem != "":
		return false, st.problem
	case st.state == "down":
		return false, fmt.Sprintf("connection to %s lost at %s (%s); reconnecting", l.broker, st.since.Format(time.RFC3339), st.lastErr)
	}
	switch st.state {
	case "not started", "stopped":
		return false, fmt.Sprintf("%s (broker %s)", st.state, l.broker)
	}
	return false, fmt.Sprintf("connecting to %s", l.broker)
}

// Status is the link's part of /admin/status (and the web page).
type Status struct {
	Broker          string   `json:"broker"`
	ClientID        string   `json:"client_id"`
	TopicPrefix     string   `json:"topic_prefix"`
	DiscoveryPrefix string   `json:"discovery_prefix"`
	State           string   `json:"state"`
	Connected       bool     `json:"connected"`
	Since           string   `json:"since,omitempty"`
	Problem         string   `json:"problem,omitempty"`
	Refused         []string `json:"refused,omitempty"`
	LastError       string   `json:"last_error,omitempty"`
	Reconnects      int      `json:"reconnects"`
	Entities        int      `json:"entities"`
	Answered        uint64   `json:"requests_answered"`
	Redelivered     uint64   `json:"requests_redelivered"`
	Published       uint64   `json:"published"`
}

// Status returns the link's figures; never a credential.
func (l *Link) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	out := Status{
		Broker: l.broker.String(), ClientID: l.cfg.ClientID, TopicPrefix: l.cfg.TopicPrefix,
		DiscoveryPrefix: l.cfg.DiscoveryPrefix, State: st.state, Connected: st.connected,
		Problem: st.problem, LastError: st.lastErr, Reconnects: st.reconnects, Entities: st.entities,
		Answered: st.answered, Redelivered: st.redelivered, Published: st.published,
	}
	if !st.since.IsZero() {
		out.Since = st.since.UTC().Format(time.RFC3339)
	}
	if st.drops >= 2 && (!st.connected || time.Since(st.upAt) < flapWindow) {
		out.Problem = l.twinProblem()
	}
	for _, m := range st.refusals {
		out.Refused = append(out.Refused, m)
	}
	sort.Strings(out.Refused)
	return out
}

// localIP is the address this machine uses to reach the broker: the one
// Home Assistant, beside the broker, can most likely reach the page on. A
// UDP "connection" sends nothing; it only picks the route.
func (l *Link) localIP(ctx context.Context) net.IP {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", l.broker.Host)
	if err != nil {
		return nil
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP
	}
	return nil
}

// reasonText names an MQTT 5 reason code.
func reasonText(code byte) string {
	if s, ok := reasons[code]; ok {
		return s
	}
	return fmt.Sprintf("reason code 0x%02x", code)
}

var reasons = map[byte]string{
	0x00: "success",
	0x04: "disconnect with will message",
	0x80: "unspecified error",
	0x81: "malformed packet",
	0x82: "protocol error",
	0x83: "implementation specific error",
	0x84: "unsupported protocol version",
	0x85: "client identifier not valid",
	0x86: "bad user name or password",
	0x87: "not authorized",
	0x88: "server unavailable",
	0x89: "server busy",
	0x8A: "banned",
	0x8B: "server shutting down",
	0x8C: "bad authentication method",
	0x8D: "keep alive timeout",
	0x8E: "session taken over",
	0x8F: "topic filter invalid",
	0x90: "topic name invalid",
	0x93: "receive maximum exceeded",
	0x95: "packet too large",
	0x97: "quota exceeded",
	0x99: "payload format invalid",
	0x9A: "retain not supported",
	0x9B: "QoS not supported",
	0x9C: "use another server",
	0x9D: "server moved",
	0x9F: "connection rate exceeded",
}
