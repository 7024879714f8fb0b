package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/store/storetest"
)

// slowSession is a session whose first commit (the user's message) waits
// for release, to show what a turn does while that commit is in flight.
type slowSession struct {
	release chan struct{}
	err     error // the first commit's result

	mu      sync.Mutex
	commits [][]chat.Message
	durable atomic.Bool // the user's message is committed
}

func (s *slowSession) Key() string                      { return "t:1" }
func (s *slowSession) History() ([]chat.Message, error) { return nil, nil }
func (s *slowSession) Append(msgs []chat.Message, _ chat.Usage) error {
	s.mu.Lock()
	first := len(s.commits) == 0
	s.commits = append(s.commits, msgs)
	s.mu.Unlock()
	if first {
		<-s.release
		if s.err != nil {
			return s.err
		}
		s.durable.Store(true)
	}
	return nil
}

// scriptedProvider answers from a list, noting whether the user's message
// was durable when each call arrived.
type scriptedProvider struct {
	sess    *slowSession
	replies []*provider.Response
	calls   atomic.Int32
	during  chan bool // per call: was the user's message durable then?
}

func (p *scriptedProvider) Name() string  { return "fake" }
func (p *scriptedProvider) Model() string { return "m" }
func (p *scriptedProvider) Chat(ctx context.Context, _ provider.Request) (*provider.Response, error) {
	i := p.calls.Add(1) - 1
	p.during <- p.sess.durable.Load()
	return p.replies[i], nil
}

// TestUserMessageCommitOverlapsTheProviderCall: the provider is called while
// the user's message is still being committed, but no tool runs and no
// reply leaves before it is durable.
func TestUserMessageCommitOverlapsTheProviderCall(t *testing.T) {
	sess := &slowSession{release: make(chan struct{})}
	var toolSawDurable atomic.Bool
	reg := tools.NewRegistry(nil)
	reg.Register(tools.Func{ToolName: "probe", ToolDescription: "d", Params: tools.Object(nil), Run: func(context.Context, tools.Args) tools.Result {
		toolSawDurable.Store(sess.durable.Load())
		return tools.Text("probed")
	}})
	p := &scriptedProvider{sess: sess, during: make(chan bool, 4), replies: []*provider.Response{
		{ToolCalls: []chat.ToolCall{{ID: "c1", Name: "probe", Arguments: "{}"}}},
		{Content: "done"},
	}}
	l := New(Options{Tools: reg})
	defer l.Stop(context.Background())
	done := make(chan *Reply, 1)
	go func() {
		rep, err := l.runTurn(context.Background(), p, sess, bus.Inbound{Channel: "cli", Text: "hi"}, turnOpts{})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	select {
	case durable := <-p.during:
		if durable {
			t.Fatal("the provider was called only after the user's message was committed: no overlap")
		}
	case <-time.After(5 * time.Second):
		close(sess.release)
		t.Fatal("the provider was not called while the user's message was being committed")
	}
	select {
	case <-done:
		t.Fatal("the turn finished before the user's message was durable")
	case <-time.After(50 * time.Millisecond):
	}
	if p.calls.Load() != 1 {
		t.Fatal("the second round (after the tool) ran before the user's message was durable")
	}
	close(sess.release)
	rep := <-done
	if rep == nil || rep.Text != "done" || !toolSawDurable.Load() {
		t.Fatalf("reply %+v, tool saw durable %v", rep, toolSawDurable.Load())
	}
	if len(sess.commits) != 2 || sess.commits[0][0].Role != "user" || len(sess.commits[1]) != 3 {
		t.Fatalf("commits %+v: want the user's message, then the exchange", sess.commits)
	}
}

// TestFailedUserCommitIsNeverAnswered: when the user's message cannot be
// stored, no tool runs and the turn fails with the store's error.
func TestFailedUserCommitIsNeverAnswered(t *testing.T) {
	diskFull := errors.New("no space left on device")
	sess := &slowSession{release: make(chan struct{}), err: diskFull}
	close(sess.release)
	var ran atomic.Bool
	reg := tools.NewRegistry(nil)
	reg.Register(tools.Func{ToolName: "probe", ToolDescription: "d", Params: tools.Object(nil), Run: func(context.Context, tools.Args) tools.Result {
		ran.Store(true)
		return tools.Text("x")
	}})
	p := &scriptedProvider{sess: sess, during: make(chan bool, 4), replies: []*provider.Response{
		{ToolCalls: []chat.ToolCall{{ID: "c1", Name: "probe", Arguments: "{}"}}},
	}}
	l := New(Options{Tools: reg})
	defer l.Stop(context.Background())
	_, err := l.runTurn(context.Background(), p, sess, bus.Inbound{Channel: "cli", Text: "hi"}, turnOpts{})
	if !errors.Is(err, diskFull) || ran.Load() {
		t.Fatalf("err %v, tool ran %v", err, ran.Load())
	}
	if len(sess.commits) != 1 {
		t.Errorf("%d commits after a failed user commit, want none more", len(sess.commits)-1)
	}
}

// TestFastAnswerIsOneCommit: a model that answers within the grace costs
// one commit for the whole exchange, the user's message first.
func TestFastAnswerIsOneCommit(t *testing.T) {
	sess := &slowSession{release: make(chan struct{})}
	close(sess.release)
	p := &scriptedProvider{sess: sess, during: make(chan bool, 4), replies: []*provider.Response{{Content: "hello"}}}
	l := New(Options{UserCommitGrace: time.Minute})
	defer l.Stop(context.Background())
	rep, err := l.runTurn(context.Background(), p, sess, bus.Inbound{Channel: "cli", Text: "hi"}, turnOpts{})
	if err != nil || rep.Text != "hello" {
		t.Fatal(rep, err)
	}
	if len(sess.commits) != 1 || len(sess.commits[0]) != 2 || sess.commits[0][0].Content != "hi" || sess.commits[0][1].Content != "hello" {
		t.Fatalf("commits %+v, want one holding the user's message and the answer", sess.commits)
	}
}

// slowProvider answers after a delay, noting how many commits the session
// had by then.
type slowProvider struct {
	sess    *slowSession
	delay   time.Duration
	commits int
}

func (p *slowProvider) Name() string  { return "slow" }
func (p *slowProvider) Model() string { return "m" }
func (p *slowProvider) Chat(ctx context.Context, _ provider.Request) (*provider.Response, error) {
	time.Sleep(p.delay)
	p.sess.mu.Lock()
	p.commits = len(p.sess.commits)
	p.sess.mu.Unlock()
	return &provider.Response{Content: "thought about it"}, nil
}

// TestSlowAnswerCommitsTheUserMessageDuringTheCall: a model that takes long
// (as real ones do) finds the user's message already safe on disk.
func TestSlowAnswerCommitsTheUserMessageDuringTheCall(t *testing.T) {
	sess := &slowSession{release: make(chan struct{})}
	close(sess.release)
	p := &slowProvider{sess: sess, delay: 300 * time.Millisecond}
	l := New(Options{UserCommitGrace: 10 * time.Millisecond})
	defer l.Stop(context.Background())
	if _, err := l.runTurn(context.Background(), p, sess, bus.Inbound{Channel: "cli", Text: "hi"}, turnOpts{}); err != nil {
		t.Fatal(err)
	}
	if p.commits != 1 || !sess.durable.Load() {
		t.Fatalf("%d commits while the provider thought, want the user's message", p.commits)
	}
	if len(sess.commits) != 2 || len(sess.commits[1]) != 1 {
		t.Fatalf("commits %+v: want the user's message, then the answer", sess.commits)
	}
}

// keyRecorder answers at once and records each call's HistoryKey.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (p *keyRecorder) Name() string  { return "fake" }
func (p *keyRecorder) Model() string { return "m" }
func (p *keyRecorder) Chat(_ context.Context, r provider.Request) (*provider.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, r.HistoryKey)
	return &provider.Response{Content: "ok"}, nil
}

// TestHistoryKeyOnlyForStoredSessions: a stored session's history is
// never changed in place, so its turns let the provider keep the history's
// encoding (HistoryKey); a subagent's history in memory is appended in
// place and is sent without a key.
func TestHistoryKeyOnlyForStoredSessions(t *testing.T) {
	db := storetest.Open(t)
	p := &keyRecorder{}
	l := New(Options{Store: db})
	defer l.Stop(context.Background())
	in := bus.Inbound{Channel: "cli", Text: "hi"}
	if _, err := l.runTurn(context.Background(), p, storeSession{db: db, key: "cli:1", limit: 200, in: in}, in, turnOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.runTurn(context.Background(), p, &memSession{key: "subagent:1"}, in, turnOpts{}); err != nil {
		t.Fatal(err)
	}
	if len(p.keys) != 2 || p.keys[0] != "cli:1" || p.keys[1] != "" {
		t.Fatalf("history keys %q, want the stored session's key, then none", p.keys)
	}
}

// droppingProvider counts DropCache calls.
type droppingProvider struct {
	scriptedProvider
	drops int
}

func (p *droppingProvider) DropCache() { p.drops++ }

// TestDropCachesReachesTheProvider: the loop hands DropCaches on to a
// provider that keeps a cache, and does nothing with one that keeps none
// or with no provider at all.
func TestDropCachesReachesTheProvider(t *testing.T) {
	p := &droppingProvider{}
	l := New(Options{Provider: p})
	l.DropCaches()
	if p.drops != 1 {
		t.Fatalf("DropCache called %d times, want 1", p.drops)
	}
	l.SetProvider(&scriptedProvider{}, nil)
	l.DropCaches()
	New(Options{}).DropCaches()
	if p.drops != 1 {
		t.Fatalf("the replaced provider was called: %d", p.drops)
	}
}
