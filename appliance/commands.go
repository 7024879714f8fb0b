package appliance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/schedule"
	"github.com/perchhq/perch/appliance/tools"
)

// registerCommands adds the offline chat commands beyond the agent's own.
func (s *System) registerCommands() {
	s.Agent.RegisterCommand(agent.Command{Name: "/models", Help: "list the provider's models (/models <filter>)", Run: s.modelsCommand})
	s.Agent.RegisterCommand(agent.Command{Name: "/cron", Help: "list scheduled jobs", Run: func(context.Context, bus.Inbound, string) (string, error) {
		jobs, err := s.Cron.List()
		if err != nil {
			return "", err
		}
		return formatJobs(jobs), nil
	}})
	s.Agent.RegisterCommand(agent.Command{Name: "/sensors", Help: "read the configured sensors", Run: func(ctx context.Context, _ bus.Inbound, _ string) (string, error) {
		return tools.SensorsReport(ctx, s.Sensors), nil
	}})
	s.Agent.RegisterCommand(agent.Command{Name: "/devices", Help: "USB devices, I2C buses and SPI devices present", Run: func(context.Context, bus.Inbound, string) (string, error) {
		if s.Devices == nil {
			return tools.DevicesReport(nil, "the device monitor runs only in the gateway"), nil
		}
		_, msg := s.Devices.Check()
		return tools.DevicesReport(s.Devices.Devices(), msg), nil
	}})
}

func (s *System) modelsCommand(ctx context.Context, _ bus.Inbound, filter string) (string, error) {
	if s.Provider == nil {
		return "", s.NoProv
	}
	models, err := s.Provider.Models(ctx)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	n := 0
	for _, m := range models {
		if filter != "" && !strings.Contains(strings.ToLower(m.ID), strings.ToLower(filter)) {
			continue
		}
		if n == 50 {
			sb.WriteString("… (narrow it down: /models <filter>)\n")
			break
		}
		sb.WriteString(m.ID)
		if p := m.Pricing; p != nil && (p["prompt"] != "" || p["completion"] != "") {
			fmt.Fprintf(&sb, "  (prompt %s, completion %s per token)", p["prompt"], p["completion"])
		}
		sb.WriteString("\n")
		n++
	}
	if n == 0 {
		return fmt.Sprintf("%s lists no models matching %q.", s.Provider.Name(), filter), nil
	}
	return fmt.Sprintf("Models of %s (in use: %s):\n%s", s.Provider.Name(), s.Provider.Model(), strings.TrimRight(sb.String(), "\n")), nil
}

// CronRequest is the body of POST /admin/cron.
type CronRequest struct {
	Message  string            `json:"message"`
	Command  string            `json:"command"`
	Deliver  bool              `json:"deliver"`
	Channel  string            `json:"channel"`
	To       string            `json:"to"`
	Schedule schedule.Schedule `json:"schedule"`
}

// registerAdminAPI adds the routes the CLI uses while a gateway runs.
func (s *System) registerAdminAPI() {
	h := s.HTTP
	h.Handle(http.MethodGet, "/admin/cron", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		jobs, err := s.Cron.List()
		if err != nil {
			gateway.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		views := make([]schedule.View, 0, len(jobs))
		for _, j := range jobs {
			views = append(views, j.View())
		}
		gateway.WriteJSON(w, http.StatusOK, views)
	})
	h.Handle(http.MethodPost, "/admin/cron", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		var req CronRequest
		if !gateway.DecodeJSON(w, r, &req) {
			return
		}
		j, err := s.Cron.Add(schedule.Job{Message: req.Message, Command: req.Command, Deliver: req.Deliver,
			Channel: req.Channel, To: req.To, Schedule: req.Schedule})
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		gateway.WriteJSON(w, http.StatusOK, j.View())
	})
	h.HandleParams(http.MethodDelete, "/admin/cron/:id", gateway.Protected, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		if err := s.Cron.Remove(ps.ByName("id")); err != nil {
			writeJobError(w, err)
			return
		}
		gateway.WriteJSON(w, http.StatusOK, map[string]string{"removed": ps.ByName("id")})
	})
	h.HandleParams(http.MethodPost, "/admin/cron/:id/:action", gateway.Protected, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		var on bool
		switch ps.ByName("action") {
		case "enable":
			on = true
		case "disable":
		default:
			gateway.WriteError(w, http.StatusNotFound, "unknown action "+ps.ByName("action")+"; use enable or disable")
			return
		}
		j, err := s.Cron.SetEnabled(ps.ByName("id"), on)
		if err != nil {
			writeJobError(w, err)
			return
		}
		gateway.WriteJSON(w, http.StatusOK, j.View())
	})
}

func writeJobError(w http.ResponseWriter, err error) {
	if errors.Is(err, schedule.ErrNotFound) {
		gateway.WriteError(w, http.StatusNotFound, err.Error())
		return
	}
	gateway.WriteError(w, http.StatusBadRequest, err.Error())
}
