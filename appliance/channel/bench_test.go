package channel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/config"
)

// benchChannel is a platform whose wire is a Go channel: what is left of a
// channel message's cost is the framework's (dedupe, inbox, bus, dispatch).
type benchChannel struct {
	in   *channel.Intake
	sent chan bus.Outbound
}

func (c *benchChannel) Name() string                                 { return "bench" }
func (c *benchChannel) Start(context.Context) error                  { return nil }
func (c *benchChannel) Stop(context.Context) error                   { return nil }
func (c *benchChannel) Check(context.Context) (bool, string)         { return true, "" }
func (c *benchChannel) Send(_ context.Context, m bus.Outbound) error { c.sent <- m; return nil }

// BenchmarkTurnLikeChat is a turn as POST /chat runs it: Process, in
// process, against the fake provider.
func BenchmarkTurnLikeChat(b *testing.B) {
	e := channeltest.New(b, channeltest.Options{})
	if err := e.Start(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Agent.Process(ctx, bus.Inbound{Channel: "cli", SessionKey: "rest:bench", Text: "hi"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTurnThroughAChannel is the same turn arriving as a chat message
// and answered through the dispatcher: the difference to
// BenchmarkTurnLikeChat is the channel framework's overhead.
func BenchmarkTurnThroughAChannel(b *testing.B) {
	e := channeltest.New(b, channeltest.Options{})
	c := &benchChannel{sent: make(chan bus.Outbound, 1)}
	c.in = channel.NewIntake(e.Deps(config.ChannelSection{Name: "bench", Enabled: true, AllowFrom: []string{"u"}}), channel.IntakeOptions{})
	if err := e.Start(c); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint(i)
		if err := c.in.Receive(ctx, channel.Message{EventID: id, ChatID: "c", SenderID: "u", MessageID: id, Text: "hi"}); err != nil {
			b.Fatal(err)
		}
		<-c.sent
	}
}
