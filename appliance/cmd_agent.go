package appliance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway"
)

// AgentOptions are the flags of `perch agent`.
type AgentOptions struct {
	ConfigPath string
	Message    string // one-shot when set
	Session    string
	Debug      bool
	Stdin      io.Reader
	Stdout     io.Writer
	Stderr     io.Writer
}

// Agent talks to the agent from the terminal: one message with -m, else an
// interactive session. It goes through a running gateway when there is one
// (the gateway holds the database), else runs the agent in-process.
func Agent(ctx context.Context, o AgentOptions) error {
	cfg, err := config.Load(config.Options{Path: o.ConfigPath})
	if err != nil {
		return err
	}
	if o.Session == "" {
		o.Session = "cli:default"
	}
	var ask func(ctx context.Context, text string) (string, error)
	if r, ok := findGateway(ctx, cfg); ok {
		ask = func(ctx context.Context, text string) (string, error) {
			var resp gateway.ChatResponse
			err := r.do(ctx, http.MethodPost, "/chat", gateway.ChatRequest{Message: text, SessionKey: o.Session, Channel: bus.ChannelCLI}, &resp)
			return resp.Response, err
		}
	} else {
		log := NewLogger(o.Stderr, o.Debug)
		sys, err := NewCore(ctx, cfg, log)
		if err != nil {
			return err
		}
		defer func() {
			sys.Agent.Stop(context.WithoutCancel(ctx))
			sys.Close()
		}()
		ask = func(ctx context.Context, text string) (string, error) {
			rep, err := sys.Agent.Process(ctx, bus.Inbound{Channel: bus.ChannelCLI, ChatID: "terminal", SessionKey: o.Session, Text: text})
			if err != nil {
				return "", err
			}
			return rep.Text, nil
		}
	}
	if o.Message != "" {
		out, err := ask(ctx, o.Message)
		if err != nil {
			return err
		}
		fmt.Fprintln(o.Stdout, out)
		return nil
	}
	fmt.Fprintf(o.Stdout, "Perch agent, session %s. Type /help for commands, exit or Ctrl-D to leave.\n", o.Session)
	sc := bufio.NewScanner(o.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		fmt.Fprint(o.Stdout, "you> ")
		if !sc.Scan() {
			fmt.Fprintln(o.Stdout)
			return sc.Err()
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
			fmt.Fprintf(o.Stdout, "error: %v\n", err)
			continue
		}
		fmt.Fprintf(o.Stdout, "perch> %s\n", out)
	}
}
