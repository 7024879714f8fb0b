package agent

import (
	"strings"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/store"
)

// The chats where the owner's own messages may go — device notices,
// heartbeat results, a job added where nobody reads its answer — are the
// one-to-one chats of people the owner trusts: never a group (its other
// members would read them) nor a sender whom a channel open to anyone let
// in (a stranger would). Sessions do not record either, so the loop keeps
// those chats as they speak, in the store, to hold across restarts.

// route is a chat: channel and chat id.
type route = [2]string

const (
	// routesKey is where the routes are kept (BucketMeta).
	routesKey = "chat_routes"
	// maxRoutes bounds the list: one chat per channel.
	maxRoutes = 8
)

// loadRoutesLocked reads the kept routes once; the caller holds routesMu.
func (l *Loop) loadRoutesLocked() {
	if l.routesLoaded {
		return
	}
	l.routesLoaded = true
	if l.opts.Store == nil {
		return
	}
	var kept []route
	if err := l.opts.Store.Get(store.BucketMeta, routesKey, &kept); err == nil {
		l.routes, l.routesKept = kept, true
	}
}

// Routes returns the trusted one-to-one chats, the newest first, one per
// channel; nil when none is known (a database from before they were
// kept, where nobody has written since).
func (l *Loop) Routes() [][2]string {
	l.routesMu.Lock()
	defer l.routesMu.Unlock()
	l.loadRoutesLocked()
	return append([]route(nil), l.routes...)
}

// LastActive returns the trusted one-to-one chat that spoke last and
// whose channel skip (when set) does not rule out: where device notices
// and heartbeat results go. None ("") sends them to the page. With no
// chat kept yet (a database of an older version), it is the most recently
// updated session of an external channel that skip does not rule out.
func (l *Loop) LastActive(skip func(channel string) bool) (channel, chatID string) {
	l.routesMu.Lock()
	l.loadRoutesLocked()
	routes, kept := append([]route(nil), l.routes...), l.routesKept || len(l.routes) > 0
	l.routesMu.Unlock()
	for _, r := range routes {
		if skip == nil || !skip(r[0]) {
			return r[0], r[1]
		}
	}
	if kept || l.opts.Store == nil {
		return "", ""
	}
	if ss, err := l.opts.Store.Sessions(); err == nil {
		for _, s := range ss {
			if s.Channel != "" && !bus.IsInternal(s.Channel) && (skip == nil || !skip(s.Channel)) {
				return s.Channel, s.ChatID
			}
		}
	}
	return "", ""
}

// noteRoute puts in's chat first among the routes when it is a trusted
// one-to-one chat speaking in its own conversation: a job's turn (session
// cron:<id>) or an API caller's that names a chat says nothing of who
// reads it, and a job that answers into a group made the group the
// owner's chat.
func (l *Loop) noteRoute(in bus.Inbound) {
	if bus.IsInternal(in.Channel) || in.ChatID == "" || in.RestrictTools || in.Metadata["group"] == "true" {
		return
	}
	own := in.Channel + ":" + in.ChatID
	if key := in.Key(); key != own && !strings.HasPrefix(key, own+":") {
		return
	}
	r := route{in.Channel, in.ChatID}
	l.routesMu.Lock()
	defer l.routesMu.Unlock()
	l.loadRoutesLocked()
	if len(l.routes) > 0 && l.routes[0] == r {
		return
	}
	rs := make([]route, 1, len(l.routes)+1)
	rs[0] = r
	for _, o := range l.routes {
		if o[0] != r[0] && len(rs) < maxRoutes {
			rs = append(rs, o)
		}
	}
	l.routes = rs
	if l.opts.Store == nil || l.routesStopped {
		return
	}
	if l.routeSaving {
		l.routeAgain = true
		return
	}
	// Written beside the turn, not in its way: routes lost to a power cut
	// only send the next notice where the one before went.
	l.routeSaving = true
	l.routesWG.Add(1)
	go l.saveRoutes()
}

// stopRoutes waits for the routes' write and lets no other begin: the
// store closes after the loop stops.
func (l *Loop) stopRoutes() {
	l.routesMu.Lock()
	l.routesStopped = true
	l.routesMu.Unlock()
	l.routesWG.Wait()
}

// saveRoutes writes the routes to the store until they no longer change.
func (l *Loop) saveRoutes() {
	defer l.routesWG.Done()
	for {
		l.routesMu.Lock()
		rs := append([]route(nil), l.routes...)
		l.routeAgain = false
		l.routesMu.Unlock()
		if err := l.opts.Store.Put(store.BucketMeta, routesKey, rs); err != nil {
			l.log.Warn("keeping the chats that notices go to failed; after a restart they may go to an older chat until someone writes", "err", err)
		}
		l.routesMu.Lock()
		if !l.routeAgain {
			l.routeSaving = false
			l.routesMu.Unlock()
			return
		}
		l.routesMu.Unlock()
	}
}
