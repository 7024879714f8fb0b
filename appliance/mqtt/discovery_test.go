package mqtt

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/mqtt/mqtttest"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/drivers/usb"
)

const wait = 10 * time.Second

// TestDiscoveryAndStatesReachHomeAssistant: Home Assistant, subscribed to
// the broker, sees the board online, one device with model, version and
// page link, each configured sensor quantity as an entity with the right
// device class and unit (a sensor whose bus is missing included, marked
// unavailable), the diagnostics as diagnostic entities, and the states.
func TestDiscoveryAndStatesReachHomeAssistant(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	sensors := newTestSensors(t)
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Sensors = sensors; o.Memory = &memMemory{} })

	ha.WaitPayload(t, wait, prefix+"/status", "online")
	want := []struct {
		object, class, unit, state string
	}{
		{"kitchen_temperature", "temperature", "°C", prefix + "/sensor/kitchen/temperature"},
		{"kitchen_humidity", "humidity", "%", prefix + "/sensor/kitchen/humidity"},
		{"tank_temperature", "temperature", "°C", prefix + "/sensor/tank/temperature"},
		{"attic_temperature", "temperature", "°C", prefix + "/sensor/attic/temperature"},
		{"attic_pressure", "atmospheric_pressure", "hPa", prefix + "/sensor/attic/pressure"},
		{"attic_humidity", "humidity", "%", prefix + "/sensor/attic/humidity"},
	}
	for _, w := range want {
		topic := "homeassistant/sensor/perch-kitchen/" + w.object + "/config"
		c := decode(t, ha.Wait(t, wait, topic, func(m mqtttest.Message) bool { return m.Topic == topic }))
		if c["device_class"] != w.class || c["unit_of_measurement"] != w.unit || c["state_topic"] != w.state || c["state_class"] != "measurement" {
			t.Errorf("%s: class %v unit %v state %v class %v", w.object, c["device_class"], c["unit_of_measurement"], c["state_topic"], c["state_class"])
		}
		if c["unique_id"] != "perch-kitchen_"+w.object {
			t.Errorf("%s: unique_id %v", w.object, c["unique_id"])
		}
		dev, _ := c["device"].(map[string]any)
		if ids, _ := dev["identifiers"].([]any); len(ids) != 1 || ids[0] != "perch-kitchen" ||
			dev["model"] != "Raspberry Pi 4 Model B Rev 1.4" || dev["sw_version"] != "1.2.3" || dev["configuration_url"] != "http://127.0.0.1:8080/" {
			t.Errorf("%s: device %v", w.object, dev)
		}
		avail, _ := c["availability"].([]any)
		if len(avail) != 2 || c["availability_mode"] != "all" {
			t.Errorf("%s: availability %v mode %v", w.object, avail, c["availability_mode"])
		}
	}
	// Discovery configs and the status are retained: a Home Assistant
	// that starts later finds them.
	late := homeAssistant(t, b)
	if m := late.Wait(t, wait, "retained config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/sensor/perch-kitchen/kitchen_temperature/config"
	}); !m.Retain {
		t.Error("discovery config not retained")
	}
	if m := late.WaitPayload(t, wait, prefix+"/status", "online"); !m.Retain {
		t.Error("status not retained")
	}

	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/temperature", "21.5")
	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/humidity", "40")
	ha.WaitPayload(t, wait, prefix+"/sensor/tank/temperature", "23.13")
	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/availability", "online")
	ha.WaitPayload(t, wait, prefix+"/sensor/attic/availability", "offline")

	for object, class := range map[string]string{"uptime": "duration", "memory": "data_size", "sessions": ""} {
		topic := "homeassistant/sensor/perch-kitchen/" + object + "/config"
		c := decode(t, ha.Wait(t, wait, topic, func(m mqtttest.Message) bool { return m.Topic == topic }))
		if c["entity_category"] != "diagnostic" || c["state_topic"] != prefix+"/diagnostics" {
			t.Errorf("%s: %v", object, c)
		}
		if got, _ := c["device_class"].(string); got != class {
			t.Errorf("%s: device class %q, want %q", object, got, class)
		}
	}
	ready := decode(t, ha.Wait(t, wait, "ready config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/binary_sensor/perch-kitchen/ready/config"
	}))
	if ready["entity_category"] != "diagnostic" {
		t.Errorf("ready: %v", ready)
	}
	diag := decode(t, ha.Wait(t, wait, "diagnostics", func(m mqtttest.Message) bool { return m.Topic == prefix+"/diagnostics" }))
	if diag["uptime"] != 90.0 || diag["memory_mb"] != 12.3 || diag["ready"] != true || diag["sessions"] != 3.0 {
		t.Errorf("diagnostics %v", diag)
	}
	ev := decode(t, ha.Wait(t, wait, "event config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/event/perch-kitchen/usb/config"
	}))
	if types, _ := ev["event_types"].([]any); len(types) != 2 || ev["state_topic"] != prefix+"/usb/event" {
		t.Errorf("usb event entity %v", ev)
	}
	for _, kind := range []string{"connected", "disconnected"} {
		topic := "homeassistant/device_automation/perch-kitchen/usb_" + kind + "/config"
		trig := decode(t, ha.Wait(t, wait, topic, func(m mqtttest.Message) bool { return m.Topic == topic }))
		if trig["automation_type"] != "trigger" || trig["topic"] != prefix+"/usb/"+kind {
			t.Errorf("device trigger %v", trig)
		}
	}
	msg := waitCheck(t, l, true, wait)
	if !strings.Contains(msg, "13 Home Assistant entities") {
		t.Errorf("check message %q", msg)
	}
}

// TestChangesPublishBetweenIntervals: a value that moves by more than its
// step is published at the next sample, not at the next interval; noise
// below the step is not.
func TestChangesPublishBetweenIntervals(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	sensors := newTestSensors(t, "kitchen", "tank")
	testLink(t, b.URL(), func(o *Options) { o.Sensors = sensors })
	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/temperature", "21.5")
	ha.WaitPayload(t, wait, prefix+"/sensor/tank/temperature", "23.13")

	sensors.setTank(t, 23.2) // 0.07 °C: noise
	sensors.sht.set(22.5, 40)
	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/temperature", "22.5")
	time.Sleep(300 * time.Millisecond) // a few samples
	for _, m := range ha.Messages(prefix + "/sensor/tank/temperature") {
		if string(m.Payload) != "23.13" {
			t.Errorf("tank published %s for a 0.07 °C change", m.Payload)
		}
	}
	if n := len(ha.Messages(prefix + "/sensor/kitchen/humidity")); n != 1 {
		t.Errorf("unchanged humidity published %d times", n)
	}
	sensors.setTank(t, 24)
	ha.WaitPayload(t, wait, prefix+"/sensor/tank/temperature", "24")
}

// TestUSBEventsBecomeHomeAssistantEvents: a device plugged in reaches the
// event entity's topic and the device trigger's, with its name and ids.
func TestUSBEventsBecomeHomeAssistantEvents(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	l, _ := testLink(t, b.URL(), nil)
	ha.WaitPayload(t, wait, prefix+"/status", "online")
	kbd := usb.Device{Port: "1-1.3", VendorID: "046d", ProductID: "c31c", Manufacturer: "Logitech", Product: "USB Keyboard"}
	l.USB(DeviceEvent{Connected: true, Device: kbd})
	l.USB(DeviceEvent{Connected: false, Device: kbd})
	ev := decode(t, ha.Wait(t, wait, "usb event", func(m mqtttest.Message) bool { return m.Topic == prefix+"/usb/event" }))
	if ev["event_type"] != "connected" || ev["device"] != "Logitech USB Keyboard" || ev["id"] != "046d:c31c" || ev["port"] != "1-1.3" {
		t.Errorf("event %v", ev)
	}
	ha.Wait(t, wait, "connected trigger", func(m mqtttest.Message) bool { return m.Topic == prefix+"/usb/connected" })
	gone := decode(t, ha.Wait(t, wait, "disconnected trigger", func(m mqtttest.Message) bool {
		return m.Topic == prefix+"/usb/disconnected"
	}))
	if gone["event_type"] != "disconnected" {
		t.Errorf("disconnected trigger payload %v", gone)
	}
}

// TestRemovedSensorLosesItsEntity: after a restart with a sensor removed
// from the config, its discovery configs are emptied (retained), so Home
// Assistant removes the entity, and so is its retained availability,
// which stayed on the broker for ever; the other sensors' stay.
func TestRemovedSensorLosesItsEntity(t *testing.T) {
	b := startBroker(t, false)
	mem := &memMemory{}
	first, _ := testLink(t, b.URL(), func(o *Options) { o.Sensors = newTestSensors(t, "kitchen", "tank"); o.Memory = mem })
	waitCheck(t, first, true, wait)
	ha := homeAssistant(t, b)
	ha.Wait(t, wait, "tank config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/sensor/perch-kitchen/tank_temperature/config" && len(m.Payload) > 0
	})
	ha.WaitPayload(t, wait, prefix+"/sensor/tank/availability", "online")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	remembered, _ := mem.DiscoveryTopics()
	if got := strings.Join(remembered, " "); !strings.Contains(got, "tank_temperature") {
		t.Fatalf("remembered topics %s", got)
	}

	second, _ := testLink(t, b.URL(), func(o *Options) { o.Sensors = newTestSensors(t, "kitchen"); o.Memory = mem })
	waitCheck(t, second, true, wait)
	ha.Wait(t, wait, "empty tank config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/sensor/perch-kitchen/tank_temperature/config" && len(m.Payload) == 0
	})
	// The availability is cleared after the config: a Home Assistant that
	// subscribed in between saw the retained "online", then the clear.
	ha.Wait(t, wait, "tank's availability cleared", func(m mqtttest.Message) bool {
		return m.Topic == prefix+"/sensor/tank/availability" && len(m.Payload) == 0
	})
	// A Home Assistant starting now finds kitchen's config and none of tank's.
	late := homeAssistant(t, b)
	late.Wait(t, wait, "kitchen config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/sensor/perch-kitchen/kitchen_temperature/config"
	})
	late.WaitPayload(t, wait, prefix+"/sensor/kitchen/availability", "online")
	time.Sleep(200 * time.Millisecond)
	for _, m := range late.Messages("homeassistant/sensor/perch-kitchen/tank_temperature/config") {
		t.Errorf("tank's config still retained: %q", m.Payload)
	}
	for _, m := range late.Messages(prefix + "/sensor/tank/availability") {
		t.Errorf("tank's availability still retained: %q", m.Payload)
	}
	remembered, _ = mem.DiscoveryTopics()
	for _, topic := range remembered {
		if strings.Contains(topic, "tank") {
			t.Errorf("still remembered: %s", topic)
		}
	}
}

// TestHomeAssistantBirthRepublishes: when Home Assistant restarts and says
// so on homeassistant/status, the board publishes discovery and states
// again without waiting for the interval.
func TestHomeAssistantBirthRepublishes(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Sensors = newTestSensors(t, "kitchen") })
	waitCheck(t, l, true, wait)
	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/temperature", "21.5")
	ha.Reset()
	ha.Publish(t, "homeassistant/status", []byte("online"), 1, false, nil)
	ha.Wait(t, wait, "republished config", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/sensor/perch-kitchen/kitchen_temperature/config"
	})
	ha.WaitPayload(t, wait, prefix+"/sensor/kitchen/temperature", "21.5")
}

func TestSensorSlugsStayApart(t *testing.T) {
	got := sensorSlugs([]sensor.Spec{{Name: "Living room"}, {Name: "a.b"}, {Name: "a b"}, {Name: "Küche"}, {Name: "日本"}})
	if got["Living room"] != "living_room" || got["Küche"] != "k_che" {
		t.Errorf("slugs %v", got)
	}
	if got["a.b"] == got["a b"] || !strings.HasPrefix(got["a.b"], "a_b_") {
		t.Errorf("colliding names share a slug: %v", got)
	}
	if len(got["日本"]) != 6 {
		t.Errorf("a name without Latin letters: %q", got["日本"])
	}
	seen := map[string]bool{}
	for _, s := range got {
		if seen[s] || objectID(s) != s {
			t.Errorf("slug %q repeated or not an object id", s)
		}
		seen[s] = true
	}
}

func TestDiscoveryPayloadsAreJSON(t *testing.T) {
	l, err := New(Options{Config: minimalConfig(), Hostname: "x", Version: "v", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.entities([]sensor.Spec{{Name: "a", Type: "bh1750"}}, map[string]string{"a": "a"}, "") {
		var v map[string]any
		if err := json.Unmarshal(mustJSON(e.config), &v); err != nil {
			t.Errorf("%s: %v", e.topic, err)
		}
		if _, ok := v["device"].(map[string]any)["configuration_url"]; ok {
			t.Errorf("%s: a configuration_url without a reachable page", e.topic)
		}
		if strings.HasSuffix(e.topic, "a_illuminance/config") && (v["device_class"] != "illuminance" || v["unit_of_measurement"] != "lx") {
			t.Errorf("illuminance entity %v", v)
		}
	}
}

// TestAnOldEntityTheBrokerRefusesDoesNotKeepTheBoardNotReady: after a
// change of broker or of mqtt.discovery_prefix, the old discovery topics
// may be outside what the board may write; their removal is refused once,
// said in the log, and forgotten. It was tried at every start and kept the
// board not ready for good.
func TestAnOldEntityTheBrokerRefusesDoesNotKeepTheBoardNotReady(t *testing.T) {
	b := startBroker(t, false)
	mem := &memMemory{topics: []string{"oldprefix/sensor/perch-kitchen/tank_temperature/config"}}
	l, logs := testLink(t, b.URL(), func(o *Options) { o.Sensors = newTestSensors(t, "kitchen"); o.Memory = mem })
	waitCheck(t, l, true, wait)
	deadline := time.Now().Add(wait)
	for !strings.Contains(logs.String(), "cannot be removed") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "oldprefix/sensor/perch-kitchen/tank_temperature/config") {
		t.Errorf("the log does not name the old topic:\n%s", logs)
	}
	time.Sleep(200 * time.Millisecond)
	if ok, msg := l.Check(context.Background()); !ok {
		t.Errorf("not ready over an old entity: %s", msg)
	}
	if got, _ := mem.DiscoveryTopics(); strings.Contains(strings.Join(got, " "), "oldprefix") {
		t.Errorf("the old topic is still remembered: %v", got)
	}
}
