package appliance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/schedule"
	"github.com/perchhq/perch/appliance/tools"
)

// runJob carries out a cron firing: deliver the message as is, run the
// command, or hand the message to the agent as a user message.
func (s *System) runJob(ctx context.Context, j schedule.Job) (string, error) {
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
			return s.deliver(j, text)
		}
		return text, nil
	}
	if j.Deliver {
		return s.deliver(j, text)
	}
	in := bus.Inbound{Channel: j.Channel, ChatID: j.To, SessionKey: "cron:" + j.ID, Text: j.Message}
	if in.Channel == "" {
		in.Channel, in.ChatID = bus.ChannelSystem, "cron-"+j.ID
	}
	rep, err := s.Agent.Process(ctx, in)
	if err != nil {
		return "", err
	}
	if j.Channel != "" && j.To != "" && !bus.IsInternal(j.Channel) && strings.TrimSpace(rep.Text) != "" {
		if err := s.Bus.PublishOutbound(bus.Outbound{Channel: j.Channel, ChatID: j.To, Text: rep.Text}); err != nil {
			return rep.Text, fmt.Errorf("reply not delivered: %w", err)
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
	switch {
	case res.TimedOut:
		return "", fmt.Errorf("command timed out after %s (tools.exec.timeout_seconds): %s", res.Duration.Round(time.Second), firstLine(out))
	case res.ExitCode != 0:
		return "", fmt.Errorf("command exited with status %d: %s", res.ExitCode, firstLine(out))
	}
	return out, nil
}

func (s *System) deliver(j schedule.Job, text string) (string, error) {
	if err := s.Bus.PublishOutbound(bus.Outbound{Channel: j.Channel, ChatID: j.To, Text: text}); err != nil {
		return "", fmt.Errorf("delivery to %s:%s failed: %w", j.Channel, j.To, err)
	}
	return fmt.Sprintf("delivered to %s:%s", j.Channel, j.To), nil
}

// cronTool adapts the scheduler to the cron tool.
type cronTool struct{ s *System }

func (c cronTool) Add(_ context.Context, spec tools.CronSpec) (string, error) {
	j, err := c.s.Cron.Add(schedule.Job{
		Message: spec.Message, Command: spec.Command, Deliver: spec.Deliver, Channel: spec.Channel, To: spec.To,
		Schedule: schedule.Schedule{AtSeconds: spec.AtSeconds, EverySeconds: spec.EverySeconds, CronExpr: spec.CronExpr, TZ: spec.TZ},
	})
	if err != nil {
		return "", err
	}
	return "scheduled job " + j.ID + ": " + j.Schedule.Describe() + nextText(j.NextRun), nil
}

func (c cronTool) List(context.Context) (string, error) {
	jobs, err := c.s.Cron.List()
	if err != nil {
		return "", err
	}
	return formatJobs(jobs), nil
}

func (c cronTool) Remove(_ context.Context, id string) error { return c.s.Cron.Remove(id) }

func (c cronTool) SetEnabled(_ context.Context, id string, on bool) error {
	_, err := c.s.Cron.SetEnabled(id, on)
	return err
}

func nextText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return ", next at " + t.Local().Format("2006-01-02 15:04:05 MST")
}

// formatJobs renders jobs for chat and the CLI.
func formatJobs(jobs []schedule.Job) string {
	if len(jobs) == 0 {
		return "No scheduled jobs."
	}
	var sb strings.Builder
	for _, j := range jobs {
		state := "enabled"
		if !j.Enabled {
			state = "disabled"
		}
		what := j.Message
		if j.Command != "" {
			what = "$ " + j.Command
		}
		fmt.Fprintf(&sb, "%s  %s  %s  %q", j.ID, state, j.Schedule.Describe(), what)
		if j.Deliver {
			fmt.Fprintf(&sb, " → %s:%s", j.Channel, j.To)
		}
		sb.WriteString(nextText(j.NextRun))
		if j.LastRun != nil {
			fmt.Fprintf(&sb, ", last ran %s: %s", j.LastRun.Local().Format("2006-01-02 15:04"), firstLine(j.LastResult))
		}
		sb.WriteString("\n")
	}
	return strings.TrimRight(sb.String(), "\n")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
