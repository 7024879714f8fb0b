package slacktest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// maxRetries is how often Slack redelivers an unacknowledged envelope.
const maxRetries = 3

type conn struct {
	ws  *websocket.Conn
	wmu sync.Mutex
	// quiet connections stay open but send neither pings nor envelopes:
	// what a half-dead path looks like from the client.
	quiet bool
}

func (c *conn) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteJSON(v)
}

func (c *conn) ping() error {
	return c.ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second))
}

type envelope struct {
	id      string
	typ     string // "" is events_api
	eventID string
	payload json.RawMessage
	attempt int
	sentAt  time.Time
	sent    bool
}

func (e *envelope) wire() map[string]any {
	reason := ""
	if e.attempt > 0 {
		reason = "timeout"
	}
	typ := e.typ
	if typ == "" {
		typ = "events_api"
	}
	return map[string]any{
		"envelope_id": e.id, "payload": e.payload, "type": typ,
		"accepts_response_payload": typ != "events_api", "retry_attempt": e.attempt, "retry_reason": reason,
	}
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("ticket") == "" {
		http.Error(w, "no ticket", http.StatusUnauthorized)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &conn{ws: ws}
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.stats.Connections++
	s.stats.Origins = append(s.stats.Origins, r.Header.Get("Origin"))
	s.mu.Unlock()
	done := make(chan struct{})
	defer func() {
		close(done)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		ws.Close()
	}()
	err = c.write(map[string]any{
		"type": "hello", "num_connections": 1,
		"debug_info":      map[string]any{"host": "fake-applink", "build_number": 1, "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": s.AppID},
	})
	if err != nil {
		return
	}
	s.mu.Lock()
	reason := s.afterHello
	s.mu.Unlock()
	if reason != "" {
		if c.write(map[string]any{"type": "disconnect", "reason": reason, "debug_info": map[string]any{"host": "fake-applink"}}) != nil {
			return
		}
	}
	s.wg.Add(1)
	go s.pinger(c, done)
	s.flush()
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		if s.ignoreAcks > 0 {
			s.ignoreAcks--
			s.mu.Unlock()
			continue
		}
		for i, e := range s.pending {
			if e.id == ack.EnvelopeID {
				if d := time.Since(e.sentAt); d > s.stats.MaxAckDelay {
					s.stats.MaxAckDelay = d
				}
				s.stats.Acks++
				s.pending = append(s.pending[:i], s.pending[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
	}
}

func (s *Server) pinger(c *conn, done chan struct{}) {
	defer s.wg.Done()
	s.mu.Lock()
	every := s.pingInterval
	s.mu.Unlock()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-s.closed:
			return
		case <-t.C:
			s.mu.Lock()
			quiet := c.quiet
			s.mu.Unlock()
			if !quiet {
				c.ping()
			}
		}
	}
}

// live returns a connection that delivers, if any.
func (s *Server) live() *conn {
	for c := range s.conns {
		if !c.quiet {
			return c
		}
	}
	return nil
}

// flush delivers envelopes never sent, when a connection can take them.
func (s *Server) flush() {
	s.mu.Lock()
	c := s.live()
	var out []map[string]any
	if c != nil {
		for _, e := range s.pending {
			if !e.sent {
				e.sent, e.sentAt = true, time.Now()
				s.stats.Envelopes++
				out = append(out, e.wire())
			}
		}
	}
	s.mu.Unlock()
	for _, w := range out {
		c.write(w)
	}
}

// redeliver sends again, as Slack does, envelopes not acknowledged within
// AckTimeout, with retry_attempt counting up, and gives up after 3.
func (s *Server) redeliver() {
	defer s.wg.Done()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		s.mu.Lock()
		c := s.live()
		var out []map[string]any
		keep := s.pending[:0]
		for _, e := range s.pending {
			if !e.sent || time.Since(e.sentAt) < s.ackTimeout {
				keep = append(keep, e)
				continue
			}
			if e.attempt >= maxRetries {
				continue
			}
			if c == nil {
				keep = append(keep, e)
				continue
			}
			e.attempt++
			e.id = "env-" + strconv.FormatInt(s.seq.Add(1), 10)
			e.sentAt = time.Now()
			s.stats.Envelopes++
			s.stats.Retries++
			out = append(out, e.wire())
			keep = append(keep, e)
		}
		s.pending = keep
		s.mu.Unlock()
		for _, w := range out {
			c.write(w)
		}
	}
}

// Event delivers an Events API event (the inner "event" object) in an
// envelope and returns its event_id.
func (s *Server) Event(inner map[string]any) string {
	n := s.seq.Add(1)
	eventID := "Ev" + strconv.FormatInt(n, 10)
	payload, _ := json.Marshal(map[string]any{
		"token": "verification-token", "team_id": s.TeamID, "api_app_id": s.AppID, "event": inner,
		"type": "event_callback", "event_id": eventID, "event_time": time.Now().Unix(),
		"authorizations":        []map[string]any{{"team_id": s.TeamID, "user_id": s.BotUserID, "is_bot": true}},
		"is_ext_shared_channel": false,
	})
	e := &envelope{id: "env-" + strconv.FormatInt(s.seq.Add(1), 10), eventID: eventID, payload: payload}
	s.mu.Lock()
	s.pending = append(s.pending, e)
	s.mu.Unlock()
	s.flush()
	return eventID
}

// SlashCommand delivers a slash_commands envelope, as Slack does when
// someone uses one of the app's commands, and returns its envelope id.
// Slack redelivers it like any envelope until it is acknowledged.
func (s *Server) SlashCommand(command, text, channel, user string) string {
	payload, _ := json.Marshal(map[string]any{
		"token": "verification-token", "team_id": s.TeamID, "api_app_id": s.AppID, "command": command,
		"text": text, "channel_id": channel, "user_id": user, "trigger_id": "tr-" + strconv.FormatInt(s.seq.Add(1), 10),
		"response_url": s.HTTP.URL + "/commands/response",
	})
	e := &envelope{id: "env-" + strconv.FormatInt(s.seq.Add(1), 10), typ: "slash_commands", payload: payload}
	s.mu.Lock()
	s.pending = append(s.pending, e)
	s.mu.Unlock()
	s.flush()
	return e.id
}

// File is a file shared in a message.
type File struct {
	Name     string
	Mimetype string
	// Subtype "slack_audio" marks a voice clip recorded in Slack.
	Subtype string
	Data    []byte
}

// Message is what a user writes.
type Message struct {
	Channel string
	// ChannelType is im, mpim, channel or group ("" means channel).
	ChannelType string
	User        string
	Text        string
	// ThreadTS puts the message in a thread; ParentUserID is who wrote
	// the thread's first message.
	ThreadTS, ParentUserID string
	Files                  []File
	// BotID marks a message written by a bot.
	BotID   string
	SubType string
	// TS is the message's timestamp; "" picks a fresh one.
	TS string
}

// PostMessage makes a user write m: a "message" event, and, as Slack does
// for an app subscribed to both, a separate "app_mention" event when the
// text mentions the bot outside a direct message. It returns the ts.
func (s *Server) PostMessage(m Message) string {
	if m.TS == "" {
		m.TS = s.NextTS()
	}
	if m.ChannelType == "" {
		m.ChannelType = "channel"
	}
	ev := map[string]any{
		"type": "message", "channel": m.Channel, "channel_type": m.ChannelType, "user": m.User,
		"text": m.Text, "ts": m.TS, "event_ts": m.TS, "client_msg_id": "cm-" + m.TS, "team": s.TeamID,
		"blocks": richText(m.Text),
	}
	if m.ThreadTS != "" {
		ev["thread_ts"] = m.ThreadTS
		ev["parent_user_id"] = m.ParentUserID
	}
	if m.BotID != "" {
		ev["bot_id"] = m.BotID
	}
	if m.SubType != "" {
		ev["subtype"] = m.SubType
	}
	if len(m.Files) > 0 {
		var files []map[string]any
		for _, f := range m.Files {
			files = append(files, map[string]any{
				"id": "F" + strconv.FormatInt(s.seq.Add(1), 10), "name": f.Name, "mimetype": f.Mimetype,
				"size": len(f.Data), "url_private_download": s.AddFile(f.Name, f.Data), "subtype": f.Subtype,
			})
		}
		ev["files"] = files
		if m.SubType == "" {
			ev["subtype"] = "file_share"
		}
	}
	s.Event(ev)
	if m.ChannelType != "im" && strings.Contains(m.Text, "<@"+s.BotUserID+">") {
		mention := map[string]any{}
		for k, v := range ev {
			mention[k] = v
		}
		mention["type"] = "app_mention"
		delete(mention, "channel_type")
		s.Event(mention)
	}
	return m.TS
}

// richText is the rich_text block Slack's clients attach to a message,
// with user mentions as user elements: the mention metadata.
func richText(text string) []any {
	var elems []any
	rest := text
	for {
		i := strings.Index(rest, "<@")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], ">")
		if j < 0 {
			break
		}
		if i > 0 {
			elems = append(elems, map[string]any{"type": "text", "text": rest[:i]})
		}
		elems = append(elems, map[string]any{"type": "user", "user_id": rest[i+2 : i+j]})
		rest = rest[i+j+1:]
	}
	if rest != "" {
		elems = append(elems, map[string]any{"type": "text", "text": rest})
	}
	return []any{map[string]any{"type": "rich_text", "block_id": "b1", "elements": []any{
		map[string]any{"type": "rich_text_section", "elements": elems},
	}}}
}

// Disconnect asks every connection to reconnect, as Slack does before it
// recycles a server ("refresh_requested").
func (s *Server) Disconnect() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.write(map[string]any{"type": "disconnect", "reason": "refresh_requested", "debug_info": map[string]any{"host": "fake-applink"}})
	}
}

// DisconnectAfterHello makes every new connection get, right after its
// hello, a disconnect with reason: "link_disabled" as when the app's
// Socket Mode is turned off, "too_many_websockets" as when the app holds
// too many connections. "" stops it.
func (s *Server) DisconnectAfterHello(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterHello = reason
}

// Drop cuts every connection without a close frame.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.ws.UnderlyingConn().Close()
	}
}

// Quiet makes the open connections stop pinging and delivering while
// staying open; new connections are healthy.
func (s *Server) Quiet() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.quiet = true
	}
}
