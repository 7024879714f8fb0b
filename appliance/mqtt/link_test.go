package mqtt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/gorilla/websocket"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/mqtt/mqtttest"
)

// helperEnv makes the test binary a board: a link to the broker it names,
// running until killed.
const helperEnv = "PERCH_MQTT_TEST_BOARD"

func TestMain(m *testing.M) {
	if url := os.Getenv(helperEnv); url != "" {
		runBoard(url)
		return
	}
	os.Exit(m.Run())
}

func runBoard(url string) {
	l, err := New(Options{
		Config: config.MQTT{Enabled: true, Broker: url, Username: boardUser, Password: boardPass,
			DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60},
		Hostname: host, Version: "1.2.3", Log: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		err = l.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	select {}
}

// TestLastWillMarksBoardOfflineWhenKilled: a board that dies without a
// word (SIGKILL, as a power cut) is marked offline by the broker's last
// will, retained, so Home Assistant shows it unavailable.
func TestLastWillMarksBoardOfflineWhenKilled(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.URL())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ha.WaitPayload(t, wait, prefix+"/status", "online")
	ha.Reset()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	ha.WaitPayload(t, wait, prefix+"/status", "offline")
	late := homeAssistant(t, b)
	if m := late.WaitPayload(t, wait, prefix+"/status", "offline"); !m.Retain {
		t.Error("the will's offline is not retained")
	}
}

// TestCleanStopSaysOffline: a gateway that stops says offline itself.
func TestCleanStopSaysOffline(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	l, _ := testLink(t, b.URL(), nil)
	ha.WaitPayload(t, wait, prefix+"/status", "online")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := l.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ha.WaitPayload(t, wait, prefix+"/status", "offline")
	if ok, msg := l.Check(ctx); ok || !strings.Contains(msg, "stopped") {
		t.Errorf("check after stop: %v %q", ok, msg)
	}
}

// TestBrokerRestartBringsTheBoardBack: the broker restarts mid-run; the
// board reconnects by itself, says online again and republishes its
// discovery and states (live, not only the broker's retained copies).
func TestBrokerRestartBringsTheBoardBack(t *testing.T) {
	b := startBroker(t, false)
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Sensors = newTestSensors(t, "kitchen") })
	waitCheck(t, l, true, wait)
	if n := l.Connects(); n != 1 {
		t.Errorf("Connects after the first connection = %d, want 1", n)
	}
	// Stopped, then started, rather than restarted in one step: a quick
	// restart let the link reconnect between two looks at its check.
	b.Stop(t)
	msg := waitCheck(t, l, false, wait)
	t.Logf("while the broker restarts: %s", msg)
	b.StartAgain(t)
	ha := homeAssistant(t, b)
	waitCheck(t, l, true, wait)
	live := func(topic, payload string) {
		t.Helper()
		ha.Wait(t, wait, "live "+topic, func(m mqtttest.Message) bool {
			return m.Topic == topic && !m.Retain && (payload == "" || string(m.Payload) == payload)
		})
	}
	live(prefix+"/status", "online")
	live("homeassistant/sensor/perch-kitchen/kitchen_temperature/config", "")
	live(prefix+"/sensor/kitchen/temperature", "21.5")
	if st := l.Status(); st.Reconnects < 1 || !st.Connected {
		t.Errorf("status after the restart %+v", st)
	}
	// The idle trimmer sees the reconnection as new connection work.
	if n := l.Connects(); n < 2 {
		t.Errorf("Connects after the broker's restart = %d, want 2 or more", n)
	}
	// And the request subscription is back.
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"/help","id":"h"}`), 1, false, nil)
	got := decode(t, auto.Wait(t, wait, "answer", func(m mqtttest.Message) bool { return m.Topic == prefix+"/agent/response" }))
	// Without an agent the turn fails; a client nobody vouched for reads
	// only that it did.
	if got["id"] != "h" || got["error"] == nil {
		t.Errorf("answer from a link without agent: %v", got)
	}
}

// TestBrokerAwayAtStart: a board that boots before its broker keeps trying
// and connects once the broker is there.
func TestBrokerAwayAtStart(t *testing.T) {
	b := startBroker(t, false)
	b.Stop(t)
	l, _ := testLink(t, b.URL(), nil)
	waitFailure(t, l, "cannot connect to the broker "+b.URL(), "connection refused")
	if n := l.Connects(); n != 0 {
		t.Errorf("Connects before the broker is there = %d, want 0", n)
	}
	b.StartAgain(t)
	waitCheck(t, l, true, wait)
	if n := l.Connects(); n != 1 {
		t.Errorf("Connects once connected = %d, want 1", n)
	}
}

// TestWrongPasswordFailsTheCheckOnly: a rejected login is a failing check
// naming mqtt.username and mqtt.password; nothing stops, the password
// never reaches the log or the status, and Stop is clean.
func TestWrongPasswordFailsTheCheckOnly(t *testing.T) {
	b := startBroker(t, false)
	l, logs := testLink(t, b.URL(), func(o *Options) { o.Config.Password = "wrong-pass-77" })
	msg := waitFailure(t, l, "refused the login", "mqtt.username", "mqtt.password", b.URL())
	st, _ := json.Marshal(l.Status())
	for _, secret := range []string{"wrong-pass-77", boardPass} {
		if strings.Contains(logs.String()+string(st)+msg, secret) {
			t.Errorf("a password reached the log, status or check")
		}
	}
	if !strings.Contains(logs.String(), "refused the login") {
		t.Errorf("the refusal is not logged:\n%s", logs)
	}
}

// TestTLSBrokerWithPrivateCA: mqtts:// to a broker whose certificate a
// private CA signed works with mqtt.ca_file; without it the check says to
// set mqtt.ca_file.
func TestTLSBrokerWithPrivateCA(t *testing.T) {
	b := startBroker(t, true)
	ha := homeAssistant(t, b)
	l, _ := testLink(t, b.TLSURL(), func(o *Options) { o.CAFile = b.CAFile() })
	waitCheck(t, l, true, wait)
	ha.WaitPayload(t, wait, prefix+"/status", "online")

	noCA, _ := testLink(t, b.TLSURL(), func(o *Options) { o.Config.ClientID = "perch-other"; o.Config.TopicPrefix = "perch/other" })
	waitFailure(t, noCA, "unknown authority", "mqtt.ca_file")

	plain, _ := testLink(t, "mqtts://127.0.0.1:"+fmt.Sprint(b.Port), func(o *Options) {
		o.CAFile = b.CAFile()
		o.Config.ClientID, o.Config.TopicPrefix = "perch-plain", "perch/plain"
	})
	waitFailure(t, plain, "not the broker's TLS listener", "mqtt.broker")
}

// TestPahoSchemeNames: a broker address copied from a Paho-based tool
// (tcp://, ssl://) reaches the same listeners as mqtt:// and mqtts://.
func TestPahoSchemeNames(t *testing.T) {
	b := startBroker(t, true)
	ha := homeAssistant(t, b)
	plain, _ := testLink(t, strings.Replace(b.URL(), "mqtt://", "tcp://", 1), nil)
	waitCheck(t, plain, true, wait)
	ha.WaitPayload(t, wait, prefix+"/status", "online")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := plain.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ha.WaitPayload(t, wait, prefix+"/status", "offline")
	ha.Reset()

	tls, _ := testLink(t, strings.Replace(b.TLSURL(), "mqtts://", "ssl://", 1), func(o *Options) { o.CAFile = b.CAFile() })
	waitCheck(t, tls, true, wait)
	ha.WaitPayload(t, wait, prefix+"/status", "online")
}

// TestWebSocketBroker: ws:// reaches a broker behind a WebSocket endpoint
// (subprotocol mqtt, binary frames), as Mosquitto's websockets listener or
// a reverse proxy in front of it offers. Debian's mosquitto is built without
// websockets, so a small bridge stands in for the endpoint in front of the
// real broker.
func TestWebSocketBroker(t *testing.T) {
	b := startBroker(t, false)
	ha := homeAssistant(t, b)
	up := websocket.Upgrader{Subprotocols: []string{"mqtt"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/mqtt" {
			http.NotFound(w, r)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		tcp, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", b.Port))
		if err != nil {
			return
		}
		defer tcp.Close()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := tcp.Read(buf)
				if err != nil {
					ws.Close()
					return
				}
				if ws.WriteMessage(websocket.BinaryMessage, buf[:n]) != nil {
					return
				}
			}
		}()
		for {
			_, rd, err := ws.NextReader()
			if err != nil {
				return
			}
			if _, err := io.Copy(tcp, rd); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	wsURL := "ws://" + strings.TrimPrefix(srv.URL, "http://") + "/mqtt"
	l, _ := testLink(t, wsURL, nil)
	waitCheck(t, l, true, wait)
	ha.WaitPayload(t, wait, prefix+"/status", "online")
}

// TestRefusedPublishFailsTheCheck: a broker ACL that does not let the board
// write discovery topics makes the check fail, saying which topic and what
// to grant.
func TestRefusedPublishFailsTheCheck(t *testing.T) {
	b := mqtttest.Start(t, mqtttest.Options{
		Users: map[string]string{boardUser: boardPass, haUser: haPass},
		ACL:   "user perch\ntopic readwrite perch/kitchen/#\n\nuser ha\ntopic readwrite #\n",
	})
	l, _ := testLink(t, b.URL(), nil)
	waitFailure(t, l, "refused publishing to homeassistant/", "not authorized", "ACL", "user perch")
}

// TestTwinBoardsNameTheClientID: two boards with one client_id (two Pis
// both called raspberrypi) take the session from each other; the one kicked
// out says so and names mqtt.client_id, and backs off instead of fighting
// at full speed.
func TestTwinBoardsNameTheClientID(t *testing.T) {
	b := startBroker(t, false)
	first, _ := testLink(t, b.URL(), nil)
	waitCheck(t, first, true, wait)
	testLink(t, b.URL(), nil)
	waitFailure(t, first, "keeps closing the connection", "took the session over", "mqtt.client_id", "same hostname")
	if p := first.Status().Problem; !strings.Contains(p, "mqtt.client_id") {
		t.Errorf("status problem %q", p)
	}
	time.Sleep(2 * time.Second)
	if n := first.Status().Reconnects; n > 12 {
		t.Errorf("%d reconnections in 2 s: the twins fight without backing off", n)
	}
}

// TestStopLeavesNoGoroutines: every goroutine the link starts (its loop,
// Paho's, the requests') ends with Stop, after connections, a broker
// restart and a request.
func TestStopLeavesNoGoroutines(t *testing.T) {
	b := startBroker(t, false)
	before := runtime.NumGoroutine()
	for i := range 3 {
		agent := &fakeAgent{}
		l, err := New(Options{
			Config: config.MQTT{Enabled: true, Broker: b.URL(), Username: boardUser, Password: boardPass,
				DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60},
			Hostname: host, Agent: agent.ask, Sensors: newTestSensors(t, "tank"), Log: slog.New(slog.DiscardHandler),
			MinBackoff: 50 * time.Millisecond, SampleEvery: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitCheck(t, l, true, wait)
		auto := mqtttest.Connect(t, b.URL(), haUser, haPass)
		auto.Publish(t, prefix+"/agent/request", fmt.Appendf(nil, "question %d", i), 1, false, nil)
		auto.Close()
		if i == 1 {
			b.Restart(t)
			waitCheck(t, l, true, wait)
		}
		for len(agent.asked()) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		if err := l.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after stop, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestNotReadyUntilSubscribed: a connection that is up but whose
// subscriptions the broker has not granted yet is not ready: a request
// published then is not delivered to the board. /ready passed a moment
// before the request subscription existed.
func TestNotReadyUntilSubscribed(t *testing.T) {
	l, err := New(Options{Config: config.MQTT{Enabled: true, Broker: "mqtt://127.0.0.1:1"}, Hostname: host, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l.onConnectionUp(nil, &paho.Connack{})
	if ok, msg := l.Check(context.Background()); ok || !strings.Contains(msg, "subscribing to perch/kitchen/agent/request") {
		t.Errorf("connected, not yet subscribed: %v %q; want not ready, saying so", ok, msg)
	}
	if !l.unsubscribed() {
		t.Error("a connection without its subscriptions is not asked for them again")
	}
}
