package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/store"
)

// Provider is what the loop needs of an upstream model.
type Provider interface {
	Chat(ctx context.Context, r provider.Request) (*provider.Response, error)
	Name() string
	Model() string
}

// Options configure a Loop.
type Options struct {
	Store *store.DB
	// Provider may be nil: the loop then answers commands and refuses
	// other messages with NoProvider, whose message says what to set.
	Provider   Provider
	NoProvider error
	Tools      *tools.Registry
	Bus        *bus.Bus
	Log        *slog.Logger
	Workspace  string

	MaxToolIterations  int
	MaxConcurrentTurns int
	MaxQueuedTurns     int
	TurnTimeout        time.Duration
	HistoryLimit       int
	MaxSubagents       int
	// UserCommitGrace is how long a provider call may run before the user's
	// message is committed on its own (see userCommit); 0 means the default,
	// negative commits at once.
	UserCommitGrace time.Duration
}

// Reply is a turn's outcome.
type Reply struct {
	Text string
	UI   []api.UICommand
	// ChatCommand is set when a chat command answered, not the model.
	ChatCommand bool
	Usage       chat.Usage
}

// Loop runs turns.
type Loop struct {
	opts Options
	log  *slog.Logger

	prov   atomic.Pointer[provHolder]
	prompt *promptBuilder

	sem      chan struct{}
	admitted atomic.Int64 // turns and commands waiting or running
	// Chat messages from the bus wait in their chat's queue, each chat
	// answered by a worker of its own, one message after the other: a
	// chat's messages in their order, no chat waiting behind another's
	// backlog, and no turn's time spent waiting in line. busRun bounds
	// the workers in a turn at once; waiting counts the messages queued,
	// and past maxWaiting the consumer stops taking from the bus, where
	// the channels keep them in their inbox.
	queuesMu sync.Mutex
	queues   map[string][]bus.Inbound
	waiting  int
	room     chan struct{} // a message left a queue (capacity 1)
	busRun   chan struct{}
	running  atomic.Int64
	// answering counts chat commands being answered: admitted, not
	// waiting, and not turns at the model either.
	answering atomic.Int64
	turns     atomic.Uint64 // turns and commands begun, ever

	locksMu sync.Mutex
	locks   map[string]*sessionLock

	cmdMu    sync.RWMutex
	commands map[string]ChatCommand

	routesMu sync.Mutex
	// routes are the trusted one-to-one chats, the newest first, one per
	// channel (routes.go); read from the store once after a start.
	routes       []route
	routesLoaded bool
	routesKept   bool // the store had a list
	// routeSaving is set while a goroutine writes routes to the store;
	// routeAgain asks it for one more write, as they changed meanwhile.
	// routesStopped (set by Stop) starts no write any more.
	routeSaving, routeAgain, routesStopped bool
	routesWG                               sync.WaitGroup
	windows                                windows
	subagents                              *Subagents
	started                                time.Time
	// base is cancelled by Stop: every turn's context derives from it, so
	// shutting down cancels turns in flight instead of waiting for them.
	base       context.Context
	cancelBase context.CancelFunc
	consumerWG sync.WaitGroup
	turnsWG    sync.WaitGroup
}

type provHolder struct {
	p   Provider
	err error
}

// sessionLock is one session's turn slot. Its waiters are served in the
// order they came (a channel's blocked senders queue), and each chat's
// bus messages reach it one at a time from the chat's worker.
type sessionLock struct {
	ch   chan struct{}
	refs int
}

// New returns a loop; Start begins consuming the bus.
func New(opts Options) *Loop {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxToolIterations < 1 {
		opts.MaxToolIterations = 20
	}
	if opts.MaxConcurrentTurns < 1 {
		opts.MaxConcurrentTurns = 16
	}
	if opts.MaxQueuedTurns < 0 {
		opts.MaxQueuedTurns = 0
	}
	if opts.TurnTimeout <= 0 {
		opts.TurnTimeout = 5 * time.Minute
	}
	if opts.HistoryLimit < 100 {
		opts.HistoryLimit = 200
	}
	if opts.MaxSubagents < 1 {
		opts.MaxSubagents = 4
	}
	if opts.UserCommitGrace == 0 {
		opts.UserCommitGrace = 25 * time.Millisecond
	}
	if opts.Tools == nil {
		opts.Tools = tools.NewRegistry(opts.Log)
	}
	l := &Loop{
		opts:     opts,
		log:      opts.Log,
		prompt:   newPromptBuilder(opts.Workspace),
		sem:      make(chan struct{}, opts.MaxConcurrentTurns),
		queues:   map[string][]bus.Inbound{},
		room:     make(chan struct{}, 1),
		busRun:   make(chan struct{}, opts.MaxConcurrentTurns),
		locks:    map[string]*sessionLock{},
		commands: map[string]ChatCommand{},
		started:  time.Now(),
	}
	l.base, l.cancelBase = context.WithCancel(context.Background())
	l.SetProvider(opts.Provider, opts.NoProvider)
	l.subagents = newSubagents(l, opts.MaxSubagents)
	l.registerBuiltins()
	return l
}

// SetProvider replaces the provider (after a first-run setup, say). A nil p
// with err puts the loop in the degraded state err describes.
func (l *Loop) SetProvider(p Provider, err error) {
	if p == nil && err == nil {
		err = provider.ErrNoProvider
	}
	l.prov.Store(&provHolder{p: p, err: err})
}

// DropCaches forgets what the provider keeps between calls, when it keeps
// anything (see provider.Client.DropCache).
func (l *Loop) DropCaches() {
	if p, _ := l.Provider(); p != nil {
		if d, ok := p.(interface{ DropCache() }); ok {
			d.DropCache()
		}
	}
}

// Provider returns the current provider, or nil and why there is none.
func (l *Loop) Provider() (Provider, error) {
	h := l.prov.Load()
	return h.p, h.err
}

// Subagents returns the subagent manager (for the subagent/spawn tools).
func (l *Loop) Subagents() *Subagents { return l.subagents }

// Tools returns the registry.
func (l *Loop) Tools() *tools.Registry { return l.opts.Tools }

// Start consumes inbound bus messages (channels, cron, heartbeats) until
// Stop, answering each on its channel.
func (l *Loop) Start(ctx context.Context) error {
	if l.opts.Bus == nil {
		return nil
	}
	l.consumerWG.Add(1)
	go func() {
		defer l.consumerWG.Done()
		for {
			select {
			case <-l.base.Done():
				return
			case in, ok := <-l.opts.Bus.Inbound():
				if !ok {
					return
				}
				if in.Channel == "" {
					in.Channel = bus.ChannelCLI
				}
				if !l.enqueue(in) {
					return // stopping: the inbox replays it at the next start
				}
			}
		}
	}()
	return nil
}

// maxWaiting bounds the chat messages queued in the loop: a backlog
// after an outage (a channel's catch-up, the inbox's replay) fits, and a
// flood beyond it waits in the channels' inbox instead of memory.
const maxWaiting = 1024

// enqueue puts in at the end of its chat's queue, starting the chat's
// worker when it has none; it waits while maxWaiting messages are queued,
// and reports false when the loop stops meanwhile.
func (l *Loop) enqueue(in bus.Inbound) bool {
	key := in.Key()
	l.queuesMu.Lock()
	for l.waiting >= maxWaiting {
		l.queuesMu.Unlock()
		select {
		case <-l.room:
		case <-l.base.Done():
			return false
		}
		l.queuesMu.Lock()
	}
	q, running := l.queues[key]
	l.queues[key] = append(q, in)
	l.waiting++
	l.queuesMu.Unlock()
	if !running {
		l.turnsWG.Add(1)
		go l.work(key)
	}
	return true
}

// work answers key's queued messages one after the other, each once a
// turn may run (busRun), and ends when the queue is empty.
func (l *Loop) work(key string) {
	defer l.turnsWG.Done()
	for {
		l.queuesMu.Lock()
		q := l.queues[key]
		if len(q) == 0 {
			delete(l.queues, key)
			l.queuesMu.Unlock()
			return
		}
		select {
		case <-l.base.Done():
			// Stopping: what waits is replayed from the inbox.
			l.waiting -= len(q)
			delete(l.queues, key)
			l.queuesMu.Unlock()
			return
		default:
		}
		in := q[0]
		q[0] = bus.Inbound{}
		l.queues[key] = q[1:]
		l.queuesMu.Unlock()
		// The message counts as waiting until its turn may run: a
		// worker blocked here holds it (and its goroutine) as surely as
		// a queue does, and many chats of one message each must meet
		// maxWaiting too.
		started := false
		select {
		case l.busRun <- struct{}{}:
			started = true
		case <-l.base.Done():
		}
		l.queuesMu.Lock()
		l.waiting--
		l.queuesMu.Unlock()
		select {
		case l.room <- struct{}{}:
		default:
		}
		if !started {
			continue // stopping: the next round leaves the rest
		}
		l.answer(in)
		<-l.busRun
	}
}

// answer runs a bus message's turn and sends the reply back on its channel.
// A channel message's reply always goes out with its InboxID, even when
// empty, so the dispatcher clears the message from the durable inbox; a
// turn cut short by shutdown publishes nothing, and the inbox runs it again
// at the next start.
func (l *Loop) answer(in bus.Inbound) {
	rep, err := l.process(l.base, in, true)
	out := bus.Outbound{Channel: in.Channel, ChatID: in.ChatID, ThreadID: in.ThreadID, ReplyTo: in.ReplyTo, InboxID: in.InboxID}
	switch {
	case err == nil:
		out.Text = rep.Text
		out.Media = replyMedia(rep.UI)
	case errors.Is(err, ErrStopped), errors.Is(err, context.Canceled):
		return
	default:
		l.log.Warn("turn failed", "session", in.Key(), "channel", in.Channel, "err", err)
		out.Text = "Sorry, I could not answer: " + err.Error()
		if in.RestrictTools {
			// A sender nobody vouched for learns nothing of the board's
			// setup (config keys, the provider's address on the LAN):
			// the owner reads the reason in the log.
			out.Text = "Sorry, I could not answer just now; please try again later."
		}
	}
	if strings.TrimSpace(out.Text) == "" && len(out.Media) == 0 && out.InboxID == 0 {
		return
	}
	if err := l.opts.Bus.PublishOutbound(out); err != nil {
		l.log.Warn("reply dropped", "channel", in.Channel, "err", err)
	}
}

// replyMedia picks the images a turn showed on the canvas (generate_image,
// image nodes), so chat platforms send them as photos.
func replyMedia(ui []api.UICommand) []bus.Media {
	var out []bus.Media
	for _, c := range ui {
		if c.Command != "canvas" || c.Type != "image" || (c.Action != "create_node" && c.Action != "update_node") {
			continue
		}
		u := strings.TrimSpace(c.Content)
		if strings.HasPrefix(u, "data:image/") || strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
			out = append(out, bus.Media{Kind: "image", URL: u, Name: c.Title})
		}
	}
	return out
}

// Stop cancels running turns and subagents and waits for them.
func (l *Loop) Stop(ctx context.Context) error {
	l.cancelBase() // idempotent
	done := make(chan struct{})
	go func() {
		l.consumerWG.Wait()
		l.turnsWG.Wait()
		l.subagents.wait()
		l.stopRoutes()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agent: stop: %w", ctx.Err())
	}
}

// Activity counts the turns and commands begun since start; a caller that
// sees it unchanged knows the loop was idle meanwhile.
func (l *Loop) Activity() uint64 { return l.turns.Load() }

// Stats are the loop's figures for /admin/status.
type Stats struct {
	ActiveSessions int
	QueueDepth     int
	Running        int
}

// Stats returns current figures.
func (l *Loop) Stats() Stats {
	l.locksMu.Lock()
	active := len(l.locks)
	l.queuesMu.Lock()
	for key := range l.queues {
		if l.locks[key] == nil {
			active++ // messages wait for it, none has its slot yet
		}
	}
	waiting := l.waiting
	l.queuesMu.Unlock()
	l.locksMu.Unlock()
	run := int(l.running.Load())
	q := int(l.admitted.Load()) - run - int(l.answering.Load())
	if q < 0 {
		q = 0
	}
	return Stats{ActiveSessions: active, QueueDepth: q + waiting, Running: run}
}

// Process runs one turn for in and returns the reply. It is safe for
// concurrent use; turns of one session are serialised.
func (l *Loop) Process(ctx context.Context, in bus.Inbound) (*Reply, error) {
	return l.process(ctx, in, false)
}

// process is Process; fromBus marks a chat message from the bus, which
// its chat's worker runs once a turn may (busRun bounds them), and which
// is never refused as too many: it waited its turn in the queue instead.
func (l *Loop) process(ctx context.Context, in bus.Inbound, fromBus bool) (*Reply, error) {
	select {
	case <-l.base.Done():
		return nil, ErrStopped
	default:
	}
	text := strings.TrimSpace(in.Text)
	if text == "" && len(in.Media) == 0 {
		return nil, ErrEmpty
	}
	if in.Channel == "" {
		in.Channel = bus.ChannelCLI
	}
	key := in.Key()
	cmd, args, isCmd := l.command(text)

	// Admission: bounded waiting instead of an unbounded queue.
	limit := int64(l.opts.MaxConcurrentTurns + l.opts.MaxQueuedTurns)
	l.turns.Add(1)
	if n := l.admitted.Add(1); n > limit && !fromBus {
		l.admitted.Add(-1)
		return nil, ErrBusy
	}
	defer l.admitted.Add(-1)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.base, cancel)()
	// An API caller's deadline covers its wait for the session and a turn
	// slot, as its connection waits with it. A chat message from the bus
	// waited its turn in its chat's queue already, and its deadline starts
	// once it may run: API turns holding every slot for minutes must not
	// time it out before it began, as the answer would be an apology and
	// the message gone from the inbox.
	deadline := func() {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, l.opts.TurnTimeout)
		context.AfterFunc(ctx, stop)
	}
	if !fromBus {
		deadline()
	}

	unlock, err := l.lockSession(ctx, key)
	if err != nil {
		return nil, l.ctxErr(ctx, err, "this chat's previous turn to end")
	}
	defer unlock()
	l.noteRoute(in)

	if isCmd {
		if fromBus {
			deadline()
		}
		out, err := l.runCommand(ctx, cmd, in, args)
		if err != nil {
			return nil, err
		}
		return &Reply{Text: out, ChatCommand: true}, nil
	}
	p, perr := l.Provider()
	if p == nil {
		return nil, perr
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, l.ctxErr(ctx, ctx.Err(), "a free turn slot (agents.defaults.max_concurrent_turns)")
	}
	defer func() { <-l.sem }()
	if fromBus {
		deadline()
	}
	l.running.Add(1)
	defer l.running.Add(-1)

	rep, err := l.turn(ctx, p, storeSession{l.opts.Store, key, l.opts.HistoryLimit, in}, in)
	if err != nil {
		return nil, l.ctxErr(ctx, err, "")
	}
	return rep, nil
}

// runCommand runs a chat command, counted as being answered meanwhile.
func (l *Loop) runCommand(ctx context.Context, cmd ChatCommand, in bus.Inbound, args string) (string, error) {
	l.answering.Add(1)
	defer l.answering.Add(-1)
	return cmd.Run(ctx, in, args)
}

// ctxErr turns an error that came with the turn's context ending into
// what ended it: the gateway stopping, or the turn's deadline while
// waiting for what waiting names (unless err already says what it was).
func (l *Loop) ctxErr(ctx context.Context, err error, waiting string) error {
	if l.base.Err() != nil {
		return ErrStopped
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		var te *timeoutError
		if errors.As(err, &te) {
			return te
		}
		return &timeoutError{limit: l.opts.TurnTimeout, waiting: waiting}
	}
	return err
}

// lockSession waits for the session's turn slot.
func (l *Loop) lockSession(ctx context.Context, key string) (func(), error) {
	l.locksMu.Lock()
	sl := l.locks[key]
	if sl == nil {
		sl = &sessionLock{ch: make(chan struct{}, 1)}
		l.locks[key] = sl
	}
	sl.refs++
	l.locksMu.Unlock()
	release := func() {
		l.locksMu.Lock()
		sl.refs--
		if sl.refs == 0 {
			delete(l.locks, key)
		}
		l.locksMu.Unlock()
	}
	select {
	case sl.ch <- struct{}{}:
		return func() { <-sl.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
