package tools

import (
	"context"
	"fmt"
)

// CronSpec is a job as the cron tool asks for it.
type CronSpec struct {
	Message      string
	Command      string
	Deliver      bool
	Channel      string
	To           string
	AtSeconds    *int64
	EverySeconds *int64
	CronExpr     string
	TZ           string
}

// CronJobs manages scheduled jobs (the appliance adapts the scheduler).
type CronJobs interface {
	Add(ctx context.Context, spec CronSpec) (summary string, err error)
	List(ctx context.Context) (string, error)
	Remove(ctx context.Context, id string) error
	SetEnabled(ctx context.Context, id string, on bool) error
}

// NewCron returns the cron tool.
func NewCron(jobs CronJobs) Tool {
	return Func{
		ToolName: "cron",
		ToolDescription: "Schedule reminders and recurring tasks. " +
			"action add needs message (or command) and exactly one of at_seconds (once, seconds from now), every_seconds (recurring) or cron_expr (five fields: minute hour day month weekday). " +
			"deliver true (default) sends the message as is to this chat when due; deliver false gives the message to you, the agent, to act on then. " +
			"list shows jobs with their ids; remove, enable and disable take job_id.",
		Params: Object(map[string]*Property{
			"action":        String("what to do", "add", "list", "remove", "enable", "disable"),
			"message":       String("reminder text, or the task for the agent when deliver is false"),
			"command":       String("optional shell command to run in the workspace when due; its output is the result"),
			"deliver":       Boolean("true: send message to the chat as is (default); false: the agent processes it when due"),
			"at_seconds":    Integer("run once, this many seconds from now", Bound(0), nil),
			"every_seconds": Integer("run every this many seconds (at least 10)", Bound(10), nil),
			"cron_expr":     String("five-field cron expression, e.g. \"0 9 * * 1-5\" for 9:00 on weekdays"),
			"tz":            String("IANA time zone for cron_expr, e.g. Europe/Berlin (default: the configured one)"),
			"job_id":        String("job id for remove, enable, disable"),
			"channel":       String("channel to deliver to (default: this conversation's)"),
			"chat_id":       String("chat to deliver to (default: this conversation's)"),
		}, "action"),
		Run: func(ctx context.Context, a Args) Result {
			switch a.String("action") {
			case "add":
				call := CallFrom(ctx)
				spec := CronSpec{
					Message: a.String("message"), Command: a.String("command"),
					Deliver: true, Channel: call.Channel, To: call.ChatID,
					CronExpr: a.String("cron_expr"), TZ: a.String("tz"),
				}
				if a.Has("deliver") {
					spec.Deliver = a.Bool("deliver")
				}
				if c := a.String("channel"); c != "" {
					spec.Channel = c
				}
				if c := a.String("chat_id"); c != "" {
					spec.To = c
				}
				if spec.Deliver && spec.To == "" {
					// No chat to deliver to (an internal session): let the
					// agent handle it when due instead of failing.
					spec.Deliver = false
				}
				if a.Has("at_seconds") {
					v := a.Int("at_seconds", 0)
					spec.AtSeconds = &v
				}
				if a.Has("every_seconds") {
					v := a.Int("every_seconds", 0)
					spec.EverySeconds = &v
				}
				sum, err := jobs.Add(ctx, spec)
				if err != nil {
					return Errorf("cron add: %v", err)
				}
				return Text(sum)
			case "list":
				out, err := jobs.List(ctx)
				if err != nil {
					return Errorf("cron list: %v", err)
				}
				return Text(out)
			case "remove", "enable", "disable":
				id := a.String("job_id")
				if id == "" {
					return Errorf("cron %s needs job_id; use action list to see the ids", a.String("action"))
				}
				var err error
				switch a.String("action") {
				case "remove":
					err = jobs.Remove(ctx, id)
				case "enable":
					err = jobs.SetEnabled(ctx, id, true)
				default:
					err = jobs.SetEnabled(ctx, id, false)
				}
				if err != nil {
					return Errorf("cron %s: %v", a.String("action"), err)
				}
				return Text(fmt.Sprintf("job %s: %sd", id, a.String("action")))
			}
			return Errorf("unknown action")
		},
	}
}
