package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/tools"
)

// Subagent states.
const (
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
)

// SubagentInfo describes one subagent task, for /ready's agent.subagents.
type SubagentInfo struct {
	ID      string    `json:"id"`
	Label   string    `json:"label,omitempty"`
	Task    string    `json:"task"`
	Status  string    `json:"status"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`

	// restrictedBy is the channel of the restricted sender who asked for
	// the task ("" when unrestricted): a subagent gets no more tools than
	// its requester.
	restrictedBy string
}

// keepFinished bounds the finished tasks remembered for listing.
const keepFinished = 32

// Subagents runs tasks as conversations of their own.
type Subagents struct {
	l   *Loop
	sem chan struct{}

	mu    sync.Mutex
	tasks []*SubagentInfo
	wg    sync.WaitGroup
}

func newSubagents(l *Loop, max int) *Subagents {
	return &Subagents{l: l, sem: make(chan struct{}, max)}
}

// ErrTooManySubagents is returned when the concurrency bound is reached.
var ErrTooManySubagents = errors.New("agent: too many subagents running; wait for one to finish")

// Run executes task synchronously and returns the subagent's final answer.
func (s *Subagents) Run(ctx context.Context, task, label string) (string, error) {
	info, err := s.begin(task, label)
	if err != nil {
		return "", err
	}
	info.restrictedBy = restrictedBy(tools.CallFrom(ctx))
	out, err := s.execute(ctx, info)
	s.finish(info, err)
	return out, err
}

// Spawn starts task in the background and returns its id at once; the
// requester's chat (the Call in ctx) is told when it finishes, and the result
// is added to the requester's session history.
func (s *Subagents) Spawn(ctx context.Context, task, label string) (string, error) {
	info, err := s.begin(task, label)
	if err != nil {
		return "", err
	}
	parent := tools.CallFrom(ctx)
	info.restrictedBy = restrictedBy(parent)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		bg, cancel := context.WithTimeout(s.l.base, s.l.opts.TurnTimeout)
		defer cancel()
		out, err := s.execute(bg, info)
		s.finish(info, err)
		name := info.Label
		if name == "" {
			name = info.ID
		}
		var text string
		if err != nil {
			text = fmt.Sprintf("Background task %q failed: %v", name, err)
		} else {
			text = fmt.Sprintf("Background task %q finished:\n%s", name, out)
		}
		s.l.notify(bus.Inbound{Channel: parent.Channel, ChatID: parent.ChatID}, text)
		if parent.SessionKey != "" && s.l.opts.Store != nil {
			s.record(parent.SessionKey, text)
		}
	}()
	return info.ID, nil
}

// record appends the completion notice to the requester's history, in turn
// with that session's own turns.
func (s *Subagents) record(key, text string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.l.opts.TurnTimeout)
	defer cancel()
	unlock, err := s.l.lockSession(ctx, key)
	if err != nil {
		return
	}
	defer unlock()
	msg := chat.Message{Role: "assistant", Content: text, Time: time.Now().UnixMilli()}
	if err := s.l.opts.Store.Append(key, []chat.Message{msg}, chat.Usage{}, s.l.opts.HistoryLimit); err != nil {
		s.l.log.Warn("recording background result failed", "session", key, "err", err)
	}
}

func (s *Subagents) begin(task, label string) (*SubagentInfo, error) {
	select {
	case s.sem <- struct{}{}:
	default:
		return nil, ErrTooManySubagents
	}
	var b [4]byte
	rand.Read(b[:])
	info := &SubagentInfo{ID: "sa-" + hex.EncodeToString(b[:]), Label: label, Task: task, Status: StatusRunning, Started: time.Now().UTC()}
	s.mu.Lock()
	s.tasks = append(s.tasks, info)
	s.mu.Unlock()
	return info, nil
}

func (s *Subagents) finish(info *SubagentInfo, err error) {
	<-s.sem
	s.mu.Lock()
	defer s.mu.Unlock()
	info.Ended = time.Now().UTC()
	info.Status = StatusDone
	if err != nil {
		info.Status = StatusFailed
	}
	// Forget the oldest finished tasks beyond the bound.
	finished := 0
	for i := len(s.tasks) - 1; i >= 0; i-- {
		if s.tasks[i].Status != StatusRunning {
			finished++
			if finished > keepFinished {
				s.tasks = append(s.tasks[:i], s.tasks[i+1:]...)
			}
		}
	}
}

// unseenTools are left out of turns nobody watches (a subagent's, the
// gateway's own questions): no further subagents, and nothing that draws
// for a person to see (a canvas node or an image made there never reached
// the chat, while the model believed it had shown it).
var unseenTools = map[string]bool{"subagent": true, "spawn": true, "canvas": true, "generate_image": true}

func (s *Subagents) execute(ctx context.Context, info *SubagentInfo) (string, error) {
	p, err := s.l.Provider()
	if p == nil {
		return "", err
	}
	sess := &memSession{key: "subagent:" + info.ID}
	in := bus.Inbound{Channel: bus.ChannelSubagent, ChatID: info.ID, SessionKey: sess.key, Text: info.Task}
	if info.restrictedBy != "" {
		in.RestrictTools = true
		in.Metadata = map[string]string{metaRestrictedBy: info.restrictedBy}
	}
	rep, err := s.l.runTurn(ctx, p, sess, in, turnOpts{hide: unseenTools})
	if err != nil {
		return "", err
	}
	return rep.Text, nil
}

// metaRestrictedBy carries a restricted requester's channel into a
// subagent's turn, so refusals name the setting that lifts them.
const metaRestrictedBy = "restricted_by"

func restrictedBy(c tools.Call) string {
	if !c.Restricted {
		return ""
	}
	if c.RestrictedBy != "" {
		return c.RestrictedBy
	}
	return c.Channel
}

// List returns the tasks, oldest first.
func (s *Subagents) List() []SubagentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SubagentInfo, len(s.tasks))
	for i, t := range s.tasks {
		out[i] = *t
	}
	return out
}

func (s *Subagents) running() int { return len(s.sem) }

func (s *Subagents) wait() { s.wg.Wait() }

// memSession is a subagent's conversation: in memory only.
type memSession struct {
	key  string
	msgs []chat.Message
}

func (m *memSession) Key() string                      { return m.key }
func (m *memSession) History() ([]chat.Message, error) { return m.msgs, nil }
func (m *memSession) Append(msgs []chat.Message, _ chat.Usage) error {
	m.msgs = append(m.msgs, msgs...)
	return nil
}

// Ask runs prompt as a one-off turn with no history that is not stored
// (heartbeats). It counts against max_concurrent_turns like any turn.
func (l *Loop) Ask(ctx context.Context, name, prompt string) (string, error) {
	p, err := l.Provider()
	if p == nil {
		return "", err
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-l.base.Done():
		return "", ErrStopped
	}
	defer func() { <-l.sem }()
	sess := &memSession{key: bus.ChannelSystem + ":" + name}
	in := bus.Inbound{Channel: bus.ChannelSystem, ChatID: name, SessionKey: sess.key, Text: prompt}
	rep, err := l.runTurn(ctx, p, sess, in, turnOpts{hide: unseenTools})
	if err != nil {
		return "", err
	}
	return rep.Text, nil
}
