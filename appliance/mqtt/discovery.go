package mqtt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/drivers/sensor"
)

// Availability payloads (Home Assistant's defaults).
const (
	payloadOnline  = "online"
	payloadOffline = "offline"
)

// topics are the link's topic names.
type topics struct {
	prefix, disc string
	node         string // discovery node id, from the client id

	status, diagnostics                 string
	usbEvent, usbConnected, usbRemoved  string
	request, response, messages, haLive string
}

func newTopics(cfg config.MQTT) topics {
	p := cfg.TopicPrefix
	return topics{
		prefix: p, disc: cfg.DiscoveryPrefix, node: objectID(cfg.ClientID),
		status: p + "/status", diagnostics: p + "/diagnostics",
		usbEvent: p + "/usb/event", usbConnected: p + "/usb/connected", usbRemoved: p + "/usb/disconnected",
		request: p + "/agent/request", response: p + "/agent/response", messages: p + "/messages",
		haLive: cfg.DiscoveryPrefix + "/status",
	}
}

func (t topics) sensorValue(slug, quantity string) string {
	return t.prefix + "/sensor/" + slug + "/" + quantity
}

func (t topics) sensorAvailability(slug string) string {
	return t.prefix + "/sensor/" + slug + "/availability"
}

func (t topics) config(component, object string) string {
	return t.disc + "/" + component + "/" + t.node + "/" + object + "/config"
}

// objectID keeps what Home Assistant allows in discovery ids: letters,
// digits, '_' and '-'; anything else becomes '_'.
func objectID(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '-', r == '_':
			sb.WriteRune(r)
		default:
			sb.WriteByte('_')
		}
	}
	out := strings.Trim(sb.String(), "_")
	for strings.Contains(out, "__") {
		out = strings.ReplaceAll(out, "__", "_")
	}
	return out
}

// sensorSlugs names each sensor in topics and ids: its name made an
// objectID ("Living room" → living_room). Names that come out empty or
// alike ("a.b" and "a b", or names in another script) get a short hash of
// the name, so every sensor keeps topics of its own.
func sensorSlugs(specs []sensor.Spec) map[string]string {
	base := map[string]string{}
	count := map[string]int{}
	for _, sp := range specs {
		s := objectID(sp.Name)
		base[sp.Name] = s
		count[s]++
	}
	out := map[string]string{}
	for _, sp := range specs {
		s := base[sp.Name]
		if s == "" || count[s] > 1 {
			h := sha256.Sum256([]byte(sp.Name))
			s = strings.Trim(s+"_"+hex.EncodeToString(h[:3]), "_")
		}
		out[sp.Name] = s
	}
	return out
}

// haQuantity is how Home Assistant knows a quantity: its device class and
// the display precision of the value.
var haQuantity = map[string]struct {
	class     string
	precision int
}{
	sensor.Temperature: {"temperature", 1},
	sensor.Humidity:    {"humidity", 0},
	sensor.Pressure:    {"atmospheric_pressure", 1},
	sensor.Illuminance: {"illuminance", 0},
}

// entity is one discovery config.
type entity struct {
	topic  string
	config map[string]any
}

// entities lists the discovery configs of the board as configured now.
func (l *Link) entities(specs []sensor.Spec, slugs map[string]string, pageURL string) []entity {
	t := l.topics
	dev := map[string]any{
		"identifiers":  []string{t.node},
		"name":         l.cfg.ClientID,
		"manufacturer": "Perch",
		"model":        l.opts.Model,
		"sw_version":   l.opts.Version,
	}
	if pageURL != "" {
		dev["configuration_url"] = pageURL
	}
	origin := map[string]any{"name": "Perch", "sw_version": l.opts.Version}
	board := []map[string]string{{"topic": t.status}}
	with := func(c map[string]any) map[string]any {
		c["device"], c["origin"] = dev, origin
		if _, ok := c["availability"]; !ok {
			c["availability"] = board
		}
		return c
	}
	var out []entity
	for _, sp := range specs {
		slug := slugs[sp.Name]
		for _, m := range sensor.Measures(sp.Type) {
			c := map[string]any{
				"name":                sp.Name + " " + m.Quantity,
				"unique_id":           t.node + "_" + slug + "_" + m.Quantity,
				"state_topic":         t.sensorValue(slug, m.Quantity),
				"unit_of_measurement": m.Unit,
				"state_class":         "measurement",
				"availability":        append(slices.Clone(board), map[string]string{"topic": t.sensorAvailability(slug)}),
				"availability_mode":   "all",
			}
			if q, ok := haQuantity[m.Quantity]; ok {
				c["device_class"] = q.class
				c["suggested_display_precision"] = q.precision
			}
			out = append(out, entity{t.config("sensor", slug+"_"+m.Quantity), with(c)})
		}
	}
	diag := func(name, key string, extra map[string]any) map[string]any {
		c := map[string]any{
			"name":            name,
			"unique_id":       t.node + "_" + key,
			"state_topic":     t.diagnostics,
			"value_template":  "{{ value_json." + key + " }}",
			"entity_category": "diagnostic",
		}
		for k, v := range extra {
			c[k] = v
		}
		return with(c)
	}
	out = append(out,
		entity{t.config("sensor", "uptime"), diag("Uptime", "uptime", map[string]any{
			"device_class": "duration", "unit_of_measurement": "s"})},
		entity{t.config("sensor", "memory"), diag("Memory", "memory_mb", map[string]any{
			"device_class": "data_size", "unit_of_measurement": "MiB", "state_class": "measurement", "suggested_display_precision": 1})},
		entity{t.config("sensor", "sessions"), diag("Sessions", "sessions", map[string]any{
			"state_class": "measurement", "icon": "mdi:forum"})},
		entity{t.config("binary_sensor", "ready"), diag("Ready", "ready", map[string]any{
			"value_template":           "{{ 'ON' if value_json.ready else 'OFF' }}",
			"json_attributes_topic":    t.diagnostics,
			"json_attributes_template": "{{ {'not_ready': value_json.not_ready} | tojson }}"})},
		entity{t.config("event", "usb"), with(map[string]any{
			"name": "USB device", "unique_id": t.node + "_usb", "state_topic": t.usbEvent,
			"event_types": []string{"connected", "disconnected"}, "icon": "mdi:usb"})},
		entity{t.config("device_automation", "usb_connected"), map[string]any{
			"automation_type": "trigger", "topic": t.usbConnected, "type": "usb_connected", "subtype": "usb", "device": dev, "origin": origin}},
		entity{t.config("device_automation", "usb_disconnected"), map[string]any{
			"automation_type": "trigger", "topic": t.usbRemoved, "type": "usb_disconnected", "subtype": "usb", "device": dev, "origin": origin}},
	)
	return out
}

// publishDiscovery publishes every entity's config, retained, then an
// empty retained message for each retained topic published before that is
// no longer current (a sensor removed from the config, a changed client_id
// or discovery_prefix): for a config, how Home Assistant removes an entity;
// for a removed sensor's availability, so that no client finds it on the
// broker for ever. The topics are remembered before they are published, so
// a stop half-way never leaves a retained message that no later run knows
// to remove.
func (l *Link) publishDiscovery(ctx context.Context) error {
	p := &l.pub
	ents := l.entities(p.specs, p.slugs, p.pageURL)
	current := make([]string, 0, len(ents)+len(p.slugs))
	for _, e := range ents {
		current = append(current, e.topic)
	}
	for _, slug := range p.slugs {
		current = append(current, l.topics.sensorAvailability(slug))
	}
	remembered := p.announced
	if l.opts.Memory != nil {
		var err error
		if remembered, err = l.opts.Memory.DiscoveryTopics(); err != nil {
			l.log.Warn("cannot read the discovery topics published before; entities removed from the config stay in Home Assistant", "err", err)
		}
	}
	var stale []string
	for _, topic := range remembered {
		if !slices.Contains(current, topic) {
			stale = append(stale, topic)
		}
	}
	l.remember(append(slices.Clone(current), stale...))
	for _, e := range ents {
		if err := l.publish(ctx, e.topic, mustJSON(e.config), 1, true, nil); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.st.entities = len(ents)
	l.mu.Unlock()
	var failed error
	keep := current
	for _, topic := range stale {
		if err := l.publish(ctx, topic, nil, 1, true, nil); err != nil {
			if errors.Is(err, errRefused) {
				// Another broker, or a prefix the ACL no longer covers
				// (mqtt.discovery_prefix changed): trying at every start
				// kept the board not ready for good over an entity it
				// can no longer reach.
				l.clearRefusal(topic)
				l.log.Warn("an old Home Assistant entity cannot be removed: the broker refuses its topic; delete it in Home Assistant if it is still there", "topic", topic, "err", err)
				continue
			}
			failed = err
			keep = append(keep, topic) // try again next time
			continue
		}
		if strings.HasPrefix(topic, l.cfg.DiscoveryPrefix+"/") {
			l.log.Info("removed a Home Assistant entity no longer configured", "topic", topic)
		} else {
			l.log.Info("cleared a retained topic no longer used", "topic", topic)
		}
	}
	if len(stale) > 0 {
		l.remember(keep)
	}
	return failed
}

// remember stores the discovery topics that may be retained on the broker.
func (l *Link) remember(topics []string) {
	topics = slices.Clone(topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	l.pub.announced = topics
	if l.opts.Memory != nil {
		if err := l.opts.Memory.SetDiscoveryTopics(topics); err != nil {
			l.log.Warn("cannot remember the discovery topics published", "err", err)
		}
	}
}

// mustJSON encodes v, which is always encodable (maps of strings, numbers
// and slices built here).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("mqtt: encode: " + err.Error())
	}
	return b
}
