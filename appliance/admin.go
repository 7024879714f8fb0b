package appliance

import (
	"errors"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/gateway"
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
		if !gateway.DecodeJSON(w, r, &spec) {
			return
		}
		j, err := s.Cron.Add(r.Context(), spec)
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		gateway.WriteJSON(w, http.StatusOK, j)
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

func writeJobError(w http.ResponseWriter, err error) {
	if errors.Is(err, api.ErrNoJob) {
		gateway.WriteError(w, http.StatusNotFound, err.Error())
		return
	}
	gateway.WriteError(w, http.StatusBadRequest, err.Error())
}
