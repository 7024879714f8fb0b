package mqtttest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Message is one message a Client received.
type Message struct {
	Topic           string
	Payload         []byte
	Retain          bool
	QoS             byte
	CorrelationData []byte
	ContentType     string
}

// Client is an MQTT 5 client for tests: it records every message on the
// topics it subscribed to.
type Client struct {
	c *paho.Client

	mu     sync.Mutex
	msgs   []Message
	notify chan struct{}
}

var clientSeq atomic.Int64

// Connect connects to brokerURL (mqtt://host:port) as user (empty for
// anonymous) and subscribes to filters at QoS 1; it disconnects when the
// test ends.
func Connect(t testing.TB, brokerURL, user, password string, filters ...string) *Client {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("mqtttest: dial %s: %v", u.Host, err)
	}
	c := &Client{notify: make(chan struct{}, 1)}
	id := fmt.Sprintf("mqtttest-%d", clientSeq.Add(1))
	c.c = paho.NewClient(paho.ClientConfig{
		ClientID: id,
		Conn:     conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			p := pr.Packet
			m := Message{Topic: p.Topic, Payload: bytes.Clone(p.Payload), Retain: p.Retain, QoS: p.QoS}
			if p.Properties != nil {
				m.CorrelationData, m.ContentType = bytes.Clone(p.Properties.CorrelationData), p.Properties.ContentType
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
			select {
			case c.notify <- struct{}{}:
			default:
			}
			return true, nil
		}},
	})
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}
	if user != "" {
		cp.Username, cp.UsernameFlag = user, true
		cp.Password, cp.PasswordFlag = []byte(password), true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.c.Connect(ctx, cp); err != nil {
		t.Fatalf("mqtttest: connect as %q: %v", user, err)
	}
	t.Cleanup(c.Close)
	if len(filters) > 0 {
		subs := make([]paho.SubscribeOptions, len(filters))
		for i, f := range filters {
			subs[i] = paho.SubscribeOptions{Topic: f, QoS: 1}
		}
		if _, err := c.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
			t.Fatalf("mqtttest: subscribe %v: %v", filters, err)
		}
	}
	return c
}

// Close disconnects (again: harmless).
func (c *Client) Close() {
	c.c.Disconnect(&paho.Disconnect{ReasonCode: 0})
}

// Publish sends a message and waits for the broker's acknowledgement at
// QoS 1.
func (c *Client) Publish(t testing.TB, topic string, payload []byte, qos byte, retain bool, props *paho.PublishProperties) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.c.Publish(ctx, &paho.Publish{Topic: topic, Payload: payload, QoS: qos, Retain: retain, Properties: props}); err != nil {
		t.Fatalf("mqtttest: publish to %s: %v", topic, err)
	}
}

// Messages returns the messages received so far on topic ("" for all).
func (c *Client) Messages(topic string) []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Message
	for _, m := range c.msgs {
		if topic == "" || m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// Reset forgets the messages received so far.
func (c *Client) Reset() {
	c.mu.Lock()
	c.msgs = nil
	c.mu.Unlock()
}

// Wait returns the first message (received before or during the wait) for
// which match is true, or fails the test after timeout.
func (c *Client) Wait(t testing.TB, timeout time.Duration, what string, match func(Message) bool) Message {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range c.Messages("") {
			if match(m) {
				return m
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			var seen []string
			for _, m := range c.Messages("") {
				seen = append(seen, fmt.Sprintf("%s %q", m.Topic, clip(m.Payload)))
			}
			t.Fatalf("mqtttest: no %s after %s; received:\n%s", what, timeout, strings.Join(seen, "\n"))
		}
		select {
		case <-c.notify:
		case <-time.After(min(left, 100*time.Millisecond)):
		}
	}
}

// WaitPayload waits for a message on topic with exactly payload.
func (c *Client) WaitPayload(t testing.TB, timeout time.Duration, topic, payload string) Message {
	t.Helper()
	return c.Wait(t, timeout, fmt.Sprintf("%q on %s", payload, topic), func(m Message) bool {
		return m.Topic == topic && string(m.Payload) == payload
	})
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
