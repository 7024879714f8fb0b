package discordtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Gateway opcodes and close codes the fake speaks.
const (
	opDispatch       = 0
	opHeartbeat      = 1
	opIdentify       = 2
	opResume         = 6
	opReconnect      = 7
	opInvalidSession = 9
	opHello          = 10
	opHeartbeatAck   = 11

	CloseUnknownError         = 4000
	CloseAlreadyAuthenticated = 4005
	CloseAuthenticationFailed = 4004
	CloseDisallowedIntents    = 4014
)

// maxLog bounds the events a session keeps for replay on resume.
const maxLog = 1000

type frame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int64          `json:"s"`
	T  *string         `json:"t"`
}

type event struct {
	seq  int64
	typ  string
	data []byte
}

// session is a gateway session: it outlives a dropped connection so the
// client can resume it and get the events it missed.
type session struct {
	id      string
	intents int
	seq     int64
	log     []event
	conn    *conn
}

type conn struct {
	ws  *websocket.Conn
	wmu sync.Mutex
	// wedged connections stay open but neither acknowledge heartbeats nor
	// deliver events: what a half-dead TCP path looks like to a client.
	wedged bool
	sess   *session
}

func (c *conn) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteJSON(v)
}

func (c *conn) closeWith(code int, reason string) {
	c.wmu.Lock()
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	c.wmu.Unlock()
	c.ws.Close()
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("encoding") != "json" {
		http.Error(w, "encoding=json is required", http.StatusBadRequest)
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
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		if c.sess != nil && c.sess.conn == c {
			c.sess.conn = nil
		}
		s.mu.Unlock()
		ws.Close()
	}()
	s.mu.Lock()
	interval := s.heartbeatInterval
	s.mu.Unlock()
	hello, _ := json.Marshal(map[string]int64{"heartbeat_interval": interval.Milliseconds()})
	if c.write(frame{Op: opHello, D: hello}) != nil {
		return
	}
	atResumeURL := strings.HasPrefix(r.URL.Path, "/resume")
	for {
		var f frame
		if err := ws.ReadJSON(&f); err != nil {
			var ce *websocket.CloseError
			if asClose(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway) {
				// Closing with 1000 or 1001 ends the session: it cannot be resumed.
				s.mu.Lock()
				if c.sess != nil {
					delete(s.sessions, c.sess.id)
				}
				s.mu.Unlock()
			}
			return
		}
		switch f.Op {
		case opHeartbeat:
			s.mu.Lock()
			s.stats.Heartbeats++
			wedged := c.wedged
			s.mu.Unlock()
			if !wedged {
				c.write(frame{Op: opHeartbeatAck})
			}
		case opIdentify:
			if !s.identify(c, f.D) {
				return
			}
		case opResume:
			if !s.resume(c, f.D, atResumeURL) {
				return
			}
		}
	}
}

func asClose(err error, target **websocket.CloseError) bool {
	ce, ok := err.(*websocket.CloseError)
	if ok {
		*target = ce
	}
	return ok
}

func (s *Server) tokenOK(tok string) bool {
	s.mu.Lock()
	refuse := s.refuseGateway
	s.mu.Unlock()
	return !refuse && strings.TrimPrefix(tok, "Bot ") == s.Token
}

// RefuseGatewayToken makes the gateway close Identify and Resume with 4004
// while the REST API still accepts the token, as after a token reset.
func (s *Server) RefuseGatewayToken(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseGateway = refuse
}

func (s *Server) identify(c *conn, d json.RawMessage) bool {
	var id struct {
		Token   string `json:"token"`
		Intents int    `json:"intents"`
	}
	json.Unmarshal(d, &id)
	s.mu.Lock()
	s.stats.Identifies++
	s.stats.Intents = id.Intents
	already := c.sess != nil
	disallow := s.disallowContent
	s.mu.Unlock()
	switch {
	case already:
		c.closeWith(CloseAlreadyAuthenticated, "Already authenticated.")
		return false
	case !s.tokenOK(id.Token):
		c.closeWith(CloseAuthenticationFailed, "Authentication failed.")
		return false
	case disallow && id.Intents&IntentMessageContent != 0:
		c.closeWith(CloseDisallowedIntents, "Disallowed intent(s).")
		return false
	}
	sess := &session{id: "sess-" + s.NewID(), intents: id.Intents, conn: c}
	s.mu.Lock()
	s.sessions[sess.id] = sess
	c.sess = sess
	s.mu.Unlock()
	s.dispatch(sess, "READY", map[string]any{
		"v": 10, "user": s.Bot, "guilds": []any{}, "session_id": sess.id,
		"resume_gateway_url": s.readyResumeURL(),
		"application":        map[string]any{"id": s.Bot.ID, "flags": 0},
	})
	return true
}

func (s *Server) resume(c *conn, d json.RawMessage, atResumeURL bool) bool {
	var rs struct {
		Token     string `json:"token"`
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
	}
	json.Unmarshal(d, &rs)
	if !s.tokenOK(rs.Token) {
		c.closeWith(CloseAuthenticationFailed, "Authentication failed.")
		return false
	}
	s.mu.Lock()
	sess, ok := s.sessions[rs.SessionID]
	if s.refuseResume {
		ok = false
	}
	if !ok {
		s.mu.Unlock()
		invalid, _ := json.Marshal(false)
		c.write(frame{Op: opInvalidSession, D: invalid})
		return true
	}
	s.stats.Resumes++
	if atResumeURL {
		s.stats.ResumesAtResumeURL++
	}
	if old := sess.conn; old != nil && old != c {
		old.ws.Close()
	}
	sess.conn = c
	c.sess = sess
	from := rs.Seq - int64(s.resumeOverlap)
	var replay []event
	for _, e := range sess.log {
		if e.seq > from {
			replay = append(replay, e)
		}
	}
	s.mu.Unlock()
	for _, e := range replay {
		typ, seq := e.typ, e.seq
		if c.write(frame{Op: opDispatch, D: e.data, S: &seq, T: &typ}) != nil {
			return false
		}
	}
	s.dispatch(sess, "RESUMED", map[string]any{})
	return true
}

// dispatch logs an event on sess and sends it if the session is connected
// and its connection is not wedged.
func (s *Server) dispatch(sess *session, typ string, data any) {
	raw, _ := json.Marshal(data)
	s.mu.Lock()
	sess.seq++
	e := event{seq: sess.seq, typ: typ, data: raw}
	if typ != "READY" && typ != "RESUMED" {
		sess.log = append(sess.log, e)
		if len(sess.log) > maxLog {
			sess.log = sess.log[len(sess.log)-maxLog:]
		}
	}
	c := sess.conn
	if c != nil && c.wedged {
		c = nil
	}
	s.mu.Unlock()
	if c != nil {
		c.write(frame{Op: opDispatch, D: raw, S: &e.seq, T: &typ})
	}
}

// Post makes a user write m: MESSAGE_CREATE goes to every live session
// (connected, or dropped and resumable). Missing fields are filled in; the
// message as dispatched is returned.
func (s *Server) Post(m Message) Message {
	if m.ID == "" {
		m.ID = s.NewID()
	}
	if m.Timestamp == "" {
		m.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if m.Mentions == nil {
		m.Mentions = []User{}
	}
	if m.Attachments == nil {
		m.Attachments = []Attachment{}
	}
	if m.MentionRoles == nil {
		m.MentionRoles = []string{}
	}
	if r := m.ReferencedMessage; r != nil {
		ref := *r
		if ref.Timestamp == "" {
			ref.Timestamp = m.Timestamp
		}
		if ref.Mentions == nil {
			ref.Mentions = []User{}
		}
		if ref.Attachments == nil {
			ref.Attachments = []Attachment{}
		}
		m.ReferencedMessage = &ref
	}
	s.mu.Lock()
	s.remember(m)
	sessions := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	for _, sess := range sessions {
		out := m
		if sess.intents&IntentMessageContent == 0 && m.GuildID != "" && !s.mentionsBot(m) {
			// Without the message content intent Discord blanks guild
			// messages that do not mention the bot.
			out.Content = ""
			out.Attachments = []Attachment{}
		}
		s.dispatch(sess, "MESSAGE_CREATE", out)
	}
	return m
}

func (s *Server) mentionsBot(m Message) bool {
	for _, u := range m.Mentions {
		if u.ID == s.Bot.ID {
			return true
		}
	}
	return false
}

// Drop cuts every gateway connection without a close frame, as a network
// failure does; sessions stay resumable.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.ws.UnderlyingConn().Close()
	}
}

// CloseAll closes every gateway connection with code.
func (s *Server) CloseAll(code int, reason string) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.closeWith(code, reason)
	}
}

// Reconnect asks every connected client to reconnect (op 7).
func (s *Server) Reconnect() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.write(frame{Op: opReconnect})
	}
}

// Wedge makes the open connections stop acknowledging heartbeats and stop
// delivering events while staying open; new connections are healthy.
func (s *Server) Wedge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.wedged = true
	}
}

// ResumeOverlap makes resumes replay n events the client already had, as
// Discord may when the client's sequence lags what it processed.
func (s *Server) ResumeOverlap(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumeOverlap = n
}

// SetResumeURL makes READY name u as resume_gateway_url ("" restores
// ResumeURL), as when Discord sends a client to a gateway node that is
// later retired.
func (s *Server) SetResumeURL(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumeURL = u
}

func (s *Server) readyResumeURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumeURL != "" {
		return s.resumeURL
	}
	return s.ResumeURL()
}

// RefuseResume makes every resume answer Invalid Session (not resumable).
func (s *Server) RefuseResume(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuseResume = refuse
}

// DisallowMessageContent makes Identify with the message content intent
// fail with close 4014, as when the intent is not enabled for the bot.
func (s *Server) DisallowMessageContent(disallow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disallowContent = disallow
}
