package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/gateway/client"
)

func agentCommand() *Command {
	var (
		message setString
		session string
		debug   bool
	)
	return &Command{
		Name:     "agent",
		Synopsis: "[-m MESSAGE] [-s SESSION] [--debug]",
		Summary:  "talk to the agent from the terminal (one message with -m)",
		Help: `With a gateway running (found through the config directory's perch.pid) the messages go through
its API, since the gateway holds the database; otherwise the agent runs in this process. Type /help
for the chat commands, exit or Ctrl-D to leave. From a pipe or a file, each line is one message and
only the replies are printed, one after the other.`,
		Flags: func(fs *flag.FlagSet) {
			fs.Var(&message, "m", "send one `message`, print the reply and exit")
			fs.StringVar(&session, "s", "cli:default", "the session `key`: its history is the conversation")
			fs.BoolVar(&debug, "debug", false, "log tool and provider calls")
		},
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) > 0 {
				return usageError("agent", "unexpected argument %q (quote the message: perch agent -m \"...\")", args[0])
			}
			if message.set && strings.TrimSpace(message.v) == "" {
				return usageError("agent", "-m is empty: give the message to send (perch agent -m \"hello\"), or leave -m out to talk interactively")
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			var ask func(ctx context.Context, text string) (string, error)
			if c, err := client.Find(ctx, cfg.PIDPath(), cfg.Gateway.APIToken.Value()); err == nil {
				ask = func(ctx context.Context, text string) (string, error) {
					resp, err := c.Chat(ctx, api.ChatRequest{Message: text, SessionKey: session, Channel: bus.ChannelCLI})
					return resp.Response, err
				}
			} else {
				if e.Runtime.Agent == nil {
					return errors.New("agent: no gateway runs and this build cannot run the agent itself")
				}
				// Only what goes wrong is worth a line here: the person is
				// talking to the agent, not starting a service.
				level := slog.LevelWarn
				if debug {
					level = slog.LevelDebug
				}
				local, closeFn, err := e.Runtime.Agent(ctx, cfg, newLogger(e.Stderr, level))
				if err != nil {
					return err
				}
				defer closeFn()
				ask = func(ctx context.Context, text string) (string, error) { return local(ctx, session, text) }
			}
			if message.set {
				out, err := ask(ctx, message.v)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.Stdout, out)
				return nil
			}
			// From a pipe or a file, each line is a message and each reply
			// is printed alone: prompts would be mixed into the output a
			// script reads.
			interactive := isTerminal(e.Stdin)
			prompt, replyMark, end := "", "", ""
			if interactive {
				fmt.Fprintf(e.Stdout, "Perch agent, session %s. Type /help for commands, exit or Ctrl-D to leave.\n", session)
				prompt, replyMark, end = "you> ", "perch> ", "\n"
			}
			sc := bufio.NewScanner(e.Stdin)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			failed := 0
			for {
				fmt.Fprint(e.Stdout, prompt)
				if !sc.Scan() {
					fmt.Fprint(e.Stdout, end)
					if err := sc.Err(); err != nil {
						return fmt.Errorf("agent: reading the messages: %w", err)
					}
					return unanswered(failed)
				}
				line := strings.TrimSpace(sc.Text())
				if line == "" {
					continue
				}
				if line == "exit" || line == "quit" {
					return nil
				}
				out, err := ask(ctx, line)
				if err != nil {
					if errors.Is(err, context.Canceled) {
						return nil
					}
					if interactive {
						fmt.Fprintf(e.Stdout, "error: %v\n", err)
					} else {
						fmt.Fprintf(e.Stderr, "perch: %v\n", err)
						failed++
					}
					continue
				}
				fmt.Fprintf(e.Stdout, "%s%s\n", replyMark, out)
			}
		},
	}
}

// unanswered is the exit error of piped messages of which n got no reply.
func unanswered(n int) error {
	switch {
	case n == 1:
		return errors.New("agent: 1 message got no reply (the error is above)")
	case n > 1:
		return fmt.Errorf("agent: %d messages got no reply (the errors are above)", n)
	}
	return nil
}

// setString is a string flag that knows whether it was given, so an empty
// -m is told apart from no -m.
type setString struct {
	v   string
	set bool
}

func (s *setString) Set(v string) error { s.v, s.set = v, true; return nil }
func (s *setString) String() string     { return s.v }
