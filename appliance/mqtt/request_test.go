package mqtt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/mqtt/mqtttest"
)

// TestAgentRequestAnsweredWithCorrelation: an MQTT 5 request with a
// response topic and correlation data is answered there, with the same
// correlation data and the request's id, at QoS 1; the turn runs on the
// mqtt channel in the session asked for, with the restricted tools.
func TestAgentRequestAnsweredWithCorrelation(t *testing.T) {
	b := startBroker(t, false)
	agent := &fakeAgent{}
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = agent.ask })
	waitCheck(t, l, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/#")

	corr := []byte{0xde, 0xad, 0x01}
	reply := prefix + "/agent/response/automation-7"
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"hello","session_key":"ha:morning","id":"r1"}`), 1, false,
		&paho.PublishProperties{ResponseTopic: reply, CorrelationData: corr})
	m := auto.Wait(t, wait, "the answer", func(m mqtttest.Message) bool { return m.Topic == reply })
	if !bytes.Equal(m.CorrelationData, corr) {
		t.Errorf("correlation data %x, want %x", m.CorrelationData, corr)
	}
	if m.QoS != 1 || m.ContentType != "application/json" {
		t.Errorf("answer at QoS %d, content type %q", m.QoS, m.ContentType)
	}
	got := decode(t, m)
	if got["id"] != "r1" || got["response"] != "echo: hello" || got["session_key"] != "ha:morning" {
		t.Errorf("answer %v", got)
	}
	if _, ok := got["error"]; ok {
		t.Errorf("answer carries an error: %v", got)
	}
	calls := agent.asked()
	want := bus.Inbound{Channel: "mqtt", SessionKey: "ha:morning", Text: "hello", RestrictTools: true}
	if len(calls) != 1 || fmt.Sprint(calls[0]) != fmt.Sprint(want) {
		t.Errorf("agent asked %+v, want %+v", calls, want)
	}
	if len(auto.Messages(prefix+"/agent/response")) != 0 {
		t.Error("answered on agent/response as well as on the response topic")
	}
}

// TestRequestsWithoutResponseTopic: a request from an MQTT 3.1.1 client
// (Home Assistant's mqtt.publish) is answered on agent/response with its
// id; plain text is a message; a malformed request gets an error answer.
func TestRequestsWithoutResponseTopic(t *testing.T) {
	b := startBroker(t, false)
	agent := &fakeAgent{}
	l, _ := testLink(t, b.URL(), func(o *Options) {
		o.Agent = agent.ask
		o.Config.AllowAllTools = true
	})
	waitCheck(t, l, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	answer := func(id string) map[string]any {
		t.Helper()
		return decode(t, auto.Wait(t, wait, "answer "+id, func(m mqtttest.Message) bool {
			var r struct{ ID json.RawMessage }
			json.Unmarshal(m.Payload, &r)
			return string(r.ID) == id
		}))
	}
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"one","id":11}`), 1, false, nil)
	if got := answer("11"); got["response"] != "echo: one" {
		t.Errorf("answer %v", got)
	}
	auto.Publish(t, prefix+"/agent/request", []byte(`{"id":"bad"}`), 1, false, nil)
	if got := answer(`"bad"`); !strings.Contains(fmt.Sprint(got["error"]), "no message") {
		t.Errorf("answer to a request without message %v", got)
	}
	auto.Publish(t, prefix+"/agent/request", []byte("Good morning"), 0, false, nil)
	got := answer("null")
	if got["response"] != "echo: Good morning" || got["session_key"] != defaultSession {
		t.Errorf("answer to plain text at QoS 0 %v", got)
	}
	for _, in := range agent.asked() {
		if in.RestrictTools {
			t.Errorf("restricted tools despite allow_all_tools: %+v", in)
		}
	}
	if n := len(agent.asked()); n != 2 {
		t.Errorf("agent asked %d times, want 2 (the malformed request never reaches it)", n)
	}
}

// TestBusyAgentLosesNoRequest: twenty QoS 1 requests sent at once, to an
// agent that is busy at first and then slow: the broker holds back all but
// the receive maximum, the board waits out the busy answers, and every
// request is answered exactly once.
func TestBusyAgentLosesNoRequest(t *testing.T) {
	b := startBroker(t, false)
	agent := &fakeAgent{busy: 3, gate: make(chan struct{}), began: make(chan string, 64)}
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = agent.ask })
	waitCheck(t, l, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	const n = 20
	for i := range n {
		auto.Publish(t, prefix+"/agent/request", fmt.Appendf(nil, `{"message":"q%d","id":%d,"session_key":"s%d"}`, i, i, i), 1, false, nil)
	}
	// Turns begin up to the receive maximum; the rest wait on the broker.
	deadline := time.After(wait)
	for began := 0; began < receiveMaximum; began++ {
		select {
		case <-agent.began:
		case <-deadline:
			t.Fatalf("only %d turns began", began)
		}
	}
	select {
	case q := <-agent.began:
		t.Fatalf("turn %s began beyond the receive maximum of %d", q, receiveMaximum)
	case <-time.After(500 * time.Millisecond):
	}
	close(agent.gate)
	seen := map[float64]int{}
	auto.Wait(t, 3*wait, "all answers", func(mqtttest.Message) bool {
		clear(seen)
		for _, m := range auto.Messages(prefix + "/agent/response") {
			seen[decode(t, m)["id"].(float64)]++
		}
		return len(seen) == n
	})
	time.Sleep(200 * time.Millisecond)
	for id, c := range seen {
		if c != 1 {
			t.Errorf("request %v answered %d times", id, c)
		}
	}
	if c := len(agent.asked()); c != n {
		t.Errorf("agent ran %d turns for %d requests", c, n)
	}
}

// TestInterruptedRequestIsAnsweredAfterRestart: a request whose turn is cut
// short by the gateway stopping is not acknowledged; the broker hands it to
// the board again after the restart, and it is answered then.
func TestInterruptedRequestIsAnsweredAfterRestart(t *testing.T) {
	b := startBroker(t, false)
	stuck := &fakeAgent{gate: make(chan struct{}), began: make(chan string, 4)}
	first, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = stuck.ask })
	waitCheck(t, first, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"water the plants","id":"w"}`), 1, false, nil)
	select {
	case <-stuck.began:
	case <-time.After(wait):
		t.Fatal("the turn did not begin")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(auto.Messages(prefix + "/agent/response")); n != 0 {
		t.Fatalf("%d answers from the interrupted turn", n)
	}

	again := &fakeAgent{}
	second, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = again.ask })
	waitCheck(t, second, true, wait)
	got := decode(t, auto.Wait(t, wait, "the answer after restart", func(m mqtttest.Message) bool {
		return m.Topic == prefix+"/agent/response"
	}))
	if got["id"] != "w" || got["response"] != "echo: water the plants" {
		t.Errorf("answer %v", got)
	}
}

// TestRequestInFlightSurvivesBrokerRestart: the broker restarts while a
// turn runs; it redelivers the unacknowledged request to the reconnected
// board, which recognises it, runs no second turn, and answers once.
func TestRequestInFlightSurvivesBrokerRestart(t *testing.T) {
	b := startBroker(t, false)
	agent := &fakeAgent{gate: make(chan struct{}), began: make(chan string, 4)}
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = agent.ask })
	waitCheck(t, l, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass)
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"slow one","id":"s"}`), 1, false, nil)
	select {
	case <-agent.began:
	case <-time.After(wait):
		t.Fatal("the turn did not begin")
	}
	b.Restart(t)
	waitCheck(t, l, false, wait)
	waitCheck(t, l, true, wait)
	listener := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	time.Sleep(300 * time.Millisecond) // the redelivery arrives
	close(agent.gate)
	listener.Wait(t, wait, "the answer", func(m mqtttest.Message) bool { return m.Topic == prefix+"/agent/response" })
	time.Sleep(300 * time.Millisecond)
	if n := len(listener.Messages(prefix + "/agent/response")); n != 1 {
		t.Errorf("%d answers, want 1", n)
	}
	if n := len(agent.asked()); n != 1 {
		t.Errorf("%d turns for one request, want 1", n)
	}
	if st := l.Status(); st.Redelivered != 1 || st.Answered != 1 {
		t.Errorf("status %+v: want the redelivery recognised once and one answer", st)
	}
}

// TestSendPublishesMessages: a cron delivery or the message tool's message
// on the mqtt channel reaches <prefix>/messages.
func TestSendPublishesMessages(t *testing.T) {
	b := startBroker(t, false)
	l, _ := testLink(t, b.URL(), nil)
	waitCheck(t, l, true, wait)
	ha := homeAssistant(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := l.Send(ctx, bus.Outbound{Channel: "mqtt", ChatID: "garden", Text: "Tank is low"}); err != nil {
		t.Fatal(err)
	}
	got := decode(t, ha.Wait(t, wait, "message", func(m mqtttest.Message) bool { return m.Topic == prefix+"/messages" }))
	if got["chat_id"] != "garden" || got["text"] != "Tank is low" {
		t.Errorf("message %v", got)
	}
}

// TestAForeignResponseTopicIsNotUsed: a request's MQTT 5 response topic
// outside the board's agent/response gets the answer on the board's own:
// a client could otherwise publish, under the board's login, where its
// own ACL forbids (Home Assistant's discovery, the board's status).
func TestAForeignResponseTopicIsNotUsed(t *testing.T) {
	b := startBroker(t, false)
	agent := &fakeAgent{}
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = agent.ask })
	waitCheck(t, l, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, "#")
	for i, rt := range []string{"homeassistant/sensor/evil/x/config", prefix + "/status", prefix + "/agent/responses", "perch/other/agent/request"} {
		id := fmt.Sprintf("f%d", i)
		auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"hi","id":"`+id+`"}`), 1, false, &paho.PublishProperties{ResponseTopic: rt})
		m := auto.Wait(t, wait, "the answer to "+id, func(m mqtttest.Message) bool {
			return m.Topic != prefix+"/agent/request" && strings.Contains(string(m.Payload), `"id":"`+id+`"`)
		})
		if m.Topic != prefix+"/agent/response" {
			t.Errorf("asked for %s: answered on %s, want %s/agent/response", rt, m.Topic, prefix)
		}
	}
}

// TestARefusedAnswerDoesNotHoldTheRequests: when the broker refuses the
// board's answers (its ACL), each is dropped after a few tries and its
// request acknowledged, so later requests are still taken: one refused
// answer retried for ever held its slot, and after eight such every
// request went unanswered, across restarts.
func TestARefusedAnswerDoesNotHoldTheRequests(t *testing.T) {
	b := mqtttest.Start(t, mqtttest.Options{
		Users: map[string]string{boardUser: boardPass, haUser: haPass},
		ACL: `user perch
topic read perch/kitchen/agent/request
topic write perch/kitchen/status
topic write perch/kitchen/sensor/#
topic write homeassistant/#
topic read homeassistant/status

user ha
topic readwrite #
`,
	})
	agent := &fakeAgent{}
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = agent.ask })
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/#")
	time.Sleep(500 * time.Millisecond) // connected
	for i := range 12 {
		auto.Publish(t, prefix+"/agent/request", []byte(fmt.Sprintf(`{"message":"m%d"}`, i)), 1, false, nil)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(agent.asked()) < 12 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(agent.asked()); n != 12 {
		t.Errorf("%d of 12 requests reached the agent; the refused answers held the rest", n)
	}
	_ = l
}

// TestARetainedRequestIsNotAnsweredAtEachStart: a request left retained
// on the broker was answered again at every start of the board.
func TestARetainedRequestIsNotAnsweredAtEachStart(t *testing.T) {
	b := startBroker(t, false)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"left retained"}`), 1, true, nil)
	agent := &fakeAgent{}
	l, _ := testLink(t, b.URL(), func(o *Options) { o.Agent = agent.ask })
	waitCheck(t, l, true, wait)
	// The check may pass before the subscription is made: ask until a new
	// request is answered.
	deadline := time.Now().Add(wait)
	for answered := false; !answered; {
		if time.Now().After(deadline) {
			t.Fatal("no new request was answered")
		}
		auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"a new one"}`), 1, false, nil)
		time.Sleep(300 * time.Millisecond)
		for _, m := range auto.Messages(prefix + "/agent/response") {
			answered = answered || strings.Contains(string(m.Payload), "a new one")
		}
	}
	for _, in := range agent.asked() {
		if in.Text == "left retained" {
			t.Error("the retained request was answered")
		}
	}
}

// TestAFailedTurnTellsARestrictedClientNothingOfTheSetup: any client of
// the broker may ask; a failure's answer does not show it the provider's
// address or config keys (the log has them).
func TestAFailedTurnTellsARestrictedClientNothingOfTheSetup(t *testing.T) {
	b := startBroker(t, false)
	l, logs := testLink(t, b.URL(), func(o *Options) {
		o.Agent = func(context.Context, bus.Inbound) (string, error) {
			return "", fmt.Errorf(`provider openai: cannot reach the API: Post "http://192.168.1.5:11434/chat/completions"; check providers.openai.api_base`)
		}
	})
	waitCheck(t, l, true, wait)
	auto := mqtttest.Connect(t, b.URL(), haUser, haPass, prefix+"/agent/response")
	auto.Publish(t, prefix+"/agent/request", []byte(`{"message":"hi","id":"x"}`), 1, false, nil)
	m := auto.Wait(t, wait, "the answer", func(m mqtttest.Message) bool { return true })
	if p := string(m.Payload); strings.Contains(p, "192.168") || strings.Contains(p, "providers.") || !strings.Contains(p, "try again later") {
		t.Errorf("answer %s", p)
	}
	if !strings.Contains(logs.String(), "192.168.1.5") {
		t.Error("the log lacks the reason")
	}
}
