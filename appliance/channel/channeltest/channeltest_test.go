package channeltest

import (
	"context"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

// loopback is a channel whose platform is the test: Start hands one
// message to the intake; Send records the answer.
type loopback struct {
	in   *channel.Intake
	sent chan bus.Outbound
}

func (l *loopback) Name() string { return "loop" }
func (l *loopback) Start(ctx context.Context) error {
	return l.in.Receive(ctx, channel.Message{EventID: "e1", ChatID: "c1", MessageID: "m1", SenderID: "u1", Text: "ping"})
}
func (l *loopback) Stop(context.Context) error                   { return nil }
func (l *loopback) Check(context.Context) (bool, string)         { return true, "ok" }
func (l *loopback) Send(_ context.Context, m bus.Outbound) error { l.sent <- m; return nil }

// TestEnvAnswersThroughTheAgent: a message received by a channel in an Env
// is answered by the agent (the fake provider's echo) to the same chat.
func TestEnvAnswersThroughTheAgent(t *testing.T) {
	e := New(t, Options{})
	l := &loopback{sent: make(chan bus.Outbound, 1)}
	l.in = channel.NewIntake(e.Deps(config.ChannelSection{Name: "loop", Enabled: true}), channel.IntakeOptions{})
	if err := e.Start(l); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-l.sent:
		if m.ChatID != "c1" || m.Text != "echo: ping" || m.ReplyTo != "m1" {
			t.Errorf("answer %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	if n := e.Provider.Calls(); n != 1 {
		t.Errorf("the model was asked %d times", n)
	}
}
