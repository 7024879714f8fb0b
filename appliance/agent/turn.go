package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/store"
)

// session is where a turn reads and writes its conversation: the store for
// real sessions, memory for subagents.
type session interface {
	Key() string
	History() ([]chat.Message, error)
	Append(msgs []chat.Message, u chat.Usage) error
}

type storeSession struct {
	db    *store.DB
	key   string
	limit int
	in    bus.Inbound
}

func (s storeSession) Key() string                      { return s.key }
func (s storeSession) History() ([]chat.Message, error) { return s.db.History(s.key) }
func (s storeSession) Append(msgs []chat.Message, u chat.Usage) error {
	if len(msgs) == 0 && u.IsZero() {
		return nil
	}
	return s.db.Append(s.key, msgs, u, s.limit, s.in.Channel, s.in.ChatID)
}

// turnOpts vary a turn between sessions and subagents.
type turnOpts struct {
	// hide lists tools not offered (subagents cannot spawn subagents).
	hide map[string]bool
}

func (l *Loop) turn(ctx context.Context, p Provider, sess session, in bus.Inbound) (*Reply, error) {
	return l.runTurn(ctx, p, sess, in, turnOpts{})
}

func (l *Loop) runTurn(ctx context.Context, p Provider, sess session, in bus.Inbound, o turnOpts) (*Reply, error) {
	hist, err := sess.History()
	if err != nil {
		return nil, err
	}
	user := chat.Message{Role: "user", Content: userText(in), Time: time.Now().UnixMilli()}
	// lead is what this turn adds before the model answers: the user's
	// message, after a note when the one before it went unanswered. The
	// history keeps a long message's beginning (kept); the model has it
	// whole in this turn.
	kept := user
	kept.Content = keptText(user.Content, userKeep)
	lead, leadKept := []chat.Message{user}, []chat.Message{kept}
	var uc *userCommit
	switch n := len(hist); {
	case n > 0 && hist[n-1].Role == "user" && hist[n-1].Content == kept.Content:
		// The same message, still unanswered, is the history's last: an
		// interrupted run stored it (a replay, a request the broker
		// delivers again after a restart), or the person sends it again
		// after a failure or a cancel, as the page suggests. Ask again
		// without a second copy in the history.
		user.Time = hist[n-1].Time // it is that message
		hist = hist[:n-1]
		uc = committedUser()
	case n > 0 && (hist[n-1].Role == "user" || hist[n-1].Role == "tool"):
		// Another message after one whose turn failed (before the model
		// answered, or after tools ran, whose rounds are kept): a user
		// message right after a user message or a tool result breaks the
		// chat templates of many local models ("roles must alternate"),
		// and every later turn of the chat with them. The gap is said in
		// the assistant's place.
		note := chat.Message{Role: "assistant", Content: unansweredNote, Time: user.Time}
		lead, leadKept = []chat.Message{note, user}, []chat.Message{note, kept}
		uc = newUserCommit(sess, leadKept, l.opts.UserCommitGrace)
	default:
		uc = newUserCommit(sess, leadKept, l.opts.UserCommitGrace)
	}
	defer uc.stop()

	reg := l.opts.Tools
	defs := reg.ProviderDefinitions()
	defsJSON := reg.ProviderDefinitionsJSON()
	head, system := l.prompt.parts(reg, in, sess.Key())
	if in.RestrictTools {
		// A sender nobody vouched for: only tools that cannot change the
		// board, and the model is told what is withheld and why.
		var withheld []string
		defs, withheld, defsJSON = reg.SafeDefinitionsJSON()
		system += "\n" + tools.RestrictionNote(restrictedSource(in), withheld)
	}
	if len(o.hide) > 0 {
		defsJSON = nil
		kept := make([]chat.ToolDef, 0, len(defs))
		for _, d := range defs {
			if !o.hide[d.Name] {
				kept = append(kept, d)
			}
		}
		defs = kept
	}
	// The history is sent as stored, without a copy, or as much of it as
	// the model took last time; this turn's messages follow it.
	hist, whole := l.windows.fit(sess.Key(), hist)
	window, hadWindow := l.windows.get(sess.Key())
	req := provider.Request{SystemHead: head, System: system, History: hist,
		Messages: append([]chat.Message(nil), lead...), Tools: defs, ToolsJSON: defsJSON}
	if _, stored := sess.(storeSession); stored && whole {
		// The store's histories are never changed in place, so the
		// provider may keep their encoding for the next turn.
		req.HistoryKey = sess.Key()
	}

	call := tools.Call{Channel: in.Channel, ChatID: in.ChatID, SessionKey: sess.Key(), Async: l.asyncNotifier(in), Restricted: in.RestrictTools}
	if in.RestrictTools {
		call.RestrictedBy = restrictedSource(in)
	}
	tctx := tools.WithCall(ctx, call)
	var (
		added []chat.Message
		rep   Reply
		final string
		done  bool
	)
	lastTool := "" // the last tool run, for a deadline that passed in it
	leftOut := false
	for round := 0; round < l.opts.MaxToolIterations; round++ {
		start := time.Now()
		resp, err := p.Chat(ctx, req)
		if err != nil && overflows(err) && len(req.History) > 0 {
			n := len(req.History)
			req.History = l.windows.halve(sess.Key(), req.History, user)
			req.HistoryKey = "" // no longer the stored history
			l.log.Info("the conversation no longer fits the model's context window; sending its newer part", "session", sess.Key(),
				"model", p.Model(), "messages_sent", len(req.History), "messages_left_out", n-len(req.History))
			leftOut = true
			round-- // the same round, asked again
			continue
		}
		if err != nil || len(resp.ToolCalls) > 0 {
			// Tools change things, and an error is an answer: either way
			// the user's message is durable first.
			if serr := uc.wait(); serr != nil {
				return nil, serr
			}
		}
		// The records are debug level: their arguments (a dozen boxed
		// values) are built only when that level is on.
		debug := l.log.Enabled(ctx, slog.LevelDebug)
		if err != nil {
			if debug {
				l.log.Debug("provider call", "provider", p.Name(), "model", p.Model(), "session", sess.Key(), "status", "error",
					"took", time.Since(start).Round(time.Microsecond), "err", err)
			}
			if overflows(err) && len(req.History) == 0 {
				// No history at all did not fit either: the turn's own
				// messages are too long, and the next turn's may not be.
				l.windows.set(sess.Key(), window, hadWindow)
				err = &tooLongAlone{err}
			}
			// Keep the rounds that completed: their tools ran and changed
			// things the model should know about next time.
			if perr := sess.Append(added, rep.Usage); perr != nil {
				l.log.Error("saving partial turn failed", "session", sess.Key(), "err", perr)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// A deadline that had passed before the call passed in
				// the last tool, which the call could not even start
				// after.
				waiting := providerWait(p)
				if dl, _ := ctx.Deadline(); lastTool != "" && !start.Before(dl) {
					waiting = "tool " + lastTool + " to finish"
				}
				return nil, &timeoutError{limit: l.opts.TurnTimeout, waiting: waiting}
			}
			return nil, err
		}
		rep.Usage = rep.Usage.Add(resp.Usage)
		if debug {
			l.log.Debug("provider call", "provider", p.Name(), "model", p.Model(), "session", sess.Key(), "status", "ok",
				"tool_calls", len(resp.ToolCalls), "prompt_tokens", resp.Usage.PromptTokens,
				"completion_tokens", resp.Usage.CompletionTokens, "total_tokens", resp.Usage.TotalTokens,
				"took", time.Since(start).Round(time.Microsecond))
		}
		if len(resp.ToolCalls) == 0 {
			final, done = resp.Content, true
			break
		}
		am := chat.Message{Role: "assistant", Content: resp.Content, Time: time.Now().UnixMilli()}
		for i, tc := range resp.ToolCalls {
			id := tc.ID
			if id == "" {
				// Some local models omit ids; the tool message must match.
				id = fmt.Sprintf("call_%d_%d", round, i)
			}
			am.ToolCalls = append(am.ToolCalls, chat.ToolCall{ID: id, Name: tc.Name, Arguments: tc.Arguments})
		}
		added = append(added, am)
		req.Messages = append(req.Messages, am)
		for _, tc := range am.ToolCalls {
			lastTool = tc.Name
			res := reg.Execute(tctx, tc.Name, tc.Arguments)
			content := res.ForLLM
			if strings.TrimSpace(content) == "" {
				content = "(no output)"
			}
			rep.UI = append(rep.UI, res.UI...)
			if res.Kind == tools.KindUser && res.ForUser != "" {
				l.notify(in, res.ForUser)
			}
			tm := chat.Message{Role: "tool", ToolCallID: tc.ID, Name: tc.Name, Content: content, Time: time.Now().UnixMilli()}
			added = append(added, tm)
			req.Messages = append(req.Messages, tm)
		}
		// The tools had the arguments whole; the history (shared with
		// the request) keeps them short (args.go).
		for i := range am.ToolCalls {
			am.ToolCalls[i].Arguments = compactArgs(am.ToolCalls[i].Arguments)
		}
	}
	if !done {
		final = fmt.Sprintf("I stopped after %d rounds of tool calls (agents.defaults.max_tool_iterations) without finishing; say \"continue\" and I will pick up from here.", l.opts.MaxToolIterations)
	}
	if leftOut && strings.TrimSpace(final) != "" {
		final += leftOutNote
	}
	// A model that answers a person with nothing at all (no text, no tool
	// call) left a blank reply on the API and none on a chat platform. An
	// empty answer after tools ran is normal (a message tool already
	// spoke), and the gateway's own questions read it as "nothing to say".
	empty := done && len(added) == 0 && strings.TrimSpace(final) == "" && in.Channel != bus.ChannelSystem && in.Channel != bus.ChannelSubagent
	if strings.TrimSpace(final) != "" {
		added = append(added, chat.Message{Role: "assistant", Content: keptText(final, replyKeep), Time: time.Now().UnixMilli()})
	}
	if uc.fold() {
		// The model answered before the user's message was committed:
		// one commit holds the whole exchange.
		added = append(append([]chat.Message(nil), leadKept...), added...)
	} else if err := uc.wait(); err != nil {
		return nil, err
	}
	if err := sess.Append(added, rep.Usage); err != nil {
		return nil, err
	}
	rep.Text = final
	if empty {
		l.log.Warn("the model's answer was empty", "provider", p.Name(), "model", p.Model(), "session", sess.Key())
		rep.Text = EmptyAnswer
	}
	return &rep, nil
}

// unansweredNote stands in the history for the answer to a message whose
// turn failed, when another message follows it.
const unansweredNote = "(No answer: this turn failed.)"

// tooLongAlone is a context window refusal of a turn sent without any of
// the conversation before it: /new would not help, a shorter message
// would.
type tooLongAlone struct{ err error }

func (e *tooLongAlone) Error() string {
	var pe *provider.Error
	errors.As(e.err, &pe)
	return fmt.Sprintf("provider %s: this message (with what its tools returned) does not fit model %q's context window even without the conversation before it; send a shorter one, or choose a model with a larger window", pe.Provider, pe.Model)
}

func (e *tooLongAlone) Unwrap() error { return e.err }

// EmptyAnswer is what a person reads when the model answered with nothing.
// It is not stored: the history holds what the model said.
const EmptyAnswer = "(The model answered with an empty message. Ask again, or try another model: /models lists them.)"

// notify sends text to the turn's chat now (tools' user results, async
// completions). Internal channels only log it.
func (l *Loop) notify(in bus.Inbound, text string) {
	if l.opts.Bus == nil || bus.IsInternal(in.Channel) {
		l.log.Debug("user notice on internal channel", "channel", in.Channel, "chat", in.ChatID, "bytes", len(text))
		return
	}
	if err := l.opts.Bus.PublishOutbound(bus.Outbound{Channel: in.Channel, ChatID: in.ChatID, Text: text}); err != nil {
		l.log.Warn("user notice dropped", "channel", in.Channel, "err", err)
	}
}

func (l *Loop) asyncNotifier(in bus.Inbound) func(tools.Result) {
	return func(r tools.Result) {
		text := r.ForUser
		if text == "" {
			text = r.ForLLM
		}
		if text != "" {
			l.notify(in, text)
		}
	}
}

func userText(in bus.Inbound) string {
	text := strings.TrimSpace(in.Text)
	for _, m := range in.Media {
		note := fmt.Sprintf("[%s attached", m.Kind)
		if m.Path != "" {
			note += ": " + m.Path
		}
		note += "]"
		if text != "" {
			text += "\n"
		}
		text += note
	}
	return text
}

// userCommit commits a turn's user message exactly once, at the latest
// moment durability allows. The provider call changes nothing, so the
// message need only be durable before a tool runs and before the reply
// leaves: it is committed when the call outlasts a short grace (a real
// model takes seconds, and the message should be safe meanwhile), before
// the first tool, or, when the model answers within the grace, in the same
// commit as the answer. Against a fast provider that is one synced write
// per turn instead of two. A message whose commit failed is never answered.
type userCommit struct {
	sess  session
	msgs  []chat.Message
	timer *time.Timer

	mu      sync.Mutex
	started bool
	done    chan error
	waited  bool
	err     error
}

func newUserCommit(sess session, msgs []chat.Message, grace time.Duration) *userCommit {
	u := &userCommit{sess: sess, msgs: msgs, done: make(chan error, 1)}
	if grace <= 0 {
		u.start()
	} else {
		u.timer = time.AfterFunc(grace, u.start)
	}
	return u
}

func (u *userCommit) start() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.started {
		return
	}
	u.started = true
	go func() { u.done <- u.sess.Append(u.msgs, chat.Usage{}) }()
}

// committedUser stands for a message an earlier run stored already.
func committedUser() *userCommit {
	return &userCommit{started: true, waited: true, done: make(chan error, 1)}
}

// wait commits the message now if that has not begun, and returns the
// commit's result.
func (u *userCommit) wait() error {
	u.start()
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.waited {
		u.err, u.waited = <-u.done, true
	}
	return u.err
}

// fold reports whether the commit never began; the caller then commits
// the message with the rest of the exchange.
func (u *userCommit) fold() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.started {
		return false
	}
	u.started, u.waited = true, true
	u.stop()
	return true
}

// stop cancels the grace timer (a turn that ended otherwise).
func (u *userCommit) stop() {
	if u.timer != nil {
		u.timer.Stop()
	}
}

// restrictedSource is the channel whose settings restrict in's tools.
func restrictedSource(in bus.Inbound) string {
	if v := in.Metadata[metaRestrictedBy]; v != "" {
		return v
	}
	return in.Channel
}
