package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/gateway"
)

// keepAlive is how often an idle stream sends a comment line, so proxies
// and the page notice a dead connection.
const keepAlive = 25 * time.Second

// writeWait bounds one write to a page: a page that stops reading is
// dropped instead of holding its goroutine.
const writeWait = 15 * time.Second

// Register adds the page's routes to s:
//
//	POST /events/ticket   (the token) → {"ticket": "…", "expires_in": 30}
//	GET  /events?ticket=…&since=…      the event stream
//	GET  /web/history?chat=…           (the token) the chat's messages
func (c *Channel) Register(s *gateway.Server) {
	s.Handle(http.MethodPost, "/events/ticket", gateway.Protected, c.issueTicket)
	s.Handle(http.MethodGet, "/events", gateway.Open, c.stream)
	s.Handle(http.MethodGet, "/web/history", gateway.Protected, c.serveHistory)
}

// TicketResponse is POST /events/ticket's answer.
type TicketResponse struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expires_in"`
}

func (c *Channel) issueTicket(w http.ResponseWriter, r *http.Request) {
	gateway.WriteJSON(w, http.StatusOK, TicketResponse{Ticket: c.tickets.issue(), ExpiresIn: int(ticketTTL / time.Second)})
}

// HistoryResponse is GET /web/history's answer.
type HistoryResponse struct {
	Chat     string    `json:"chat"`
	Session  string    `json:"session"`
	Messages []Message `json:"messages"`
}

func (c *Channel) serveHistory(w http.ResponseWriter, r *http.Request) {
	chatID := r.URL.Query().Get("chat")
	if chatID == "" {
		chatID = DefaultChat
	}
	if !ValidChat(chatID) {
		gateway.WriteError(w, http.StatusBadRequest, fmt.Sprintf("chat %q is not a page chat: use 1-64 letters, digits, '_', '.' or '-'", chatID))
		return
	}
	msgs, err := c.history(chatID)
	if err != nil {
		gateway.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	gateway.WriteJSON(w, http.StatusOK, HistoryResponse{Chat: chatID, Session: SessionKey(chatID), Messages: msgs})
}

// stream serves one page's event stream.
func (c *Channel) stream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !c.tickets.redeem(q.Get("ticket")) {
		gateway.WriteError(w, http.StatusUnauthorized, "missing, spent or expired ticket: get one with POST /events/ticket (with the API token) and open the stream within 30 seconds")
		return
	}
	since, have, resync := c.parseSince(q.Get("since"))
	sub, missed, gap, err := c.hub.subscribe(since, have)
	if err != nil {
		w.Header().Set("Retry-After", "10")
		gateway.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d pages are open already; close one and reload", MaxStreams))
		return
	}
	defer c.hub.unsubscribe(sub)
	rc := http.NewResponseController(w)
	// The server's read timeout would end the stream after a minute: the
	// request is read, nothing more comes from the page.
	rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a reverse proxy must not hold events back
	w.WriteHeader(http.StatusOK)

	write := func(id, kind string, data []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(writeWait))
		var b strings.Builder
		if id != "" {
			b.WriteString("id: " + id + "\n")
		}
		b.WriteString("event: " + kind + "\ndata: ")
		b.Write(data)
		b.WriteString("\n\n")
		if _, err := w.Write([]byte(b.String())); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// hello names the stream's position, so the page can reconnect from
	// it even before any event arrives.
	hello := fmt.Appendf(nil, `{"id":%q,"pages":%d}`, c.eventID(c.hub.lastID()), c.hub.count())
	if !write("", "hello", hello) {
		return
	}
	if resync || gap {
		if !write("", "resync", []byte("{}")) {
			return
		}
	}
	for _, ev := range missed {
		if !write(c.eventID(ev.ID), ev.Kind, ev.Data) {
			return
		}
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.gone:
			return
		case ev := <-sub.ch:
			if !write(c.eventID(ev.ID), ev.Kind, ev.Data) {
				return
			}
		case <-ping.C:
			rc.SetWriteDeadline(time.Now().Add(writeWait))
			if _, err := w.Write([]byte(": ping\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

func (c *Channel) eventID(n uint64) string { return c.hub.epoch + "-" + strconv.FormatUint(n, 10) }

// parseSince reads a page's last event id (have is false without one). An
// id of another epoch (the gateway restarted) or one that does not parse
// asks for a resync.
func (c *Channel) parseSince(s string) (since uint64, have, resync bool) {
	if s == "" {
		return 0, false, false
	}
	epoch, n, ok := strings.Cut(s, "-")
	if !ok || epoch != c.hub.epoch {
		return 0, false, true
	}
	v, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return 0, false, true
	}
	return v, true, false
}
