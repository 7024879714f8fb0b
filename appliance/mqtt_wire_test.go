package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/mqtt/mqtttest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

const mqttWait = 10 * time.Second

// mqttBroker is a Mosquitto with the board's user and Home Assistant's.
func mqttBroker(t *testing.T) *mqtttest.Broker {
	return mqtttest.Start(t, mqtttest.Options{
		Users: map[string]string{"perch": "board-pw-5d1", "ha": "ha-pw"},
		ACL:   "user perch\ntopic readwrite perch/test/#\ntopic write homeassistant/#\ntopic read homeassistant/status\n\nuser ha\ntopic readwrite #\n",
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startMQTTGateway runs the whole gateway, built by the composition root,
// with mqtt enabled against the broker.
func startMQTTGateway(t *testing.T, fake *providertest.Server, b *mqtttest.Broker, password string) (*System, string, *syncBuffer) {
	t.Helper()
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.Port = 0
	cfg.Gateway.APIToken = "t"
	cfg.Providers.OpenRouter.APIKey = "k"
	cfg.Providers.OpenRouter.APIBase = fake.Base()
	cfg.Providers.OpenRouter.MaxRetries = 0
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	cfg.MQTT = config.MQTT{Enabled: true, Broker: b.URL(), Username: "perch", Password: config.Secret(password),
		ClientID: "perch-test", TopicPrefix: "perch/test", DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60}
	logs := &syncBuffer{}
	sys, err := NewCore(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.BuildGateway(); err != nil {
		sys.Close()
		t.Fatal(err)
	}
	if err := sys.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sys.Stop(context.Background())
		if strings.Contains(logs.String(), password) {
			t.Errorf("the MQTT password reached the log")
		}
	})
	return sys, "http://" + sys.HTTP.Addr(), logs
}

type readyBody struct {
	Status string `json:"status"`
	Checks map[string]struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"checks"`
}

// TestGatewayOverMQTT: with mqtt enabled the gateway joins the broker:
// /ready and /admin/status show the link, Home Assistant sees the board,
// an MQTT request gets the agent's offline commands and the model's
// answers in its session, and a cron job delivers to the mqtt channel.
func TestGatewayOverMQTT(t *testing.T) {
	b := mqttBroker(t)
	fake := newFake(t)
	ha := mqtttest.Connect(t, b.URL(), "ha", "ha-pw", "homeassistant/#", "perch/#")
	sys, base, _ := startMQTTGateway(t, fake, b, "board-pw-5d1")

	ha.WaitPayload(t, mqttWait, "perch/test/status", "online")
	ready := readyBody{}
	deadline := time.Now().Add(mqttWait)
	for {
		if code := call(t, base, "GET", "/ready", "", &ready); code == 200 && ready.Checks["channel:mqtt"].Status == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready %+v", ready)
		}
		time.Sleep(20 * time.Millisecond)
	}
	uptime := ha.Wait(t, mqttWait, "uptime entity", func(m mqtttest.Message) bool {
		return m.Topic == "homeassistant/sensor/perch-test/uptime/config"
	})
	var cfg map[string]any
	json.Unmarshal(uptime.Payload, &cfg)
	if dev, _ := cfg["device"].(map[string]any); dev["sw_version"] == "" || dev["model"] == "" || dev["configuration_url"] != nil {
		t.Errorf("device %v (a gateway on loopback has no page link for Home Assistant)", dev)
	}
	diag := ha.Wait(t, mqttWait, "diagnostics", func(m mqtttest.Message) bool { return m.Topic == "perch/test/diagnostics" })
	var d map[string]any
	json.Unmarshal(diag.Payload, &d)
	if d["memory_mb"].(float64) <= 0 {
		t.Errorf("diagnostics %v", d)
	}

	var status map[string]any
	call(t, base, "GET", "/admin/status", "", &status)
	link, _ := status["mqtt"].(map[string]any)
	if link["connected"] != true || link["client_id"] != "perch-test" || strings.Contains(fmt.Sprint(status), "board-pw") {
		t.Errorf("/admin/status mqtt %v", link)
	}

	answer := func(id string) map[string]any {
		t.Helper()
		m := ha.Wait(t, mqttWait, "answer "+id, func(m mqtttest.Message) bool {
			return m.Topic == "perch/test/agent/response" && strings.Contains(string(m.Payload), `"id":"`+id+`"`)
		})
		var out map[string]any
		json.Unmarshal(m.Payload, &out)
		return out
	}
	ha.Publish(t, "perch/test/agent/request", []byte(`{"message":"/help","id":"h"}`), 1, false, nil)
	if got := answer("h"); !strings.Contains(fmt.Sprint(got["response"]), "Commands (answered without the model)") {
		t.Errorf("/help over MQTT: %v", got)
	}
	fake.Enqueue(providertest.Reply{Content: "Good morning! It is 21 °C in the kitchen."})
	ha.Publish(t, "perch/test/agent/request", []byte(`{"message":"Good morning","session_key":"ha:morning","id":"m"}`), 1, false, nil)
	if got := answer("m"); got["response"] != "Good morning! It is 21 °C in the kitchen." {
		t.Errorf("answer %v", got)
	}
	if reqs := fake.Requests(); len(reqs) != 1 || providertest.LastUser(reqs[0].Body) != "Good morning" {
		t.Errorf("provider requests %+v", reqs)
	}
	if s, err := sys.Store.Session("ha:morning"); err != nil || s.Count != 2 || s.Channel != "mqtt" {
		t.Errorf("session ha:morning: %+v %v", s, err)
	}

	// A client of the broker cannot reach a chat's conversation by naming
	// its session: the model would read the chat's history to it.
	if err := sys.Store.Append("telegram:42", []chat.Message{{Role: chat.RoleUser, Content: "my PIN is 4711"}, {Role: chat.RoleAssistant, Content: "noted"}}, chat.Usage{}, 100, "telegram", "42"); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"telegram:42", "web:main", "cron:j"} {
		id := fmt.Sprintf("x%d", i)
		ha.Publish(t, "perch/test/agent/request", []byte(`{"message":"What did I tell you?","session_key":"`+key+`","id":"`+id+`"}`), 1, false, nil)
		if got := answer(id); !strings.Contains(fmt.Sprint(got["error"]), "may not join") {
			t.Errorf("%s over MQTT: %v", key, got)
		}
	}
	if reqs := fake.Requests(); len(reqs) != 1 {
		t.Errorf("the provider was asked %d times; want once", len(reqs))
	}
	if s, err := sys.Store.Session("telegram:42"); err != nil || s.Count != 2 {
		t.Errorf("session telegram:42: %+v %v", s, err)
	}

	res, err := sys.runJob(context.Background(), api.Job{ID: "j", JobSpec: api.JobSpec{Message: "Water the tomatoes", Deliver: true, Channel: "mqtt", To: "garden"}})
	if err != nil {
		t.Fatal(err)
	}
	m := ha.Wait(t, mqttWait, "the cron delivery", func(m mqtttest.Message) bool { return m.Topic == "perch/test/messages" })
	if string(m.Payload) != `{"chat_id":"garden","text":"Water the tomatoes"}` {
		t.Errorf("delivery %s (%s)", m.Payload, res)
	}
	if err := sys.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	ha.WaitPayload(t, mqttWait, "perch/test/status", "offline")
}

// TestGatewayWithRejectedMQTTLogin: a wrong MQTT password fails /ready's
// channel:mqtt check, naming mqtt.username and mqtt.password, and nothing
// else: the gateway started and /chat answers.
func TestGatewayWithRejectedMQTTLogin(t *testing.T) {
	b := mqttBroker(t)
	fake := newFake(t)
	_, base, _ := startMQTTGateway(t, fake, b, "not-the-password")
	var ready readyBody
	deadline := time.Now().Add(mqttWait)
	for {
		code := call(t, base, "GET", "/ready", "", &ready)
		c := ready.Checks["channel:mqtt"]
		if code == 503 && c.Status == "fail" && strings.Contains(c.Message, "refused the login") {
			if !strings.Contains(c.Message, "mqtt.username") || !strings.Contains(c.Message, "mqtt.password") {
				t.Errorf("check message %q", c.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready %d %+v", code, ready)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ready.Checks["store"].Status != "ok" || ready.Checks["provider"].Status != "ok" {
		t.Errorf("other checks %+v", ready.Checks)
	}
	fake.Enqueue(providertest.Reply{Content: "still here"})
	var chat struct{ Response string }
	if code := call(t, base, "POST", "/chat", `{"message":"hi"}`, &chat); code != 200 || chat.Response != "still here" {
		t.Errorf("/chat %d %+v", code, chat)
	}
}

// TestUnreadableCAFileStopsTheStart: a broken setting is a config error
// naming the key, before anything starts.
func TestUnreadableCAFileStopsTheStart(t *testing.T) {
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg, err := config.Load(config.Options{Env: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.Port = 0
	cfg.MQTT = config.MQTT{Enabled: true, Broker: "mqtts://broker.invalid", CAFile: "missing-ca.pem", DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60}
	sys, err := NewCore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	err = sys.BuildGateway()
	if err == nil || !strings.Contains(err.Error(), "mqtt.ca_file") || !strings.Contains(err.Error(), "missing-ca.pem") {
		t.Fatalf("BuildGateway: %v", err)
	}
	if sys.HTTP != nil {
		sys.HTTP.Stop(context.Background())
	}
}
