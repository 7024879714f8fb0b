package mqtt

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/perchhq/perch/drivers/sensor"
)

// publisher is the run loop's state: what was published last, to publish
// again only what changed between intervals. Only the run loop touches it.
type publisher struct {
	specs   []sensor.Spec
	slugs   map[string]string
	pageURL string
	// announced are the discovery topics published (kept in Memory too).
	announced []string

	values   map[string]float64 // by state topic
	avail    map[string]bool    // by sensor slug
	lastFull time.Time
	usb      []DeviceEvent // waiting for a connection
}

func newPublisher(l *Link) publisher {
	p := publisher{values: map[string]float64{}, avail: map[string]bool{}}
	if l.opts.Sensors != nil {
		p.specs = l.opts.Sensors.Specs()
	}
	p.slugs = sensorSlugs(p.specs)
	return p
}

// maxWaitingUSB bounds the USB events kept while disconnected.
const maxWaitingUSB = 16

// run publishes while the link lives: everything after each (re)connection
// and when Home Assistant comes online, sensor changes every sample period,
// all states every publish interval, USB events as they come.
func (l *Link) run(ctx context.Context) {
	defer close(l.loopDone)
	tick := time.NewTicker(l.sample)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.up:
			l.onConnect(ctx)
		case <-l.birth:
			l.log.Info("Home Assistant came online; publishing discovery and states again")
			if err := l.publishDiscovery(ctx); err == nil {
				l.publishStates(ctx, true)
			}
		case ev := <-l.usbCh:
			l.pub.usb = append(l.pub.usb, ev)
			if n := len(l.pub.usb); n > maxWaitingUSB {
				l.log.Warn("USB events dropped while the broker is away", "dropped", n-maxWaitingUSB)
				l.pub.usb = l.pub.usb[n-maxWaitingUSB:]
			}
			l.flushUSB(ctx)
		case <-tick.C:
			if l.unsubscribed() {
				l.subscribe(ctx)
			}
			l.publishStates(ctx, time.Since(l.pub.lastFull) >= l.interval-l.sample/2)
		}
	}
}

// onConnect subscribes, says the board is online, and publishes discovery,
// states and the USB events that waited. A failure (the connection dropped
// again) leaves the rest to the next connection.
func (l *Link) onConnect(ctx context.Context) {
	if l.opts.PageURL != nil {
		l.pub.pageURL = l.opts.PageURL(l.localIP(ctx))
	}
	if err := l.subscribe(ctx); errors.Is(err, ErrNotConnected) {
		return
	}
	if err := l.publish(ctx, l.topics.status, []byte(payloadOnline), 1, true, nil); errors.Is(err, ErrNotConnected) {
		return
	}
	if err := l.publishDiscovery(ctx); errors.Is(err, ErrNotConnected) {
		return
	}
	l.publishStates(ctx, true)
	l.flushUSB(ctx)
}

func (l *Link) subscribe(ctx context.Context) error {
	cm := l.conn()
	if cm == nil {
		return ErrNotConnected
	}
	l.mu.Lock()
	gen := l.st.gen
	l.mu.Unlock()
	subs := []paho.SubscribeOptions{
		// A request left retained on the broker is not a new one: it was
		// answered again at every start.
		{Topic: l.topics.request, QoS: 1, RetainHandling: 2},
		{Topic: l.topics.haLive, QoS: 1},
	}
	sctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	sa, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: subs})
	if sa != nil {
		for i, code := range sa.Reasons {
			if code >= 0x80 && i < len(subs) {
				l.refused("subscribing to "+subs[i].Topic, code)
			}
		}
	}
	if err != nil {
		if sa == nil {
			l.log.Warn("MQTT subscribe failed", "err", err)
			return ErrNotConnected
		}
		return err
	}
	l.mu.Lock()
	l.st.subscribed = l.st.connected && l.st.gen == gen
	l.mu.Unlock()
	return nil
}

// unsubscribed reports whether the link is connected but its
// subscriptions were not granted (a subscribe that timed out): they are
// asked for again at the next sample instead of at the next connection.
func (l *Link) unsubscribed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.connected && !l.st.subscribed && len(l.st.refusals) == 0
}

// publishStates reads the sensors and publishes their values and
// availability, and the diagnostics: everything when full, else only what
// changed by more than its step.
func (l *Link) publishStates(ctx context.Context, full bool) {
	if cm := l.conn(); cm == nil {
		return
	}
	l.mu.Lock()
	connected := l.st.connected
	l.mu.Unlock()
	if !connected {
		return
	}
	p := &l.pub
	n := 0
	if l.opts.Sensors != nil && len(p.specs) > 0 {
		for _, r := range l.opts.Sensors.ReadAll(ctx) {
			slug, ok := p.slugs[r.Name]
			if !ok {
				continue
			}
			ok = r.Error == ""
			if was, seen := p.avail[slug]; full || !seen || was != ok {
				payload := payloadOffline
				if ok {
					payload = payloadOnline
				}
				if err := l.publish(ctx, l.topics.sensorAvailability(slug), []byte(payload), 1, true, nil); err != nil {
					return
				}
				p.avail[slug] = ok
				n++
			}
			for _, v := range r.Values {
				topic := l.topics.sensorValue(slug, v.Quantity)
				if last, seen := p.values[topic]; !full && seen && !moved(v.Quantity, last, v.Value) {
					continue
				}
				if err := l.publish(ctx, topic, []byte(strconv.FormatFloat(v.Value, 'f', -1, 64)), 0, false, nil); err != nil {
					return
				}
				p.values[topic] = v.Value
				n++
			}
		}
	}
	// Diagnostics only with the interval: working them out runs every
	// readiness check, too much to do at each sample.
	if l.opts.Diagnostics != nil && full {
		d := l.opts.Diagnostics(ctx)
		payload := mustJSON(map[string]any{
			"uptime": int64(d.Uptime / time.Second), "memory_mb": math.Round(d.MemoryMB*10) / 10,
			"ready": d.Ready, "not_ready": d.NotReady, "sessions": d.Sessions,
		})
		if err := l.publish(ctx, l.topics.diagnostics, payload, 0, false, nil); err != nil {
			return
		}
		n++
	}
	if full {
		p.lastFull = time.Now()
	}
	l.mu.Lock()
	l.st.published += uint64(n)
	l.mu.Unlock()
}

// moved reports whether a value moved from last to next by its step or
// more (with room for the float error of 21.7-21.5 < 0.2).
func moved(quantity string, last, next float64) bool {
	return math.Abs(next-last)+1e-9 >= step(quantity, last)
}

// step is how far a value must move to be published before the interval:
// about what a person would notice on a dashboard, and above the parts'
// noise.
func step(quantity string, last float64) float64 {
	switch quantity {
	case sensor.Temperature:
		return 0.2
	case sensor.Humidity:
		return 1
	case sensor.Pressure:
		return 0.5
	case sensor.Illuminance:
		return max(1, 0.05*math.Abs(last))
	}
	return math.SmallestNonzeroFloat64
}

// usbPayload is a USB event for Home Assistant: event_type for the event
// entity, the rest as its attributes.
type usbPayload struct {
	EventType    string `json:"event_type"`
	Device       string `json:"device"`
	ID           string `json:"id"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Product      string `json:"product,omitempty"`
	Serial       string `json:"serial,omitempty"`
	Port         string `json:"port"`
	// WhileStopped marks a change made while Perch was not running.
	WhileStopped bool `json:"while_stopped,omitempty"`
}

// flushUSB publishes the USB events waiting, in order, while connected.
func (l *Link) flushUSB(ctx context.Context) {
	p := &l.pub
	for len(p.usb) > 0 {
		ev := p.usb[0]
		kind, trigger := "disconnected", l.topics.usbRemoved
		if ev.Connected {
			kind, trigger = "connected", l.topics.usbConnected
		}
		d := ev.Device
		payload := mustJSON(usbPayload{EventType: kind, Device: d.Name(), ID: d.ID(), Manufacturer: d.Manufacturer,
			Product: d.Product, Serial: d.Serial, Port: d.Port, WhileStopped: ev.Offline})
		if err := l.publish(ctx, l.topics.usbEvent, payload, 1, false, nil); errors.Is(err, ErrNotConnected) {
			return
		}
		if err := l.publish(ctx, trigger, payload, 1, false, nil); errors.Is(err, ErrNotConnected) {
			return
		}
		p.usb = p.usb[1:]
	}
	p.usb = nil
}
