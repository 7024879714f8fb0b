package appliance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/schedule"
)

// runJob carries out a cron firing: deliver the message as is, run the
// command, or hand the message to the agent as a user message.
func (s *System) runJob(ctx context.Context, j api.Job) (string, error) {
	text := j.Message
	if j.Command != "" {
		out, err := s.runSandboxed(ctx, j.Command)
		if err != nil {
			return "", err
		}
		text = strings.TrimSpace(out)
		if j.Message != "" {
			text = j.Message + "\n" + text
		}
		if j.Deliver {
			return s.deliver(ctx, j, text)
		}
		return text, nil
	}
	if j.Deliver {
		return s.deliver(ctx, j, text)
	}
	// A job a stranger scheduled gets no more tools when due than its
	// sender had: otherwise a reminder's text would be a command to run
	// later with every tool.
	in := bus.Inbound{Channel: j.Channel, ChatID: j.To, SessionKey: "cron:" + j.ID, Text: j.Message, RestrictTools: j.Restricted}
	if in.Channel == "" {
		in.Channel, in.ChatID = bus.ChannelSystem, "cron-"+j.ID
	}
	rep, err := s.Agent.Process(ctx, in)
	if errors.Is(err, agent.ErrStopped) {
		// The gateway's stop ends turns before the scheduler's: the run
		// was cut off, not failed.
		return "", fmt.Errorf("%w: %w", schedule.ErrStopping, err)
	}
	if err != nil {
		return "", err
	}
	if j.Channel != "" && j.To != "" && !bus.IsInternal(j.Channel) && strings.TrimSpace(rep.Text) != "" {
		if _, err := s.sendTo(ctx, bus.Outbound{Channel: j.Channel, ChatID: j.To, Text: rep.Text}); err != nil {
			return rep.Text, fmt.Errorf("reply not delivered to %s:%s: %w", j.Channel, j.To, err)
		}
	}
	return rep.Text, nil
}

// runSandboxed runs a cron job's command confined, like the exec tool. A
// failing command is a failed job: its output is the error's detail.
func (s *System) runSandboxed(ctx context.Context, line string) (string, error) {
	res, err := s.Sandbox.Run(ctx, sandbox.Command{Line: line})
	if err != nil {
		return "", err
	}
	out := strings.TrimSpace(res.Output)
	// The output's first line says why, when there is one; a silent
	// command leaves the reason alone ("…: " read as cut off).
	failed := func(why string) error {
		if l := firstLine(out); l != "" {
			return fmt.Errorf("%s: %s", why, l)
		}
		return errors.New(why)
	}
	switch {
	case res.TimedOut:
		return "", failed(fmt.Sprintf("command timed out after %s (tools.exec.timeout_seconds)", res.Duration.Round(time.Second)))
	case res.ExitCode != 0:
		return "", failed(fmt.Sprintf("command exited with status %d", res.ExitCode))
	}
	return out, nil
}

// deliver sends a job's text to its chat; the error of a delivery that
// did not arrive makes the run a failed one.
func (s *System) deliver(ctx context.Context, j api.Job, text string) (string, error) {
	waiting, err := s.sendTo(ctx, bus.Outbound{Channel: j.Channel, ChatID: j.To, Text: text})
	if err != nil {
		return "", fmt.Errorf("delivery to %s:%s failed: %w", j.Channel, j.To, err)
	}
	if waiting {
		return fmt.Sprintf("waiting for %s to take it (it did not answer); sent to %s when it does", j.Channel, j.To), nil
	}
	return fmt.Sprintf("delivered to %s:%s", j.Channel, j.To), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
