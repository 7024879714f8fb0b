package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/store/storetest"
)

// pacedProvider answers each call after d with "echo: " and the last
// message.
type pacedProvider struct{ d time.Duration }

func (p pacedProvider) Chat(ctx context.Context, r provider.Request) (*provider.Response, error) {
	select {
	case <-time.After(p.d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	last := ""
	if n := len(r.Messages); n > 0 {
		last = r.Messages[n-1].Content
	}
	return &provider.Response{Content: "echo: " + last, FinishReason: "stop"}, nil
}
func (pacedProvider) Name() string  { return "paced" }
func (pacedProvider) Model() string { return "m" }

func pacedLoop(t *testing.T, d time.Duration, concurrent, queued int, timeout time.Duration) (*agent.Loop, *bus.Bus) {
	t.Helper()
	b := bus.New(128)
	l := agent.New(agent.Options{Store: storetest.Open(t), Provider: pacedProvider{d}, Bus: b, Workspace: t.TempDir(),
		Log: slog.New(slog.DiscardHandler), MaxConcurrentTurns: concurrent, MaxQueuedTurns: queued, TurnTimeout: timeout, HistoryLimit: 100})
	t.Cleanup(func() { l.Stop(context.Background()) })
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l, b
}

// TestAChatsBacklogHoldsUpNoOtherChat: a backlog in one chat (answered one
// message at a time, in order) holds up neither another chat's message
// nor an API caller, while turn slots are free. When the backlog took the
// slots of messages waiting in line, the other chat waited for the whole
// backlog and the API was refused as busy.
func TestAChatsBacklogHoldsUpNoOtherChat(t *testing.T) {
	const turn = 200 * time.Millisecond
	l, b := pacedLoop(t, turn, 4, 0, time.Minute)
	for i := range 12 {
		b.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "A", Text: fmt.Sprint("a", i)})
	}
	start := time.Now()
	b.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "B", Text: "b0"})
	time.Sleep(50 * time.Millisecond)
	if _, err := l.Process(context.Background(), bus.Inbound{Channel: "cli", SessionKey: "api", Text: "hi"}); err != nil {
		t.Errorf("an API call during another chat's backlog: %v", err)
	}
	var a []string
	for len(a) < 12 {
		select {
		case out := <-b.Outbound():
			if out.ChatID == "B" {
				if took := time.Since(start); took > 4*turn {
					t.Errorf("chat B was answered after %v; a turn takes %v", took, turn)
				}
				continue
			}
			a = append(a, out.Text)
		case <-time.After(10 * time.Second):
			t.Fatalf("chat A: %d of 12 answers", len(a))
		}
	}
	for i, got := range a {
		if want := fmt.Sprint("echo: a", i); got != want {
			t.Fatalf("chat A's answer %d is %q, want %q", i, got, want)
		}
	}
}

// TestABacklogsTurnsDoNotTimeOutInLine: a message's turn time starts when
// its turn does, not while it waits behind its chat's earlier messages: a
// backlog longer than one turn's timeout is answered whole, in order.
func TestABacklogsTurnsDoNotTimeOutInLine(t *testing.T) {
	_, b := pacedLoop(t, 300*time.Millisecond, 4, 8, time.Second)
	for i := range 8 {
		b.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "A", Text: fmt.Sprint("a", i), InboxID: uint64(i + 1)})
	}
	for i := range 8 {
		select {
		case out := <-b.Outbound():
			if want := fmt.Sprint("echo: a", i); out.Text != want || out.InboxID != uint64(i+1) {
				t.Fatalf("answer %d: %q (inbox %d), want %q", i, out.Text, out.InboxID, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 8 answers", i)
		}
	}
}

// TestBusAndAPITurnsMixed: bus messages and API calls (some given up at
// once, some commands) on the same few chats, under the race detector:
// every bus message is answered and the loop ends idle.
func TestBusAndAPITurnsMixed(t *testing.T) {
	l, b := pacedLoop(t, time.Millisecond, 3, 2, 5*time.Second)
	const n = 300
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			b.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: fmt.Sprint(i % 3), Text: fmt.Sprint("m", i)})
		}()
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*time.Millisecond)
			defer cancel()
			text := "hi"
			if i%4 == 0 {
				text = "/help"
			}
			l.Process(ctx, bus.Inbound{Channel: "telegram", ChatID: fmt.Sprint(i % 3), Text: text})
		}()
	}
	answers := 0
	for answers < n {
		select {
		case <-b.Outbound():
			answers++
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d bus messages answered; %+v", answers, n, l.Stats())
		}
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for st := l.Stats(); st != (agent.Stats{}); st = l.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("the loop is not idle after every answer: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQueuedMessagesAreBounded: messages from many chats, one each, are
// held in memory up to the bound, counted as queued; the rest wait on the
// bus (and, the bus full, in the channels' inbox). A worker waiting for a
// turn slot held its message uncounted, so nothing bounded them: 3,000
// chats, 3,000 goroutines, a queue depth of 0.
func TestQueuedMessagesAreBounded(t *testing.T) {
	l, b := pacedLoop(t, time.Hour, 1, 0, 2*time.Hour)
	published := 0
	for i := range 3000 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := b.PublishInbound(ctx, bus.Inbound{Channel: "telegram", ChatID: fmt.Sprint("chat", i), Text: "hi"})
		cancel()
		if err != nil {
			break
		}
		published++
	}
	// 1,024 queued, one turn running, the bus's 128 and the message the
	// consumer holds while it waits for room.
	if published > 1024+1+128+1 {
		t.Errorf("%d messages were taken before the bus filled; the loop holds at most 1,024 queued", published)
	}
	if st := l.Stats(); st.QueueDepth < 1000 || st.Running != 1 {
		t.Errorf("stats with a full queue: %+v; want about 1,024 queued and 1 running", st)
	}
}

// TestABusTurnsDeadlineStartsWhenItRuns: API turns hold the one turn slot
// back to back; a chat message that waits behind them for longer than the
// turn timeout is still answered, as its time starts once it runs. Its
// deadline started when its worker took it, and it was answered with an
// apology (and gone from the inbox) before it ever reached the model.
func TestABusTurnsDeadlineStartsWhenItRuns(t *testing.T) {
	const turn = 300 * time.Millisecond
	l, b := pacedLoop(t, turn, 1, 4, 700*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Process(context.Background(), bus.Inbound{Channel: "cli", SessionKey: fmt.Sprint("api", i), Text: "hi"}); err != nil {
				t.Errorf("API turn %d: %v", i, err)
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	b.PublishInbound(context.Background(), bus.Inbound{Channel: "telegram", ChatID: "A", Text: "waited", InboxID: 1})
	select {
	case out := <-b.Outbound():
		if out.Text != "echo: waited" {
			t.Errorf("the chat message waiting %v behind API turns was answered %q", 2*turn, out.Text)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	wg.Wait()
}
