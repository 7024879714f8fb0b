package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/schedule"
	"github.com/perchhq/perch/store"
)

// CronOptions are the arguments of `perch cron`.
type CronOptions struct {
	ConfigPath string
	Action     string // list, add, remove, enable, disable
	ID         string
	JSON       bool
	Job        CronRequest
	Stdout     io.Writer
}

// Cron manages jobs through the running gateway's API, or directly in the
// database when no gateway runs (the gateway picks them up at its start).
func Cron(ctx context.Context, o CronOptions) error {
	cfg, err := config.Load(config.Options{Path: o.ConfigPath})
	if err != nil {
		return err
	}
	var ops cronOps
	if r, ok := findGateway(ctx, cfg); ok {
		ops = remoteCron{r}
	} else {
		db, err := store.Open(cfg.DBPath(), store.Options{})
		if err != nil {
			return err
		}
		defer db.Close()
		loc := time.Local
		if tz := cfg.Agents.Defaults.Timezone; tz != "" {
			loc, _ = time.LoadLocation(tz)
		}
		ops = localCron{schedule.New(schedule.Options{Store: db, Location: loc, Log: slog.New(slog.DiscardHandler),
			CheckCommand: sandbox.CheckCommand})}
	}
	switch o.Action {
	case "list":
		views, err := ops.list(ctx)
		if err != nil {
			return err
		}
		if o.JSON {
			enc := json.NewEncoder(o.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(views)
		}
		jobs := make([]schedule.Job, len(views))
		for i, v := range views {
			jobs[i] = schedule.Job{ID: v.ID, Message: v.Message, Command: v.Command, Deliver: v.Deliver, Channel: v.Channel,
				To: v.To, Schedule: v.Schedule, Enabled: v.Enabled, NextRun: v.NextRun, LastRun: v.LastRun, LastResult: v.LastResult}
		}
		fmt.Fprintln(o.Stdout, formatJobs(jobs))
		return nil
	case "add":
		v, err := ops.add(ctx, o.Job)
		if err != nil {
			return err
		}
		fmt.Fprintln(o.Stdout, v.ID)
		return nil
	case "remove":
		return ops.remove(ctx, o.ID)
	case "enable", "disable":
		_, err := ops.setEnabled(ctx, o.ID, o.Action == "enable")
		return err
	}
	return fmt.Errorf("cron: unknown action %q; use list, add, remove, enable or disable", o.Action)
}

type cronOps interface {
	list(ctx context.Context) ([]schedule.View, error)
	add(ctx context.Context, j CronRequest) (schedule.View, error)
	remove(ctx context.Context, id string) error
	setEnabled(ctx context.Context, id string, on bool) (schedule.View, error)
}

type localCron struct{ s *schedule.Service }

func (l localCron) list(context.Context) ([]schedule.View, error) {
	jobs, err := l.s.List()
	views := make([]schedule.View, 0, len(jobs))
	for _, j := range jobs {
		views = append(views, j.View())
	}
	return views, err
}

func (l localCron) add(_ context.Context, r CronRequest) (schedule.View, error) {
	j, err := l.s.Add(schedule.Job{Message: r.Message, Command: r.Command, Deliver: r.Deliver, Channel: r.Channel, To: r.To, Schedule: r.Schedule})
	return j.View(), err
}

func (l localCron) remove(_ context.Context, id string) error { return l.s.Remove(id) }

func (l localCron) setEnabled(_ context.Context, id string, on bool) (schedule.View, error) {
	j, err := l.s.SetEnabled(id, on)
	return j.View(), err
}

type remoteCron struct{ r *remote }

func (c remoteCron) list(ctx context.Context) ([]schedule.View, error) {
	views := []schedule.View{}
	err := c.r.do(ctx, http.MethodGet, "/admin/cron", nil, &views)
	return views, err
}

func (c remoteCron) add(ctx context.Context, j CronRequest) (schedule.View, error) {
	var v schedule.View
	err := c.r.do(ctx, http.MethodPost, "/admin/cron", j, &v)
	return v, err
}

func (c remoteCron) remove(ctx context.Context, id string) error {
	return c.r.do(ctx, http.MethodDelete, "/admin/cron/"+url.PathEscape(id), nil, nil)
}

func (c remoteCron) setEnabled(ctx context.Context, id string, on bool) (schedule.View, error) {
	action := "disable"
	if on {
		action = "enable"
	}
	var v schedule.View
	err := c.r.do(ctx, http.MethodPost, "/admin/cron/"+url.PathEscape(id)+"/"+action, nil, &v)
	return v, err
}
