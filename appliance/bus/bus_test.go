package bus

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// PublishInbound waits for room while the context allows, and gives up with
// the context's error when it ends.
func TestPublishInboundWaitsUntilContextEnds(t *testing.T) {
	b := New(1)
	if err := b.PublishInbound(context.Background(), Inbound{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := b.PublishInbound(ctx, Inbound{Text: "second"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish on a full queue = %v, want the context's deadline", err)
	}
	if b.InboundDepth() != 1 {
		t.Errorf("depth = %d, want 1 (the refused message must not be queued)", b.InboundDepth())
	}
}

// A waiting PublishInbound succeeds as soon as a reader makes room.
func TestPublishInboundSucceedsWhenRoomAppears(t *testing.T) {
	b := New(1)
	if err := b.PublishInbound(context.Background(), Inbound{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.PublishInbound(context.Background(), Inbound{Text: "second"}) }()
	// The publisher is blocked until we read: nothing else can fill the
	// queue, so whenever it returns it must have queued "second".
	if got := (<-b.Inbound()).Text; got != "first" {
		t.Fatalf("read %q, want first", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("publish after room appeared = %v", err)
	}
	if got := (<-b.Inbound()).Text; got != "second" {
		t.Fatalf("read %q, want second", got)
	}
}

// PublishOutbound never blocks: a full queue is ErrFull at once.
func TestPublishOutboundNeverBlocks(t *testing.T) {
	b := New(2)
	for i := range 2 {
		if err := b.PublishOutbound(Outbound{Channel: "telegram", Text: string(rune('a' + i))}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- b.PublishOutbound(Outbound{Channel: "telegram", Text: "c"}) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrFull) {
			t.Fatalf("publish on a full queue = %v, want ErrFull", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PublishOutbound blocked on a full queue")
	}
	if b.OutboundDepth() != 2 {
		t.Errorf("depth = %d, want 2", b.OutboundDepth())
	}
	if got := (<-b.Outbound()).Text; got != "a" {
		t.Errorf("first out = %q, want a (FIFO)", got)
	}
}

// New clamps a size below 1, so a bus always holds at least one message.
func TestNewClampsSize(t *testing.T) {
	b := New(0)
	if err := b.PublishOutbound(Outbound{}); err != nil {
		t.Fatalf("a size-0 bus holds no message: %v", err)
	}
	if err := b.PublishOutbound(Outbound{}); !errors.Is(err, ErrFull) {
		t.Fatalf("second message = %v, want ErrFull", err)
	}
}

// After Close both publishers answer ErrClosed, and readers drain what was
// queued before the channels report closed.
func TestCloseRejectsPublishersAndLetsReadersDrain(t *testing.T) {
	b := New(4)
	ctx := context.Background()
	if err := b.PublishInbound(ctx, Inbound{Text: "in"}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishOutbound(Outbound{Text: "out"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close() // idempotent

	if err := b.PublishInbound(ctx, Inbound{Text: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("PublishInbound after Close = %v, want ErrClosed", err)
	}
	if err := b.PublishOutbound(Outbound{Text: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("PublishOutbound after Close = %v, want ErrClosed", err)
	}

	var ins []string
	for m := range b.Inbound() {
		ins = append(ins, m.Text)
	}
	var outs []string
	for m := range b.Outbound() {
		outs = append(outs, m.Text)
	}
	if len(ins) != 1 || ins[0] != "in" {
		t.Errorf("drained inbound %q, want [in]", ins)
	}
	if len(outs) != 1 || outs[0] != "out" {
		t.Errorf("drained outbound %q, want [out]", outs)
	}
}

// Close while publishers run concurrently neither panics (send on closed
// channel) nor loses the ErrClosed answer.
func TestCloseConcurrentWithPublishers(t *testing.T) {
	b := New(1024)
	var wg sync.WaitGroup
	ctx := context.Background()
	for range 8 {
		wg.Go(func() {
			for range 100 {
				err := b.PublishInbound(ctx, Inbound{})
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("PublishInbound = %v", err)
					return
				}
				err = b.PublishOutbound(Outbound{})
				if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFull) {
					t.Errorf("PublishOutbound = %v", err)
					return
				}
			}
		})
	}
	b.Close()
	wg.Wait()
}

func TestIsInternal(t *testing.T) {
	tests := []struct {
		channel string
		want    bool
	}{
		{ChannelCLI, true},
		{ChannelSystem, true},
		{ChannelSubagent, true},
		{"", true}, // no channel: nothing external to send to
		{"telegram", false},
		{"slack", false},
		{"line", false},
		{"CLI", false}, // names are exact
	}
	for _, tt := range tests {
		t.Run(tt.channel, func(t *testing.T) {
			if got := IsInternal(tt.channel); got != tt.want {
				t.Errorf("IsInternal(%q) = %v, want %v", tt.channel, got, tt.want)
			}
		})
	}
}

func TestInboundKey(t *testing.T) {
	tests := []struct {
		name string
		in   Inbound
		want string
	}{
		{"derived from channel and chat", Inbound{Channel: "telegram", ChatID: "42"}, "telegram:42"},
		{"explicit key wins", Inbound{Channel: "telegram", ChatID: "42", SessionKey: "rest:default"}, "rest:default"},
		{"chat may be empty", Inbound{Channel: "cli"}, "cli:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.Key(); got != tt.want {
				t.Errorf("Key() = %q, want %q", got, tt.want)
			}
		})
	}
}

// Close wakes a publisher waiting for room on the inbound queue (it answers
// ErrClosed) instead of waiting for that publisher's context, and the agent's
// PublishOutbound does not stall meanwhile.
func TestCloseWakesWaitingInboundPublisher(t *testing.T) {
	b := New(1)
	ctx := context.Background()
	if err := b.PublishInbound(ctx, Inbound{Text: "fills the queue"}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	wctx := &doneWatch{Context: ctx, asked: make(chan struct{})}
	go func() { waiting <- b.PublishInbound(wctx, Inbound{Text: "waits"}) }()
	<-wctx.asked // the publisher is at its select, holding its place

	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()

	deadline := time.After(5 * time.Second)
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrClosed) && err != nil {
			t.Fatalf("waiting publisher = %v, want ErrClosed (or queued before the close)", err)
		}
	case <-deadline:
		t.Fatal("Close did not wake a publisher waiting on a full inbound queue")
	}
	select {
	case <-closed:
	case <-deadline:
		t.Fatal("Close blocked behind a waiting publisher")
	}
	if err := b.PublishOutbound(Outbound{}); !errors.Is(err, ErrClosed) {
		t.Errorf("PublishOutbound after Close = %v, want ErrClosed", err)
	}
}

// doneWatch reports when a publisher first asks for Done, which it does
// as it starts waiting.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (d *doneWatch) Done() <-chan struct{} {
	d.once.Do(func() { close(d.asked) })
	return d.Context.Done()
}
