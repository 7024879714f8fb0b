// Package discordtest is a fake of Discord's API on loopback for tests: the
// REST API (gateway discovery, users/@me, channel messages, typing,
// guild roles, attachments) and the gateway WebSocket (Hello, Identify → READY,
// heartbeats and their acks, Resume with replay of missed events, Invalid
// Session, close codes). Production code talks to it over real HTTP and a
// real WebSocket, so the code under test is the code that talks to Discord.
//
// Knobs let tests break it the ways Discord breaks: a dropped socket, a
// socket that stays open but stops acknowledging heartbeats (wedged), a
// rejected token (close 4004), 429s with retry_after, refused content.
package discordtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Version is the API version of the fake's REST base.
const Version = "v10"

// IntentMessageContent is the privileged intent without which guild
// message content arrives empty.
const IntentMessageContent = 1 << 15

// User is a Discord user.
type User struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name,omitempty"`
	Bot        bool   `json:"bot,omitempty"`
}

// Attachment is a file on a message; URL is served by the fake.
type Attachment struct {
	ID          string `json:"id"`
	Filename    string `json:"filename"`
	Size        int    `json:"size"`
	URL         string `json:"url"`
	ContentType string `json:"content_type,omitempty"`
	// Data is what the fake serves at URL (not sent on the wire).
	Data []byte `json:"-"`
}

// Message is a message as MESSAGE_CREATE and the REST API carry it.
type Message struct {
	ID                string           `json:"id"`
	ChannelID         string           `json:"channel_id"`
	GuildID           string           `json:"guild_id,omitempty"`
	Author            User             `json:"author"`
	Member            *Member          `json:"member,omitempty"`
	Content           string           `json:"content"`
	Timestamp         string           `json:"timestamp"`
	Mentions          []User           `json:"mentions"`
	MentionRoles      []string         `json:"mention_roles"`
	Attachments       []Attachment     `json:"attachments"`
	Type              int              `json:"type"`
	Flags             int              `json:"flags,omitempty"`
	MessageReference  *Reference       `json:"message_reference,omitempty"`
	ReferencedMessage *Message         `json:"referenced_message,omitempty"`
	AllowedMentions   *json.RawMessage `json:"allowed_mentions,omitempty"`
}

// Member is the guild member part of a guild message.
type Member struct {
	Nick string `json:"nick,omitempty"`
}

// Reference points at the message a message replies to.
type Reference struct {
	MessageID       string `json:"message_id"`
	ChannelID       string `json:"channel_id,omitempty"`
	GuildID         string `json:"guild_id,omitempty"`
	FailIfNotExists *bool  `json:"fail_if_not_exists,omitempty"`
}

// Sent is a message the bot created through the REST API.
type Sent struct {
	ChannelID string
	Content   string
	// ReplyTo is message_reference.message_id.
	ReplyTo string
	// Files are the names of uploaded attachments.
	Files []string
	// FileData are their contents, in order.
	FileData [][]byte
	// FileTypes are their parts' Content-Type headers, in order.
	FileTypes []string
	At        time.Time
	// Raw is the request body (JSON, or the payload_json of a multipart).
	Raw []byte
}

// String shows a sent message briefly (test failures print it).
func (s Sent) String() string {
	c := s.Content
	if len(c) > 80 {
		c = c[:80] + "…"
	}
	return fmt.Sprintf("{channel %s reply-to %q files %v: %q}", s.ChannelID, s.ReplyTo, s.Files, c)
}

// Stats count what happened on the gateway.
type Stats struct {
	// Connections counts WebSocket connections accepted; Open is how many
	// are open now.
	Connections, Open   int
	Identifies, Resumes int
	// ResumesAtResumeURL counts resumes made at READY's resume_gateway_url.
	ResumesAtResumeURL int
	Heartbeats         int
	// Intents is the intents of the last Identify.
	Intents int
	// Fetches counts GET /channels/{id}/messages.
	Fetches int
}

// Server is the fake.
type Server struct {
	HTTP *httptest.Server
	// Token is the bot token the fake accepts.
	Token string
	// Bot is the bot's user, returned by users/@me and READY.
	Bot User

	mu sync.Mutex
	// sessions by id; a session outlives its connections so it can be resumed.
	sessions map[string]*session
	conns    map[*conn]struct{}
	stats    Stats
	sent     []Sent
	sentCh   chan struct{}
	files    map[string][]byte
	typing   map[string]int
	roles    map[string][]Role // by guild, @everyone first
	// history is every channel's messages, oldest first, for
	// GET /channels/{id}/messages: users' (Post) and the bot's.
	history map[string][]Message

	// knobs
	rateLimits    []time.Duration
	rateScope     string
	rejectFormat  func(content string) bool
	resumeOverlap int
	refuseResume  bool
	resumeURL     string
	restDown      bool
	// failFetches is how many more GET /channels/{id}/messages of each
	// channel answer 502.
	failFetches map[string]int
	// stallFetches holds the next GET /channels/{id}/messages of each
	// channel (StallFetches).
	stallFetches map[string]*stall

	disallowContent bool
	// heartbeatInterval is sent in Hello.
	heartbeatInterval time.Duration
	refuseGateway     bool

	nextID    atomic.Int64
	closeOnce sync.Once
}

// New starts a fake on a free loopback port.
func New() *Server {
	s := newServer()
	s.HTTP = httptest.NewServer(s.handler())
	return s
}

// NewAt starts the fake on addr (host:port), for tests where the platform
// comes up after the gateway did. It returns nil with the error when addr
// cannot be bound.
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
	return s, nil
}

func newServer() *Server {
	s := &Server{
		Token:             "discord-test-token",
		Bot:               User{ID: "900000000000000001", Username: "perch", Bot: true},
		heartbeatInterval: 41250 * time.Millisecond,
		sessions:          map[string]*session{},
		conns:             map[*conn]struct{}{},
		sentCh:            make(chan struct{}, 1),
		files:             map[string][]byte{},
		typing:            map[string]int{},
		roles:             map[string][]Role{},
		history:           map[string][]Message{},
		failFetches:       map[string]int{},
		stallFetches:      map[string]*stall{},
	}
	s.nextID.Store(1000000000000000000)
	return s
}

// Close stops the fake and closes every gateway connection; a second
// call does nothing.
func (s *Server) Close() { s.closeOnce.Do(s.close) }

func (s *Server) close() {
	s.mu.Lock()
	for c := range s.conns {
		c.ws.Close()
	}
	s.mu.Unlock()
	s.HTTP.CloseClientConnections()
	s.HTTP.Close()
}

// APIBase is the REST base for channels.discord.api_base.
func (s *Server) APIBase() string { return s.HTTP.URL + "/api/" + Version }

// GatewayURL is what GET /gateway returns: like Discord's, a bare host
// that clients append "/?v=…&encoding=json" to.
func (s *Server) GatewayURL() string { return "ws" + strings.TrimPrefix(s.HTTP.URL, "http") }

// ResumeURL is READY's resume_gateway_url: the same server under another
// path, so tests can tell where a client resumed.
func (s *Server) ResumeURL() string { return s.GatewayURL() + "/resume" }

// NewID returns a fresh snowflake.
// They are snowflakes, as Discord's: the millisecond since 2015 shifted
// left 22 bits, so ids grow with time across channels and say when.
func (s *Server) NewID() string {
	now := (time.Now().UnixMilli() - 1420070400000) << 22
	for {
		last := s.nextID.Load()
		id := max(last+1, now)
		if s.nextID.CompareAndSwap(last, id) {
			return strconv.FormatInt(id, 10)
		}
	}
}

// Stats returns the gateway counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Open = len(s.conns)
	return st
}

// Sent returns the messages the bot created, in order.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// WaitSent waits until at least n messages were created or timeout passes,
// and returns those there are.
func (s *Server) WaitSent(n int, timeout time.Duration) []Sent {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if got := s.Sent(); len(got) >= n {
			return got
		}
		select {
		case <-s.sentCh:
		case <-deadline.C:
			return s.Sent()
		}
	}
}

// Typing counts typing indicators triggered per channel.
func (s *Server) Typing(channelID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[channelID]
}

// SetHeartbeatInterval sets the interval new connections are told in Hello
// (default 41.25 s, as Discord).
func (s *Server) SetHeartbeatInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeatInterval = d
}

// RateLimit makes the next len(after) message creations answer 429 with
// retry_after set to each duration in turn; scope is X-RateLimit-Scope
// ("user", "global" or "shared"; "" means "user").
func (s *Server) RateLimit(scope string, after ...time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimits = append(s.rateLimits, after...)
	s.rateScope = scope
}

// RejectContent makes message creation answer 400 Invalid Form Body for
// content that reject reports true for (nil accepts everything).
func (s *Server) RejectContent(reject func(content string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectFormat = reject
}

// RESTDown makes every REST call answer 502 until called with false.
func (s *Server) RESTDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restDown = down
}

func (s *Server) notifySent() {
	select {
	case s.sentCh <- struct{}{}:
	default:
	}
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	api := "/api/" + Version
	mux.HandleFunc("GET "+api+"/gateway", s.gateway)
	mux.HandleFunc("GET "+api+"/gateway/bot", s.auth(s.gatewayBot))
	mux.HandleFunc("GET "+api+"/users/@me", s.auth(s.me))
	mux.HandleFunc("POST "+api+"/channels/{channel}/messages", s.auth(s.createMessage))
	mux.HandleFunc("GET "+api+"/channels/{channel}/messages", s.auth(s.channelMessages))
	mux.HandleFunc("POST "+api+"/channels/{channel}/typing", s.auth(s.triggerTyping))
	mux.HandleFunc("GET "+api+"/guilds/{guild}/roles", s.auth(s.guildRoles))
	mux.HandleFunc("GET /attachments/{id}/{name}", s.attachment)
	mux.HandleFunc("GET /{$}", s.serveGateway)
	mux.HandleFunc("GET /resume/", s.serveGateway)
	mux.HandleFunc("GET /resume", s.serveGateway)
	return mux
}

// apiError writes Discord's JSON error shape.
func apiError(w http.ResponseWriter, status, code int, msg string, extra map[string]any) {
	body := map[string]any{"message": msg, "code": code}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// auth checks the Authorization header ("Bot <token>") as Discord does.
func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.restDown
		s.mu.Unlock()
		if down {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		if r.Header.Get("Authorization") != "Bot "+s.Token {
			apiError(w, http.StatusUnauthorized, 0, "401: Unauthorized", nil)
			return
		}
		next(w, r)
	}
}

func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"url": s.GatewayURL()})
}

func (s *Server) gatewayBot(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"url": s.GatewayURL(), "shards": 1,
		"session_start_limit": map[string]int{"total": 1000, "remaining": 999, "reset_after": 86400000, "max_concurrency": 1},
	})
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Bot)
}

func (s *Server) triggerTyping(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.typing[r.PathValue("channel")]++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// createMessage is POST /channels/{id}/messages: JSON, or multipart with
// payload_json and files[n].
func (s *Server) createMessage(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Content          string     `json:"content"`
		MessageReference *Reference `json:"message_reference"`
	}
	sent := Sent{ChannelID: r.PathValue("channel"), At: time.Now()}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			apiError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.", nil)
			return
		}
		sent.Raw = []byte(r.FormValue("payload_json"))
		for key, fhs := range r.MultipartForm.File {
			if !strings.HasPrefix(key, "files[") && !strings.HasPrefix(key, "file") {
				continue
			}
			for _, fh := range fhs {
				f, err := fh.Open()
				if err != nil {
					continue
				}
				data, _ := io.ReadAll(f)
				f.Close()
				sent.Files = append(sent.Files, fh.Filename)
				sent.FileData = append(sent.FileData, data)
				sent.FileTypes = append(sent.FileTypes, fh.Header.Get("Content-Type"))
			}
		}
	} else {
		sent.Raw, _ = io.ReadAll(io.LimitReader(r.Body, 1<<20))
	}
	if err := json.Unmarshal(sent.Raw, &body); err != nil {
		apiError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.", nil)
		return
	}
	sent.Content = body.Content
	if body.MessageReference != nil {
		sent.ReplyTo = body.MessageReference.MessageID
	}

	s.mu.Lock()
	if len(s.rateLimits) > 0 {
		after := s.rateLimits[0]
		s.rateLimits = s.rateLimits[1:]
		scope := s.rateScope
		s.mu.Unlock()
		if scope == "" {
			scope = "user"
		}
		secs := after.Seconds()
		w.Header().Set("Retry-After", strconv.Itoa(int(secs+0.999)))
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(secs, 'f', 3, 64))
		w.Header().Set("X-RateLimit-Bucket", "fake-bucket")
		w.Header().Set("X-RateLimit-Scope", scope)
		if scope == "global" {
			w.Header().Set("X-RateLimit-Global", "true")
		}
		writeJSON(w, http.StatusTooManyRequests, map[string]any{
			"message": "You are being rate limited.", "retry_after": secs, "global": scope == "global",
		})
		return
	}
	reject := s.rejectFormat
	s.mu.Unlock()

	if n := len([]rune(body.Content)); n > 2000 {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body", map[string]any{"errors": map[string]any{
			"content": map[string]any{"_errors": []map[string]string{{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}}},
		}})
		return
	}
	if body.Content == "" && len(sent.Files) == 0 {
		apiError(w, http.StatusBadRequest, 50006, "Cannot send an empty message", nil)
		return
	}
	if reject != nil && reject(body.Content) {
		apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body", map[string]any{"errors": map[string]any{
			"content": map[string]any{"_errors": []map[string]string{{"code": "CONTENT_TYPE_INVALID", "message": "Invalid content."}}},
		}})
		return
	}
	id := s.NewID()
	m := Message{
		ID: id, ChannelID: sent.ChannelID, Author: s.Bot, Content: body.Content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}, Attachments: []Attachment{}, MentionRoles: []string{},
	}
	s.mu.Lock()
	s.sent = append(s.sent, sent)
	s.remember(m)
	s.mu.Unlock()
	s.notifySent()
	writeJSON(w, http.StatusOK, m)
}

// FailFetches makes the next n GET /channels/{id}/messages of channel
// answer 502, as Discord's REST does in an outage.
func (s *Server) FailFetches(channel string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failFetches[channel] = n
}

// stall is one held fetch: arrived is closed when it comes, release
// lets it answer.
type stall struct {
	arrived, release chan struct{}
	once             sync.Once
}

// StallFetches holds the next GET /channels/{id}/messages of channel
// until release is called or the client gives up, as a Discord that
// stopped answering does. arrived is closed once that fetch has come: a
// test stops the gateway in the middle of its catch-up there.
func (s *Server) StallFetches(channel string) (arrived <-chan struct{}, release func()) {
	st := &stall{arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.stallFetches[channel] = st
	s.mu.Unlock()
	return st.arrived, func() { st.once.Do(func() { close(st.release) }) }
}

// maxHistory bounds the messages kept per channel.
const maxHistory = 1000

// remember adds m to its channel's history; the caller holds mu.
func (s *Server) remember(m Message) {
	h := append(s.history[m.ChannelID], m)
	if len(h) > maxHistory {
		h = h[len(h)-maxHistory:]
	}
	s.history[m.ChannelID] = h
}

// channelMessages is GET /channels/{id}/messages with after (a message id)
// and limit (1-100, default 50): the limit messages right after after,
// newest first, without guild_id and member, as Discord's REST answers.
func (s *Server) channelMessages(w http.ResponseWriter, r *http.Request) {
	limit := 50
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body", map[string]any{"errors": map[string]any{"limit": "must be 1-100"}})
			return
		}
		limit = n
	}
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	s.mu.Lock()
	if n := s.failFetches[r.PathValue("channel")]; n > 0 {
		s.failFetches[r.PathValue("channel")] = n - 1
		s.mu.Unlock()
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return
	}
	if st := s.stallFetches[r.PathValue("channel")]; st != nil {
		delete(s.stallFetches, r.PathValue("channel"))
		s.mu.Unlock()
		close(st.arrived)
		select {
		case <-st.release:
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
	}
	s.stats.Fetches++
	var out []Message
	for _, m := range s.history[r.PathValue("channel")] {
		if id, _ := strconv.ParseInt(m.ID, 10, 64); id > after && len(out) < limit {
			m.GuildID, m.Member = "", nil
			out = append(out, m)
		}
	}
	s.mu.Unlock()
	slices.Reverse(out)
	if out == nil {
		out = []Message{}
	}
	writeJSON(w, http.StatusOK, out)
}

// Role is a guild role as GET /guilds/{id}/roles returns it.
type Role struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Color       int       `json:"color"`
	Hoist       bool      `json:"hoist"`
	Position    int       `json:"position"`
	Permissions string    `json:"permissions"`
	Managed     bool      `json:"managed"`
	Mentionable bool      `json:"mentionable"`
	Tags        *RoleTags `json:"tags,omitempty"`
	Flags       int       `json:"flags"`
}

// RoleTags mark a role as a bot's or an integration's.
type RoleTags struct {
	BotID string `json:"bot_id,omitempty"`
}

// AddRole adds r to guild's roles (after @everyone, which every guild
// has) and returns it with its id set.
func (s *Server) AddRole(guild string, r Role) Role {
	if r.ID == "" {
		r.ID = s.NewID()
	}
	if r.Permissions == "" {
		r.Permissions = "0"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Position = len(s.guildRolesLocked(guild))
	s.roles[guild] = append(s.roles[guild], r)
	return r
}

// BotRole adds the role Discord makes for the bot when it joins guild
// (managed, named after the bot, tagged with its id) and returns its id.
func (s *Server) BotRole(guild string) string {
	return s.AddRole(guild, Role{Name: s.Bot.Username, Managed: true, Mentionable: true, Tags: &RoleTags{BotID: s.Bot.ID}}).ID
}

// guildRolesLocked returns guild's roles, making @everyone (whose id is the
// guild's) first; s.mu is held.
func (s *Server) guildRolesLocked(guild string) []Role {
	if len(s.roles[guild]) == 0 {
		s.roles[guild] = []Role{{ID: guild, Name: "@everyone", Permissions: "0"}}
	}
	return s.roles[guild]
}

func (s *Server) guildRoles(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	roles := append([]Role(nil), s.guildRolesLocked(r.PathValue("guild"))...)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, roles)
}

// AddAttachment makes data downloadable and returns the attachment to put
// on a message.
func (s *Server) AddAttachment(filename, contentType string, data []byte) Attachment {
	id := s.NewID()
	s.mu.Lock()
	s.files[id+"/"+filename] = data
	s.mu.Unlock()
	return Attachment{ID: id, Filename: filename, Size: len(data), ContentType: contentType,
		URL: fmt.Sprintf("%s/attachments/%s/%s", s.HTTP.URL, id, filename), Data: data}
}

func (s *Server) attachment(w http.ResponseWriter, r *http.Request) {
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
