package mqtt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/physic"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/mqtt/mqtttest"
	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/sensor"
)

// The broker's users: the board, and Home Assistant (which reads all).
const (
	boardUser, boardPass = "perch", "board-pass-9f3c1"
	haUser, haPass       = "ha", "ha-pass"
	host                 = "kitchen"
	prefix               = "perch/kitchen"
)

// acl is what a Home Assistant add-on's broker would grant: the board
// writes its own topics and discovery, reads its requests and HA's status.
const acl = `user perch
topic readwrite perch/kitchen/#
topic write homeassistant/#
topic read homeassistant/status

user ha
topic readwrite #
`

func startBroker(t *testing.T, tls bool) *mqtttest.Broker {
	t.Helper()
	return mqtttest.Start(t, mqtttest.Options{
		Users: map[string]string{boardUser: boardPass, haUser: haPass},
		ACL:   acl,
		TLS:   tls,
	})
}

// homeAssistant connects a client that sees everything, as Home Assistant
// does.
func homeAssistant(t *testing.T, b *mqtttest.Broker) *mqtttest.Client {
	t.Helper()
	return mqtttest.Connect(t, b.URL(), haUser, haPass, "homeassistant/#", "perch/#")
}

// sht3xBus is a Sensirion SHT3x on an I²C bus, answering single-shot
// measurements with the temperature and humidity the test sets.
type sht3xBus struct {
	mu       sync.Mutex
	rawT     uint16
	rawH     uint16
	measured bool
	reads    int
}

func newSHT3x(celsius, humidity float64) *sht3xBus {
	b := &sht3xBus{}
	b.set(celsius, humidity)
	return b
}

// set stores the raw words whose conversion gives the values.
func (b *sht3xBus) set(celsius, humidity float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rawT = uint16(math.Round((celsius + 45) * 65535 / 175))
	b.rawH = uint16(math.Round(humidity * 65535 / 100))
}

func (b *sht3xBus) String() string                  { return "sht3x-fake" }
func (b *sht3xBus) SetSpeed(physic.Frequency) error { return nil }
func (b *sht3xBus) Close() error                    { return nil }

func (b *sht3xBus) Tx(addr uint16, w, r []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if addr != 0x44 {
		return errors.New("no device at that address (NACK)")
	}
	switch {
	case bytes.Equal(w, []byte{0x24, 0x00}) && len(r) == 0:
		b.measured = true
		return nil
	case len(w) == 0 && len(r) == 6 && b.measured:
		b.measured = false
		b.reads++
		r[0], r[1] = byte(b.rawT>>8), byte(b.rawT)
		r[2] = crc8(r[0:2])
		r[3], r[4] = byte(b.rawH>>8), byte(b.rawH)
		r[5] = crc8(r[3:5])
		return nil
	}
	return fmt.Errorf("unexpected transfer w=%x r=%d", w, len(r))
}

func crc8(data []byte) byte {
	crc := byte(0xFF)
	for _, b := range data {
		crc ^= b
		for range 8 {
			if crc&0x80 != 0 {
				crc = crc<<1 ^ 0x31
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var busSeq = 0

// testSensors are the board's sensors, read by the production sensor.Set:
// "kitchen", an SHT3x on a fake I²C bus; "tank", a DS18B20 in a fake
// 1-wire sysfs directory; "attic", a BME280 on a bus that does not exist.
type testSensors struct {
	*sensor.Set
	sht  *sht3xBus
	w1   string
	bus  string
	spec []sensor.Spec
}

func newTestSensors(t *testing.T, names ...string) *testSensors {
	t.Helper()
	busSeq++
	ts := &testSensors{sht: newSHT3x(21.5, 40), w1: t.TempDir(), bus: fmt.Sprintf("FAKE-MQTT-I2C-%d", busSeq)}
	hwtest.I2C(t, ts.bus, nil, 200+busSeq, ts.sht)
	ts.setTank(t, 23.125)
	all := map[string]sensor.Spec{
		"kitchen": {Name: "kitchen", Type: "sht3x", Bus: sensor.BusName(ts.bus)},
		"tank":    {Name: "tank", Type: "ds18b20"},
		"attic":   {Name: "attic", Type: "bme280", Bus: "97"},
	}
	if len(names) == 0 {
		names = []string{"kitchen", "tank", "attic"}
	}
	for _, n := range names {
		ts.spec = append(ts.spec, all[n])
	}
	set, err := sensor.NewSet(ts.spec, sensor.Options{W1Dir: ts.w1})
	if err != nil {
		t.Fatal(err)
	}
	ts.Set = set
	return ts
}

// setTank writes the DS18B20's w1_slave file as the kernel's w1 driver
// does.
func (ts *testSensors) setTank(t *testing.T, celsius float64) {
	t.Helper()
	dir := filepath.Join(ts.w1, "28-0316a2795aff")
	os.MkdirAll(dir, 0o755)
	body := fmt.Sprintf("72 01 4b 46 7f ff 0e 10 57 : crc=57 YES\n72 01 4b 46 7f ff 0e 10 57 t=%d\n", int(math.Round(celsius*1000)))
	if err := os.WriteFile(filepath.Join(dir, "w1_slave"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memMemory keeps the discovery topics as the store's meta bucket would.
type memMemory struct {
	mu     sync.Mutex
	topics []string
}

func (m *memMemory) DiscoveryTopics() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.topics...), nil
}

func (m *memMemory) SetDiscoveryTopics(t []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.topics = append([]string(nil), t...)
	return nil
}

// fakeAgent stands in for the agent loop: it answers "echo: <text>" and
// records what it was asked. When gate is set, turns wait for it; busy
// makes the first calls report a full queue.
type fakeAgent struct {
	mu    sync.Mutex
	calls []bus.Inbound
	busy  int
	gate  chan struct{}
	began chan string
}

func (a *fakeAgent) ask(ctx context.Context, in bus.Inbound) (string, error) {
	a.mu.Lock()
	if a.busy > 0 {
		a.busy--
		a.mu.Unlock()
		return "", fmt.Errorf("agent: too many turns in progress: %w", ErrBusy)
	}
	a.calls = append(a.calls, in)
	gate, began := a.gate, a.began
	a.mu.Unlock()
	if began != nil {
		began <- in.Text
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ErrStopped
		}
	}
	return "echo: " + in.Text, nil
}

func (a *fakeAgent) asked() []bus.Inbound {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bus.Inbound(nil), a.calls...)
}

// logBuffer collects the link's log lines, to check no secret reaches one.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// testLink builds a link to broker url as the board; edit adjusts the
// options before New. It is stopped when the test ends.
func testLink(t *testing.T, url string, edit func(*Options)) (*Link, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opts := Options{
		Config: config.MQTT{Enabled: true, Broker: url, Username: boardUser, Password: boardPass,
			DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60},
		Hostname: host,
		Version:  "1.2.3",
		Model:    "Raspberry Pi 4 Model B Rev 1.4",
		PageURL: func(ip net.IP) string {
			if ip == nil {
				return ""
			}
			return "http://" + net.JoinHostPort(ip.String(), "8080") + "/"
		},
		Diagnostics: func(context.Context) Diagnostics {
			return Diagnostics{Uptime: 90 * time.Second, MemoryMB: 12.34, Ready: true, Sessions: 3}
		},
		Log:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MinBackoff:  100 * time.Millisecond,
		MaxBackoff:  time.Second,
		SampleEvery: 100 * time.Millisecond,
	}
	if edit != nil {
		edit(&opts)
	}
	l, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		if strings.Contains(logs.String(), boardPass) {
			t.Errorf("the password reached the log:\n%s", logs)
		}
	})
	return l, logs
}

// waitCheck polls the link's check until ok is want, returning its message.
func waitCheck(t *testing.T, l *Link, want bool, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := l.Check(context.Background())
		if ok == want {
			return msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("check stayed %v after %s: %s", ok, timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFailure polls until the check fails with a message holding every
// one of want, and returns it.
func waitFailure(t *testing.T, l *Link, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, msg := l.Check(context.Background())
		if !ok && containsAll(msg, want) {
			return msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("check %v %q after %s; want a failure saying %q", ok, msg, wait, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsAll(s string, subs []string) bool {
	for _, w := range subs {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

func decode(t *testing.T, m mqtttest.Message) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(m.Payload, &out); err != nil {
		t.Fatalf("%s: %q is not JSON: %v", m.Topic, m.Payload, err)
	}
	return out
}
