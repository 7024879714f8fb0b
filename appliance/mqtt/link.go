package mqtt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/drivers/usb"
)

// Channel is the bus channel of MQTT requests and deliveries: cron jobs
// with channel "mqtt" and the message tool publish on topic messages.
const Channel = "mqtt"

// Sensors reads the configured sensors (a *sensor.Set).
type Sensors interface {
	Specs() []sensor.Spec
	ReadAll(ctx context.Context) []sensor.Reading
}

// Agent runs one turn for in and returns the reply text. Its error wraps
// ErrBusy when the agent has no room now (the request waits and tries
// again) and ErrStopped when the agent is shutting down (the request stays
// unacknowledged, so the broker delivers it again after the restart).
type Agent func(ctx context.Context, in bus.Inbound) (string, error)

// Diagnostics are the board's figures published for Home Assistant.
type Diagnostics struct {
	Uptime   time.Duration
	MemoryMB float64
	Ready    bool
	// NotReady names the failing readiness checks, when not Ready.
	NotReady string
	// Sessions is the number of conversations stored.
	Sessions int
}

// Memory keeps the discovery topics published last, across restarts, so
// entities that are gone can be removed.
type Memory interface {
	// DiscoveryTopics returns what SetDiscoveryTopics stored, or nil.
	DiscoveryTopics() ([]string, error)
	SetDiscoveryTopics(topics []string) error
}

// DeviceEvent is a USB device that came or went.
type DeviceEvent struct {
	Connected bool
	// Offline marks a change found at start, made while Perch was stopped.
	Offline bool
	Device  usb.Device
}

// Sentinel errors.
var (
	ErrBusy         = errors.New("mqtt: the agent is busy")
	ErrStopped      = errors.New("mqtt: the agent is stopping")
	ErrNotConnected = errors.New("mqtt: not connected to the broker")
)

// Options configure a Link.
type Options struct {
	// Config is the mqtt section as loaded: empty client_id and topic_prefix
	// get their hostname defaults here.
	Config config.MQTT
	// CAFile is mqtt.ca_file resolved to an absolute path.
	CAFile   string
	Hostname string
	// Version is Perch's version; Model the board's (BoardModel).
	Version string
	Model   string
	// PageURL returns the board's web page as seen from the network whose
	// address local is (the address the broker connection leaves from), or
	// "" when the page is not reachable from there.
	PageURL func(local net.IP) string

	Sensors Sensors
	Agent   Agent
	// OtherSessions are the first parts ("telegram", "cron") of the
	// session keys of conversations held elsewhere: a request naming one of
	// those sessions is refused.
	OtherSessions []string
	Diagnostics   func(ctx context.Context) Diagnostics
	Memory        Memory
	Log           *slog.Logger

	// Tuning; zero means the default. MinBackoff (1 s) doubles up to
	// MaxBackoff (2 min) between connection attempts. SampleEvery is how
	// often sensors are read to catch changes between publishes (a quarter
	// of the publish interval, within 5 s to 1 min). KeepAlive is 30 s.
	MinBackoff, MaxBackoff time.Duration
	SampleEvery            time.Duration
	KeepAlive              time.Duration
}

// Link flow control and limits.
const (
	// receiveMaximum bounds the QoS 1 requests the broker hands over before
	// the board has answered them; the rest wait on the broker.
	receiveMaximum = 8
	// maxQoS0Requests bounds QoS 0 requests in progress, which the broker
	// does not hold back; more are dropped with a log line (QoS 0 is "at
	// most once"; QoS 1 requests wait on the broker instead).
	maxQoS0Requests = 8
	// maxPacketSize is the largest packet the broker may send the board:
	// bigger requests are dropped by the broker rather than buffered here.
	maxPacketSize = 256 << 10
	// sessionExpiry keeps the broker's session (subscriptions, requests not
	// yet acknowledged) over a restart or an upgrade of the board.
	sessionExpiry = 3600
	// publishTimeout bounds one publish or subscribe.
	publishTimeout = 10 * time.Second
)

// Link is the connection to the broker. Create it with New; it does
// nothing until Start.
type Link struct {
	opts     Options
	cfg      config.MQTT // with defaults filled in
	broker   *url.URL
	tlsCfg   *tls.Config
	log      *slog.Logger
	topics   topics
	interval time.Duration
	sample   time.Duration

	mu sync.Mutex
	cm *autopaho.ConnectionManager
	st linkState

	up    chan struct{} // a connection came up (buffered: one pending)
	birth chan struct{} // Home Assistant came online
	usbCh chan DeviceEvent

	cancel   context.CancelFunc
	loopDone chan struct{}

	reqMu    sync.Mutex
	requests map[string]*request // QoS 1 requests by packet id and content
	stopping bool
	reqWG    sync.WaitGroup
	qos0     chan struct{}
	reqCtx   context.Context

	pub publisher // owned by the run loop
}

// New checks the options and prepares the link; a CA file that cannot be
// read is an error naming mqtt.ca_file. It connects to nothing.
func New(opts Options) (*Link, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
	}
	cfg := opts.Config.Resolved(opts.Hostname)
	if cfg.DiscoveryPrefix == "" {
		cfg.DiscoveryPrefix = "homeassistant"
	}
	if cfg.PublishIntervalSeconds <= 0 {
		cfg.PublishIntervalSeconds = 60
	}
	u, err := config.ParseBroker(cfg.Broker)
	if err != nil {
		return nil, fmt.Errorf("mqtt.broker: %w", err)
	}
	l := &Link{
		opts:     opts,
		cfg:      cfg,
		broker:   u,
		log:      opts.Log.With("service", "mqtt"),
		topics:   newTopics(cfg),
		interval: time.Duration(cfg.PublishIntervalSeconds) * time.Second,
		up:       make(chan struct{}, 1),
		birth:    make(chan struct{}, 1),
		usbCh:    make(chan DeviceEvent, 32),
		requests: map[string]*request{},
		qos0:     make(chan struct{}, maxQoS0Requests),
		st:       linkState{state: "not started"},
	}
	l.sample = opts.SampleEvery
	if l.sample <= 0 {
		l.sample = min(max(l.interval/4, 5*time.Second), time.Minute)
	}
	if u.Scheme == "mqtts" || u.Scheme == "wss" {
		l.tlsCfg = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		if opts.CAFile != "" {
			pem, err := os.ReadFile(opts.CAFile)
			if err != nil {
				return nil, fmt.Errorf("mqtt.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("mqtt.ca_file: %s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", opts.CAFile)
			}
			l.tlsCfg.RootCAs = pool
		}
	}
	l.pub = newPublisher(l)
	if len(l.pub.specs) == 0 && opts.SampleEvery <= 0 {
		l.sample = l.interval // nothing to watch between publishes
	}
	return l, nil
}

// Name is the bus channel the link serves.
func (l *Link) Name() string { return Channel }

// Start begins connecting in the background and returns at once: a broker
// that is away or refuses the login never stops the gateway; Check says
// why the link is down.
func (l *Link) Start(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return errors.New("mqtt: already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.reqCtx = ctx
	l.loopDone = make(chan struct{})
	// The connection has its own lifetime: Stop still publishes "offline"
	// after the loop and requests (ctx) are cancelled, then disconnects.
	cm, err := autopaho.NewConnection(context.Background(), l.clientConfig())
	if err != nil {
		cancel()
		return fmt.Errorf("mqtt: %w", err)
	}
	l.cm = cm
	l.st.state = "connecting"
	l.st.since = time.Now()
	go l.run(ctx)
	l.log.Info("connecting to the MQTT broker", "broker", l.broker.String(), "client_id", l.cfg.ClientID, "topics", l.cfg.TopicPrefix)
	return nil
}

// Stop marks the board offline, disconnects cleanly (so the broker keeps
// the last will unsent) and waits for the link's goroutines. Requests still
// unanswered stay unacknowledged: the broker delivers them again at the
// next start.
func (l *Link) Stop(ctx context.Context) error {
	l.mu.Lock()
	cm, cancel := l.cm, l.cancel
	l.mu.Unlock()
	if cancel == nil {
		return nil
	}
	l.reqMu.Lock()
	l.stopping = true
	l.reqMu.Unlock()
	// Stop the run loop first, so nothing publishes after "offline".
	cancel()
	<-l.loopDone
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	if _, err := cm.Publish(pctx, &paho.Publish{Topic: l.topics.status, Payload: []byte(payloadOffline), QoS: 1, Retain: true}); err != nil {
		l.log.Debug("could not publish offline at stop; the broker's last will says it", "err", err)
	}
	pcancel()
	var errs []error
	if err := cm.Disconnect(ctx); err != nil {
		errs = append(errs, fmt.Errorf("mqtt: disconnect: %w", err))
	}
	done := make(chan struct{})
	go func() { l.reqWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("mqtt: stop: requests still running: %w", ctx.Err()))
	}
	l.mu.Lock()
	l.st.state, l.st.connected, l.st.since = "stopped", false, time.Now()
	l.mu.Unlock()
	return errors.Join(errs...)
}

// Send publishes an outbound message (a cron delivery, the message tool)
// on <prefix>/messages as {"chat_id", "text"}, waiting for the connection
// while ctx allows.
func (l *Link) Send(ctx context.Context, m bus.Outbound) error {
	cm := l.conn()
	if cm == nil {
		return ErrNotConnected
	}
	if err := cm.AwaitConnection(ctx); err != nil {
		return fmt.Errorf("%w: %v", ErrNotConnected, err)
	}
	payload := mustJSON(outMessage{ChatID: m.ChatID, Text: m.Text})
	return l.publish(ctx, l.topics.messages, payload, 1, false, nil)
}

// USB reports a USB device coming or going; it never blocks (the devices
// service calls it). Events while disconnected wait, a few, for the
// connection.
func (l *Link) USB(ev DeviceEvent) {
	select {
	case l.usbCh <- ev:
	default:
		l.log.Warn("USB event not published: too many waiting", "device", ev.Device.String())
	}
}

func (l *Link) conn() *autopaho.ConnectionManager {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cm
}

// publish sends one message, waiting for the broker's acknowledgement at
// QoS 1. A refusal (an ACL) is kept for Check.
// errRefused marks a publish the broker answered with a failure reason
// (not authorized, quota, a topic it does not take).
var errRefused = errors.New("refused by the broker")

// refusedError is a publish the broker refused; it matches errRefused.
type refusedError struct{ topic, reason string }

func (e *refusedError) Error() string {
	return fmt.Sprintf("mqtt: publish to %s refused: %s", e.topic, e.reason)
}

func (e *refusedError) Is(target error) bool { return target == errRefused }

// maxRefusals bounds the tries of an answer the broker keeps refusing.
const maxRefusals = 3

func (l *Link) publish(ctx context.Context, topic string, payload []byte, qos byte, retain bool, props *paho.PublishProperties) error {
	cm := l.conn()
	if cm == nil {
		return ErrNotConnected
	}
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	resp, err := cm.Publish(pctx, &paho.Publish{Topic: topic, Payload: payload, QoS: qos, Retain: retain, Properties: props})
	switch {
	case err == nil:
		l.clearRefusal(topic)
		return nil
	case errors.Is(err, autopaho.ConnectionDownError):
		return ErrNotConnected
	case resp != nil && resp.ReasonCode >= 0x80:
		l.refused("publishing to "+topic, resp.ReasonCode)
		return &refusedError{topic: topic, reason: reasonText(resp.ReasonCode)}
	}
	return fmt.Errorf("mqtt: publish to %s: %w", topic, err)
}
