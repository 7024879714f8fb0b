package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/version"
)

// ChatCommand is an offline chat command: answered without the model.
type ChatCommand struct {
	Name string // with the slash: "/sensors"
	Help string // one line for /help
	Run  func(ctx context.Context, in bus.Inbound, args string) (string, error)
}

// RegisterChatCommand adds or replaces an offline command.
func (l *Loop) RegisterChatCommand(c ChatCommand) {
	l.cmdMu.Lock()
	defer l.cmdMu.Unlock()
	l.commands[c.Name] = c
}

// command recognises a registered command as the message's first word
// ("/help", "/help@perch_bot"); anything else goes to the model.
func (l *Loop) command(text string) (ChatCommand, string, bool) {
	if !strings.HasPrefix(text, "/") {
		return ChatCommand{}, "", false
	}
	word, args, _ := strings.Cut(text, " ")
	if i := strings.IndexByte(word, '\n'); i >= 0 {
		word, args = word[:i], strings.TrimSpace(word[i+1:]+" "+args)
	}
	if at := strings.IndexByte(word, '@'); at > 0 {
		word = word[:at] // Telegram addresses commands to the bot
	}
	l.cmdMu.RLock()
	c, ok := l.commands[strings.ToLower(word)]
	l.cmdMu.RUnlock()
	return c, strings.TrimSpace(args), ok
}

// IsChatCommand reports whether name, with or without its slash, is a
// registered chat command.
func (l *Loop) IsChatCommand(name string) bool {
	if !strings.HasPrefix(name, "/") {
		name = "/" + name
	}
	l.cmdMu.RLock()
	defer l.cmdMu.RUnlock()
	_, ok := l.commands[strings.ToLower(name)]
	return ok
}

// ChatCommands lists the registered chat commands, sorted.
func (l *Loop) ChatCommands() []ChatCommand {
	l.cmdMu.RLock()
	defer l.cmdMu.RUnlock()
	out := make([]ChatCommand, 0, len(l.commands))
	for _, c := range l.commands {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (l *Loop) registerBuiltins() {
	l.RegisterChatCommand(ChatCommand{Name: "/help", Help: "list these commands", Run: func(context.Context, bus.Inbound, string) (string, error) {
		var sb strings.Builder
		sb.WriteString("Commands (answered without the model):\n")
		for _, c := range l.ChatCommands() {
			fmt.Fprintf(&sb, "%s — %s\n", c.Name, c.Help)
		}
		sb.WriteString("Anything else goes to the agent.")
		return sb.String(), nil
	}})
	l.RegisterChatCommand(ChatCommand{Name: "/new", Help: "start this conversation afresh (forget its history)", Run: func(_ context.Context, in bus.Inbound, _ string) (string, error) {
		if l.opts.Store == nil {
			return "Nothing to forget.", nil
		}
		if err := l.opts.Store.Reset(in.Key()); err != nil {
			return "", err
		}
		l.windows.forget(in.Key())
		return "Started a new conversation; the earlier messages of this session are forgotten.", nil
	}})
	l.RegisterChatCommand(ChatCommand{Name: "/status", Help: "provider, model, this session and token use", Run: l.statusCommand})
	l.RegisterChatCommand(ChatCommand{Name: "/tools", Help: "list the tools the agent can use", Run: func(context.Context, bus.Inbound, string) (string, error) {
		sums := l.opts.Tools.Summaries()
		if len(sums) == 0 {
			return "No tools are registered.", nil
		}
		return fmt.Sprintf("Tools (%d):\n- %s", len(sums), strings.Join(sums, "\n- ")), nil
	}})
}

func (l *Loop) statusCommand(_ context.Context, in bus.Inbound, _ string) (string, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\n", version.Get())
	if p, err := l.Provider(); p != nil {
		fmt.Fprintf(&sb, "Provider: %s, model %s\n", p.Name(), p.Model())
	} else {
		fmt.Fprintf(&sb, "Provider: not ready — %v\n", err)
	}
	if l.opts.Store != nil {
		if s, err := l.opts.Store.Session(in.Key()); err == nil {
			fmt.Fprintf(&sb, "Session %s: %d messages, %d tokens\n", in.Key(), s.Count, s.Usage.TotalTokens)
		}
		if u, err := l.opts.Store.TotalUsage(); err == nil {
			fmt.Fprintf(&sb, "All sessions: %d tokens (%d prompt, %d completion)\n", u.TotalTokens, u.PromptTokens, u.CompletionTokens)
		}
	}
	st := l.Stats()
	fmt.Fprintf(&sb, "Up %s; %d turns running, %d waiting; %d subagents running",
		time.Since(l.started).Round(time.Second), st.Running, st.QueueDepth, l.subagents.running())
	return sb.String(), nil
}
