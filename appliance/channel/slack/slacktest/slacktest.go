// Package slacktest is a fake of Slack on loopback for tests: the Web API
// methods a Socket Mode bot uses (auth.test, apps.connections.open,
// chat.postMessage, users.info, file downloads) and the Socket Mode
// WebSocket (hello, pings, events_api envelopes, acknowledgements, Slack's
// redelivery of unacknowledged envelopes with retry_attempt, disconnect
// requests). The channel's own Web API and Socket Mode client talks to it,
// so the code under test is the code that talks to Slack.
//
// Knobs break it the ways Slack breaks: a dropped socket, a socket that
// stays open but goes quiet (no pings, no events), refused tokens
// (invalid_auth), 429 with Retry-After, refused formatting.
package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Posted is a message the bot posted with chat.postMessage, or a file it
// shared (files.completeUploadExternal).
type Posted struct {
	Channel  string
	Text     string
	ThreadTS string
	// File and FileData are a shared file's name and content.
	File     string
	FileData []byte
	// Mrkdwn is false when the bot asked for plain text (mrkdwn=false).
	Mrkdwn bool
	TS     string
	At     time.Time
}

// String shows a post briefly (test failures print it).
func (p Posted) String() string {
	t := p.Text
	if len(t) > 80 {
		t = t[:80] + "…"
	}
	return fmt.Sprintf("{channel %s thread %q mrkdwn %v file %q: %q}", p.Channel, p.ThreadTS, p.Mrkdwn, p.File, t)
}

// User is a workspace member users.info describes.
type User struct {
	ID          string
	Name        string // the legacy username (@name)
	RealName    string
	DisplayName string
	// TeamID is the member's own workspace: another organisation's for a
	// Slack Connect guest of a shared channel (default: the bot's).
	TeamID string
}

// Stats count what happened.
type Stats struct {
	// Opens counts apps.connections.open calls; Connections WebSocket
	// connections; Open those open now.
	Opens, Connections, Open int
	// Envelopes counts envelope deliveries (retries included), Acks the
	// acknowledgements received, Retries redeliveries of unacknowledged ones.
	Envelopes, Acks, Retries int
	// MaxAckDelay is the longest time an envelope waited for its ack.
	MaxAckDelay time.Duration
	// Origins are the Origin headers of WebSocket handshakes.
	Origins []string
	// Reactions counts reactions the bot added.
	Reactions int
}

// Server is the fake.
type Server struct {
	HTTP *httptest.Server
	// BotToken and AppToken are the tokens the fake accepts.
	BotToken, AppToken string
	// BotUserID, BotName, TeamID describe the bot (auth.test).
	BotUserID, BotName, TeamID, AppID string
	mu                                sync.Mutex
	// pingInterval is how often the fake pings each connection, as Slack
	// does; ackTimeout how long an envelope may go unacknowledged before
	// it is delivered again (Slack: about 3 s; retries stop after 3).
	pingInterval, ackTimeout time.Duration
	failUsersInfo            int
	users                    map[string]User
	posted                   []Posted
	postCh                   chan struct{}
	conns                    map[*conn]struct{}
	pending                  []*envelope // not yet acknowledged, in delivery order
	stats                    Stats
	files                    map[string][]byte
	// knobs
	rateLimits   []int // Retry-After seconds for the next chat.postMessage calls
	rejectMrkdwn bool
	ignoreAcks   int
	reactions    map[string]bool // "channel/ts/name" present
	uploads      map[string]*upload
	down         bool
	afterHello   string // a disconnect's reason each new connection gets after its hello
	ts           atomic.Int64
	seq          atomic.Int64
	closed       chan struct{}
	closeOnce    sync.Once
	wg           sync.WaitGroup
}

// New starts a fake on a free loopback port.
func New() *Server {
	s := newServer()
	s.HTTP = httptest.NewServer(s.handler())
	s.start()
	return s
}

// NewAt starts the fake on addr (host:port), for tests where Slack becomes
// reachable after the gateway started.
func NewAt(addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := newServer()
	s.HTTP = httptest.NewUnstartedServer(s.handler())
	s.HTTP.Listener.Close()
	s.HTTP.Listener = l
	s.HTTP.Start()
	s.start()
	return s, nil
}

func newServer() *Server {
	s := &Server{
		BotToken: "xoxb-test-bot-token", AppToken: "xapp-1-test-app-token",
		BotUserID: "UBOT0001", BotName: "perch", TeamID: "T0001", AppID: "A0001",
		pingInterval: 5 * time.Second, ackTimeout: 3 * time.Second,
		users: map[string]User{}, postCh: make(chan struct{}, 1), conns: map[*conn]struct{}{},
		files: map[string][]byte{}, closed: make(chan struct{}), uploads: map[string]*upload{}, reactions: map[string]bool{},
	}
	s.ts.Store(1700000000_000100)
	return s
}

func (s *Server) start() {
	s.wg.Add(1)
	go s.redeliver()
}

// Close stops the fake; a second call does nothing.
func (s *Server) Close() {
	s.closeOnce.Do(s.close)
}

func (s *Server) close() {
	close(s.closed)
	s.mu.Lock()
	for c := range s.conns {
		c.ws.Close()
	}
	s.mu.Unlock()
	s.HTTP.CloseClientConnections()
	s.HTTP.Close()
	s.wg.Wait()
}

// APIBase is the Web API base for channels.slack.api_base (with its
// trailing slash, as Slack's own).
func (s *Server) APIBase() string { return s.HTTP.URL + "/api/" }

// SetPingInterval sets how often new connections are pinged (default 5 s).
func (s *Server) SetPingInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pingInterval = d
}

// SetAckTimeout sets how long an envelope may wait for its ack before it
// is delivered again (default 3 s, as Slack).
func (s *Server) SetAckTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ackTimeout = d
}

// AddUser makes users.info know u.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Open = len(s.conns)
	st.Origins = append([]string(nil), s.stats.Origins...)
	return st
}

// Unacked returns how many envelopes still wait for their ack.
func (s *Server) Unacked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Posted returns the messages the bot posted, in order.
func (s *Server) Posted() []Posted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Posted(nil), s.posted...)
}

// WaitPosted waits until at least n messages were posted or timeout passes.
func (s *Server) WaitPosted(n int, timeout time.Duration) []Posted {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if got := s.Posted(); len(got) >= n {
			return got
		}
		select {
		case <-s.postCh:
		case <-deadline.C:
			return s.Posted()
		}
	}
}

// RateLimit makes the next len(retryAfter) chat.postMessage calls answer
// 429 with Retry-After set to each value (seconds) in turn.
func (s *Server) RateLimit(retryAfter ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimits = append(s.rateLimits, retryAfter...)
}

// RejectMrkdwn makes chat.postMessage refuse formatted text
// (invalid_blocks) while accepting mrkdwn=false.
func (s *Server) RejectMrkdwn(reject bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectMrkdwn = reject
}

// IgnoreAcks makes the fake lose the next n acknowledgements, as when an
// ack is lost with a dropped connection: Slack then redelivers the
// envelope with retry_attempt set.
func (s *Server) IgnoreAcks(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignoreAcks = n
}

// Down makes every Web API call fail with 503 until called with false.
func (s *Server) Down(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// NextTS returns a fresh message timestamp.
func (s *Server) NextTS() string {
	n := s.ts.Add(100)
	return fmt.Sprintf("%d.%06d", n/1000000, n%1000000)
}

// AddFile makes data downloadable with the bot token and returns its
// url_private_download.
func (s *Server) AddFile(name string, data []byte) string {
	id := "F" + strconv.FormatInt(s.seq.Add(1), 10)
	s.mu.Lock()
	s.files[id+"/"+name] = data
	s.mu.Unlock()
	return fmt.Sprintf("%s/files-pri/%s/%s", s.HTTP.URL, id, name)
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth.test", s.method(s.botToken, s.authTest))
	mux.HandleFunc("POST /api/apps.connections.open", s.method(s.appToken, s.connectionsOpen))
	mux.HandleFunc("POST /api/chat.postMessage", s.method(s.botToken, s.postMessage))
	mux.HandleFunc("POST /api/users.info", s.method(s.botToken, s.usersInfo))
	mux.HandleFunc("GET /api/users.info", s.method(s.botToken, s.usersInfo))
	mux.HandleFunc("GET /files-pri/{id}/{name}", s.file)
	mux.HandleFunc("POST /api/reactions.add", s.method(s.botToken, s.reaction(true)))
	mux.HandleFunc("POST /api/reactions.remove", s.method(s.botToken, s.reaction(false)))
	mux.HandleFunc("POST /api/files.getUploadURLExternal", s.method(s.botToken, s.uploadURL))
	mux.HandleFunc("POST /upload/{id}", s.receiveUpload)
	mux.HandleFunc("POST /api/files.completeUploadExternal", s.method(s.botToken, s.completeUpload))
	mux.HandleFunc("GET /link/", s.serveSocket)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func slackError(w http.ResponseWriter, code string) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": code})
}

// request is a Web API call's arguments, from a form or a JSON body.
type request struct {
	token string
	args  map[string]string
}

func (s *Server) botToken(tok string) bool { return tok == s.BotToken }
func (s *Server) appToken(tok string) bool { return tok == s.AppToken }

// method parses a Web API call and checks its token as Slack does: the
// Authorization bearer or the token argument.
func (s *Server) method(tokenOK func(string) bool, h func(http.ResponseWriter, request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.down
		s.mu.Unlock()
		if down {
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
			return
		}
		req := request{args: map[string]string{}}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			var m map[string]any
			json.Unmarshal(body, &m)
			for k, v := range m {
				switch v := v.(type) {
				case string:
					req.args[k] = v
				default:
					b, _ := json.Marshal(v)
					req.args[k] = string(b)
				}
			}
		} else {
			vals, _ := url.ParseQuery(string(body))
			for k := range vals {
				req.args[k] = vals.Get(k)
			}
			for k := range r.URL.Query() {
				req.args[k] = r.URL.Query().Get(k)
			}
		}
		req.token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if req.token == "" {
			req.token = req.args["token"]
		}
		if req.token == "" {
			slackError(w, "not_authed")
			return
		}
		if !tokenOK(req.token) {
			slackError(w, "invalid_auth")
			return
		}
		h(w, req)
	}
}

func (s *Server) authTest(w http.ResponseWriter, _ request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "url": "https://fake.slack.com/", "team": "Fake", "user": s.BotName,
		"team_id": s.TeamID, "user_id": s.BotUserID, "bot_id": "B0001", "is_enterprise_install": false,
	})
}

func (s *Server) connectionsOpen(w http.ResponseWriter, _ request) {
	s.mu.Lock()
	s.stats.Opens++
	s.mu.Unlock()
	ticket := strconv.FormatInt(s.seq.Add(1), 10)
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "url": "ws" + strings.TrimPrefix(s.HTTP.URL, "http") + "/link/?ticket=" + ticket + "&app_id=" + s.AppID,
	})
}

func (s *Server) postMessage(w http.ResponseWriter, r request) {
	p := Posted{Channel: r.args["channel"], Text: r.args["text"], ThreadTS: r.args["thread_ts"], Mrkdwn: r.args["mrkdwn"] != "false", At: time.Now()}
	s.mu.Lock()
	if len(s.rateLimits) > 0 {
		after := s.rateLimits[0]
		s.rateLimits = s.rateLimits[1:]
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(after))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	reject := s.rejectMrkdwn
	s.mu.Unlock()
	switch {
	case p.Channel == "":
		slackError(w, "channel_not_found")
		return
	case p.Text == "" && r.args["blocks"] == "":
		slackError(w, "no_text")
		return
	case len([]rune(p.Text)) > 40000:
		slackError(w, "msg_too_long")
		return
	case reject && p.Mrkdwn:
		slackError(w, "invalid_blocks")
		return
	}
	p.TS = s.NextTS()
	s.mu.Lock()
	s.posted = append(s.posted, p)
	s.mu.Unlock()
	select {
	case s.postCh <- struct{}{}:
	default:
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "channel": p.Channel, "ts": p.TS,
		"message": map[string]any{"type": "message", "user": s.BotUserID, "text": p.Text, "ts": p.TS, "thread_ts": p.ThreadTS}})
}

// FailUsersInfo makes the next n users.info calls answer 503, as Slack
// does in an outage of that method alone.
func (s *Server) FailUsersInfo(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failUsersInfo = n
}

func (s *Server) usersInfo(w http.ResponseWriter, r request) {
	s.mu.Lock()
	u, ok := s.users[r.args["user"]]
	fail := s.failUsersInfo > 0
	if fail {
		s.failUsersInfo--
	}
	s.mu.Unlock()
	if fail {
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		return
	}
	if !ok {
		slackError(w, "user_not_found")
		return
	}
	team := u.TeamID
	if team == "" {
		team = s.TeamID
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "user": map[string]any{
		"id": u.ID, "team_id": team, "name": u.Name, "real_name": u.RealName,
		"profile": map[string]any{"display_name": u.DisplayName, "real_name": u.RealName},
	}})
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.BotToken {
		// Slack answers an unauthenticated file download with its login page.
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>sign in</html>")
		return
	}
	s.mu.Lock()
	data, ok := s.files[r.PathValue("id")+"/"+r.PathValue("name")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

type upload struct {
	name     string
	length   int
	data     []byte
	received bool
}

func (s *Server) uploadURL(w http.ResponseWriter, r request) {
	n, err := strconv.Atoi(r.args["length"])
	if err != nil || n <= 0 || r.args["filename"] == "" {
		slackError(w, "invalid_arguments")
		return
	}
	id := "F" + strconv.FormatInt(s.seq.Add(1), 10)
	s.mu.Lock()
	s.uploads[id] = &upload{name: r.args["filename"], length: n}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "upload_url": s.HTTP.URL + "/upload/" + id, "file_id": id})
}

func (s *Server) receiveUpload(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.BotToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		http.Error(w, "no file", http.StatusBadRequest)
		return
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, 64<<20))
	s.mu.Lock()
	u, ok := s.uploads[r.PathValue("id")]
	if ok {
		u.data, u.received = data, true
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	io.WriteString(w, "OK - "+strconv.Itoa(len(data)))
}

func (s *Server) completeUpload(w http.ResponseWriter, r request) {
	var files []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if json.Unmarshal([]byte(r.args["files"]), &files) != nil || len(files) == 0 {
		slackError(w, "invalid_arguments")
		return
	}
	var out []map[string]any
	for _, f := range files {
		s.mu.Lock()
		u, ok := s.uploads[f.ID]
		s.mu.Unlock()
		if !ok || !u.received || len(u.data) != u.length {
			slackError(w, "file_upload_failed")
			return
		}
		s.mu.Lock()
		s.posted = append(s.posted, Posted{Channel: r.args["channel_id"], ThreadTS: r.args["thread_ts"], File: u.name, FileData: u.data, Mrkdwn: true, TS: s.NextTS(), At: time.Now()})
		s.mu.Unlock()
		out = append(out, map[string]any{"id": f.ID, "title": f.Title})
	}
	select {
	case s.postCh <- struct{}{}:
	default:
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "files": out})
}

// reaction is reactions.add (add) or reactions.remove.
func (s *Server) reaction(add bool) func(http.ResponseWriter, request) {
	return func(w http.ResponseWriter, r request) {
		key := r.args["channel"] + "/" + r.args["timestamp"] + "/" + r.args["name"]
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case r.args["channel"] == "" || r.args["timestamp"] == "" || r.args["name"] == "":
			slackError(w, "invalid_arguments")
		case add && s.reactions[key]:
			slackError(w, "already_reacted")
		case !add && !s.reactions[key]:
			slackError(w, "no_reaction")
		default:
			if add {
				s.reactions[key] = true
				s.stats.Reactions++
			} else {
				delete(s.reactions, key)
			}
			writeJSON(w, http.StatusOK, map[string]any{"ok": true})
		}
	}
}

// Reacted reports whether the bot's reaction name is on message ts of channel.
func (s *Server) Reacted(channel, ts, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reactions[channel+"/"+ts+"/"+name]
}
