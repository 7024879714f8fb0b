package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
)

// NewCron returns the cron tool over jobs (the scheduler). target, when not
// nil, names where a job delivers when it is added from a conversation no
// person reads later (/chat without a channel, perch agent, a cron turn)
// and names no channel itself: the last chat where a person can read it.
// An empty channel from target means there is none.
func NewCron(jobs api.Jobs, target func() (channel, chatID string)) Tool {
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
		MutatingCall: func(ctx context.Context, a Args) bool { return cronMutates(ctx, a, jobs) },
		Run: func(ctx context.Context, a Args) Result {
			switch a.String("action") {
			case "add":
				call := CallFrom(ctx)
				spec := api.JobSpec{
					Message: a.String("message"), Command: a.String("command"),
					Deliver: true, Channel: call.Channel, To: call.ChatID, Restricted: call.Restricted,
					Schedule: api.Schedule{CronExpr: a.String("cron_expr"), TZ: a.String("tz")},
				}
				if a.Has("deliver") {
					spec.Deliver = a.Bool("deliver")
				}
				explicit := a.String("channel") != ""
				if explicit {
					spec.Channel = a.String("channel")
				}
				if c := a.String("chat_id"); c != "" {
					spec.To = c
				}
				if !explicit && bus.IsInternal(spec.Channel) && target != nil {
					// Nobody reads this conversation later: deliver where
					// a person will.
					if ch, chat := target(); ch != "" {
						spec.Channel, spec.To = ch, chat
					}
				}
				if !explicit && bus.IsInternal(spec.Channel) {
					// Delivering there would only be logged.
					spec.Channel, spec.To = "", ""
				}
				if spec.Deliver && spec.To == "" {
					// No chat to deliver to (an internal session): let the
					// agent handle it when due instead of failing.
					spec.Deliver = false
				}
				if a.Has("at_seconds") {
					v := a.Int("at_seconds", 0)
					spec.Schedule.AtSeconds = &v
				}
				if a.Has("every_seconds") {
					v := a.Int("every_seconds", 0)
					spec.Schedule.EverySeconds = &v
				}
				j, err := jobs.Add(ctx, spec)
				if err != nil {
					return Errorf("cron add: %v", err)
				}
				return Text(added(j))
			case "list":
				list, err := jobs.List(ctx)
				if err != nil {
					return Errorf("cron list: %v", err)
				}
				return Text(ListJobs(list, CallFrom(ctx)))
			case "remove", "enable", "disable":
				id := a.String("job_id")
				if id == "" {
					return Errorf("cron %s needs job_id; use action list to see the ids", a.String("action"))
				}
				var err error
				switch a.String("action") {
				case "remove":
					_, err = jobs.Remove(ctx, id)
				case "enable":
					_, err = jobs.SetEnabled(ctx, id, true)
				default:
					_, err = jobs.SetEnabled(ctx, id, false)
				}
				if errors.Is(err, api.ErrNoJob) {
					// The scheduler's message points a person at the CLI.
					return Errorf("cron %s: no job %q; use action list to see the ids", a.String("action"), id)
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

// added tells the model what it scheduled and, above all, where the result
// will go, so it can tell the user truthfully.
func added(j api.Job) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "scheduled job %s: %s", j.ID, j.Schedule.Describe())
	where := "nowhere a person reads it (recorded in the job's last result only)"
	switch {
	case j.Channel == "web" && j.To != "":
		where = "the web page (chat " + j.To + "; it waits there as unread while no page is open)"
	case j.Channel != "" && j.To != "" && !bus.IsInternal(j.Channel):
		where = j.Channel + " chat " + j.To
	}
	switch {
	case j.Command != "" && j.Deliver:
		fmt.Fprintf(&sb, "; when due, the output of `%s` is sent to %s", j.Command, where)
	case j.Command != "":
		fmt.Fprintf(&sb, "; when due, `%s` runs and its output is kept as the job's last result (see action list)", j.Command)
	case j.Deliver:
		fmt.Fprintf(&sb, "; when due, %q is sent to %s", j.Message, where)
	default:
		fmt.Fprintf(&sb, "; when due, you get %q as a message and your answer goes to %s", j.Message, where)
	}
	if j.NextRun != nil {
		sb.WriteString("; next at " + j.NextRun.Local().Format("2006-01-02 15:04:05 MST"))
	}
	return sb.String()
}

// ListJobs renders the jobs a call may see. A sender nobody vouched for
// sees only the jobs that deliver to its own chat: the others are the
// owner's (their reminders, commands, chats and last results).
func ListJobs(list []api.Job, call Call) string {
	if !call.Restricted {
		return api.FormatJobs(list)
	}
	var own []api.Job
	for _, j := range list {
		if ownJob(call, j) {
			own = append(own, j)
		}
	}
	out := api.FormatJobs(own)
	if n := len(list) - len(own); n > 0 {
		out += fmt.Sprintf("\n(%d more job%s, for other chats, not shown)", n, plural(n))
	}
	return out
}

// ownJob reports whether j is a plain reminder to the call's own chat, the
// kind of job a restricted sender may add, and so may see and change.
func ownJob(call Call, j api.Job) bool {
	return j.Deliver && j.Command == "" && call.Channel != "" && call.ChatID != "" &&
		j.Channel == call.Channel && j.To == call.ChatID
}

// cronMutates tells the cron calls that change the board: removing or
// switching jobs, and adding one that runs a command, hands its message to
// the agent later (with every tool) or delivers to another chat. A plain
// reminder to the current chat is harmless.
func cronMutates(ctx context.Context, a Args, jobs api.Jobs) bool {
	call := CallFrom(ctx)
	switch a.String("action") {
	case "list":
		return false
	case "add":
		if strings.TrimSpace(a.String("command")) != "" || (a.Has("deliver") && !a.Bool("deliver")) {
			return true
		}
		// Without a chat of the caller's (a request over MQTT) a reminder
		// has nowhere to go and becomes a task for the agent when due:
		// requests could add jobs that call the model for ever.
		if call.ChatID == "" && a.String("chat_id") == "" {
			return true
		}
		return otherChat(call, a.String("channel"), a.String("chat_id"))
	case "remove", "enable", "disable":
		// A sender may take back the reminders it set for its own chat.
		if id := a.String("job_id"); id != "" && jobs != nil {
			if list, err := jobs.List(ctx); err == nil {
				for _, j := range list {
					if j.ID == id {
						return !ownJob(call, j)
					}
				}
			}
		}
	}
	return true
}

// otherChat reports whether channel and chat (as a tool's arguments, empty
// meaning the current one) name a chat other than the call's.
func otherChat(call Call, channel, chat string) bool {
	return (channel != "" && channel != call.Channel) || (chat != "" && chat != call.ChatID)
}
