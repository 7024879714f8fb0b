package appliance

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/schedule"
)

// registerAdminAPI adds the cron jobs API the CLI uses while a gateway
// runs: a thin adapter of HTTP over the scheduler's api.Jobs.
func (s *System) registerAdminAPI() {
	h := s.HTTP
	h.Handle(http.MethodGet, "/admin/cron", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		jobs, err := s.Cron.List(r.Context())
		if err != nil {
			gateway.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		gateway.WriteJSON(w, http.StatusOK, jobs)
	})
	h.Handle(http.MethodPost, "/admin/cron", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		var spec api.JobSpec
		if !gateway.DecodeJSONStrict(w, r, &spec, jobFieldPlace) {
			return
		}
		j, err := s.Cron.Add(r.Context(), spec)
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		gateway.WriteJSON(w, http.StatusOK, j)
	})
	// The next runs of a schedule before it is added, for the page's form:
	// ?at_seconds= | every_seconds= | cron_expr= [&tz=].
	h.Handle(http.MethodGet, "/admin/cron/preview", gateway.Protected, func(w http.ResponseWriter, r *http.Request) {
		sc, err := scheduleFromQuery(r.URL.Query())
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		loc, _ := s.Cfg.Location()
		next, err := schedule.Preview(sc, loc, time.Now(), 5)
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		gateway.WriteJSON(w, http.StatusOK, map[string]any{"describe": sc.Describe(), "next": next, "zone": zoneName(sc, loc)})
	})
	h.HandleParams(http.MethodDelete, "/admin/cron/:id", gateway.Protected, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		j, err := s.Cron.Remove(r.Context(), ps.ByName("id"))
		if err != nil {
			writeJobError(w, err)
			return
		}
		gateway.WriteJSON(w, http.StatusOK, j)
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
		j, err := s.Cron.SetEnabled(r.Context(), ps.ByName("id"), on)
		if err != nil {
			writeJobError(w, err)
			return
		}
		gateway.WriteJSON(w, http.StatusOK, j)
	})
}

// scheduleFromQuery reads a schedule from query parameters named as the
// API's fields.
func scheduleFromQuery(q url.Values) (api.Schedule, error) {
	sc := api.Schedule{CronExpr: q.Get("cron_expr"), TZ: q.Get("tz")}
	for name, dst := range map[string]**int64{"at_seconds": &sc.AtSeconds, "every_seconds": &sc.EverySeconds} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return sc, fmt.Errorf("%s %q is not a whole number of seconds", name, v)
			}
			*dst = &n
		}
	}
	return sc, nil
}

// zoneName is the zone a cron expression runs in: its tz, the configured
// zone, or the system's by its abbreviation ("Local" says nothing).
func zoneName(sc api.Schedule, loc *time.Location) string {
	if sc.TZ != "" {
		return sc.TZ
	}
	if loc != time.Local {
		return loc.String()
	}
	name, _ := time.Now().In(loc).Zone()
	return name
}

func writeJobError(w http.ResponseWriter, err error) {
	if errors.Is(err, api.ErrNoJob) {
		gateway.WriteError(w, http.StatusNotFound, err.Error())
		return
	}
	gateway.WriteError(w, http.StatusBadRequest, err.Error())
}

// jobFieldPlace says where a field a job's body does not have belongs.
func jobFieldPlace(field string) string {
	// encoding/json matches names regardless of case, so "Message" is
	// the job's field too.
	switch strings.ToLower(field) {
	case "at_seconds", "every_seconds", "cron_expr", "tz":
		return fmt.Sprintf(`it goes in "schedule": {"%s": ...}`, field)
	case "message", "command", "deliver", "channel", "to", "schedule", "restricted":
		// encoding/json does not say where it met the field: one the
		// job has was met inside "schedule".
		return `it goes beside "schedule", not in it; a schedule has "at_seconds" | "every_seconds" | "cron_expr", and "tz"`
	}
	return `a job has "message", "command", "deliver", "channel", "to" and "schedule" ({"at_seconds" | "every_seconds" | "cron_expr", "tz"})`
}
