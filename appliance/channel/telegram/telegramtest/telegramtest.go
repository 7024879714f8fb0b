// Package telegramtest is a Telegram Bot API on loopback for tests: the
// methods Perch uses (getMe, getUpdates with offsets and long polling,
// sendMessage with HTML validation and length limits, sendChatAction,
// getFile and file downloads, sendPhoto, sendDocument, deleteWebhook),
// answering as the real API does — including its errors (401, 409
// Conflict, 429 with retry_after, 400 for bad markup or overlong text) — so
// the production code's own Bot API client is what the tests exercise.
package telegramtest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

// Limit is the Bot API's longest message text, in UTF-16 code units.
const Limit = 4096

// User is a Telegram user or bot account.
type User struct {
	ID                      int64  `json:"id"`
	IsBot                   bool   `json:"is_bot"`
	FirstName               string `json:"first_name"`
	LastName                string `json:"last_name,omitempty"`
	Username                string `json:"username,omitempty"`
	CanReadAllGroupMessages bool   `json:"can_read_all_group_messages,omitempty"`
}

// Sent is a message the bot sent.
type Sent struct {
	Method    string // sendMessage, sendPhoto, sendDocument
	ChatID    string
	ThreadID  string
	Text      string
	ParseMode string
	ReplyTo   int
	FileName  string
	FileSize  int
	At        time.Time
}

// Failure is a scripted error answer for a method.
type Failure struct {
	Code        int
	Description string
	RetryAfter  int
	// MigrateTo is parameters.migrate_to_chat_id: the group became a
	// supergroup with this id.
	MigrateTo int64
	// Pass answers the call as usual: a script lets calls through before
	// the one that fails.
	Pass bool
}

// Server is the fake Bot API.
type Server struct {
	*httptest.Server
	Token string

	mu         sync.Mutex
	bot        User
	updates    []map[string]any // queued, ascending update_id
	delivered  []map[string]any // every update ever queued
	again      []map[string]any // redeliveries for the next getUpdates
	nextUpdate int64
	nextMsg    int
	confirmed  int64 // highest offset a poller sent
	sent       []Sent
	actions    int
	files      map[string]file
	fail       map[string][]Failure
	conflict   bool
	wedged     bool
	webhook    string
	pollers    int
	polls      int
	rejectHTML bool
	slowFiles  time.Duration
	changed    chan struct{} // closed and replaced when updates arrive or state changes
}

type file struct {
	path string
	data []byte
}

// New starts a fake Bot API for token on a free loopback port.
func New(token string) *Server {
	return NewAt(token, "127.0.0.1:0")
}

// NewAt starts the fake on addr (a test reserves an address, starts the
// gateway against it while nothing listens, then brings the API up).
func NewAt(token, addr string) *Server {
	s := &Server{Token: token, nextUpdate: 100, nextMsg: 1000, files: map[string]file{}, fail: map[string][]Failure{},
		changed: make(chan struct{}),
		bot:     User{ID: 777000111, IsBot: true, FirstName: "Perch", Username: "perch_test_bot"}}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic("telegramtest: listen " + addr + ": " + err.Error())
	}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.Server.Start()
	return s
}

// Base is the Bot API root for channels.telegram.api_base.
func (s *Server) Base() string { return s.Server.URL }

// SetBot replaces the bot's identity (getMe's answer).
func (s *Server) SetBot(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bot = u
}

// Bot returns the bot's identity.
func (s *Server) Bot() User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bot
}

// SetConflict makes every getUpdates answer 409, as when another process
// polls the same bot.
func (s *Server) SetConflict(on bool) { s.set(func() { s.conflict = on }) }

// SetWedged makes getUpdates hang until the client gives up, as a
// connection that died without a reset does.
func (s *Server) SetWedged(on bool) { s.set(func() { s.wedged = on }) }

// SetWebhook sets a webhook: getUpdates answers 409 until deleteWebhook.
func (s *Server) SetWebhook(url string) { s.set(func() { s.webhook = url }) }

// RejectFormatting makes every message with a parse_mode fail as bad
// markup (400 can't parse entities), whatever it holds.
func (s *Server) RejectFormatting(on bool) { s.set(func() { s.rejectHTML = on }) }

// SlowDownloads makes every file download wait d before it answers, as
// a large file over a slow link does.
func (s *Server) SlowDownloads(d time.Duration) { s.set(func() { s.slowFiles = d }) }

// FailNext makes the next calls of method answer with the failures, in
// order.
func (s *Server) FailNext(method string, f ...Failure) {
	s.set(func() { s.fail[method] = append(s.fail[method], f...) })
}

// FailuresLeft is how many of the failures FailNext queued for method
// are still to be answered.
func (s *Server) FailuresLeft(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fail[method])
}

func (s *Server) set(fn func()) {
	s.mu.Lock()
	fn()
	s.notify()
	s.mu.Unlock()
}

// notify wakes waiting pollers; s.mu is held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Message describes an incoming message to queue.
type Message struct {
	ChatID   int64
	ChatType string // private (default), group, supergroup
	From     User
	Text     string
	// Entities are Bot API message entities (mention, text_mention,
	// bot_command) as JSON objects.
	Entities []map[string]any
	// ReplyToBot makes the message a reply to one of the bot's.
	ReplyToBot bool
	// ThreadID puts the message in a forum topic.
	ThreadID int
	// Voice, Photo: a file id added with AddFile.
	Voice, Photo string
	Document     *Document
	Sticker      bool
	// MediaGroup makes the message a part of an album: the photos sent
	// together, each its own message with the same media_group_id.
	MediaGroup string
}

// Document is a file attachment.
type Document struct {
	Name string
	MIME string
	Size int
}

// Add queues m as an update and returns its update_id.
func (s *Server) Add(m Message) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.ChatType == "" {
		m.ChatType = "private"
	}
	if m.ChatID == 0 {
		m.ChatID = m.From.ID
	}
	s.nextMsg++
	msg := map[string]any{
		"message_id": s.nextMsg, "date": time.Now().Unix(),
		"chat": map[string]any{"id": m.ChatID, "type": m.ChatType, "title": "group"},
		"from": m.From,
	}
	if m.ChatType == "private" {
		msg["chat"] = map[string]any{"id": m.ChatID, "type": "private", "first_name": m.From.FirstName}
	}
	if m.Text != "" {
		msg["text"] = m.Text
	}
	if len(m.Entities) > 0 {
		msg["entities"] = m.Entities
	}
	if m.ReplyToBot {
		msg["reply_to_message"] = map[string]any{"message_id": s.nextMsg - 1, "date": time.Now().Unix(),
			"chat": msg["chat"], "from": s.bot, "text": "an earlier answer"}
	}
	if m.MediaGroup != "" {
		msg["media_group_id"] = m.MediaGroup
	}
	if m.ThreadID != 0 {
		msg["message_thread_id"] = m.ThreadID
		msg["is_topic_message"] = true
	}
	if m.Voice != "" {
		f := s.files[m.Voice]
		msg["voice"] = map[string]any{"file_id": m.Voice, "file_unique_id": "u" + m.Voice, "duration": 2, "mime_type": "audio/ogg", "file_size": len(f.data)}
	}
	if m.Photo != "" {
		f := s.files[m.Photo]
		msg["photo"] = []map[string]any{
			{"file_id": m.Photo + "-small", "file_unique_id": "s" + m.Photo, "width": 90, "height": 90, "file_size": 100},
			{"file_id": m.Photo, "file_unique_id": "u" + m.Photo, "width": 800, "height": 600, "file_size": len(f.data)},
		}
		if m.Text != "" {
			// A photo's text is its caption, and its entities the
			// caption's.
			delete(msg, "text")
			msg["caption"] = m.Text
			if e, ok := msg["entities"]; ok {
				delete(msg, "entities")
				msg["caption_entities"] = e
			}
		}
	}
	if d := m.Document; d != nil {
		msg["document"] = map[string]any{"file_id": "doc", "file_unique_id": "udoc", "file_name": d.Name, "mime_type": d.MIME, "file_size": d.Size}
	}
	if m.Sticker {
		msg["sticker"] = map[string]any{"file_id": "st", "file_unique_id": "ust", "type": "regular", "width": 512, "height": 512, "is_animated": false, "is_video": false}
	}
	s.nextUpdate++
	u := map[string]any{"update_id": s.nextUpdate, "message": msg}
	s.updates = append(s.updates, u)
	s.delivered = append(s.delivered, u)
	s.notify()
	return s.nextUpdate
}

// AddRaw queues an update given as JSON (its update_id is assigned).
func (s *Server) AddRaw(update map[string]any) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextUpdate++
	update["update_id"] = s.nextUpdate
	s.updates = append(s.updates, update)
	s.delivered = append(s.delivered, update)
	s.notify()
	return s.nextUpdate
}

// Redeliver sends the update id once more with the next getUpdates,
// whatever offset that asks for: what a poller sees when its confirmation
// was lost (a crash before the offset was saved). It must have been queued
// before.
func (s *Server) Redeliver(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.delivered {
		if u["update_id"] == id {
			s.again = append(s.again, u)
			s.notify()
			return
		}
	}
	panic(fmt.Sprintf("telegramtest: update %d was never delivered", id))
}

// AddFile makes data downloadable as fileID.
func (s *Server) AddFile(fileID string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[fileID] = file{path: "files/" + fileID, data: data}
}

// Sent returns the messages the bot sent, in order.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// WaitSent waits until at least n messages were sent, or timeout.
func (s *Server) WaitSent(n int, timeout time.Duration) []Sent {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		got, ch := len(s.sent), s.changed
		s.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return s.Sent()
		}
		select {
		case <-ch:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Confirmed is the highest offset a getUpdates sent: updates below it are
// acknowledged.
func (s *Server) Confirmed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// Pending counts queued updates not yet confirmed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

// Actions counts sendChatAction calls.
func (s *Server) Actions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.actions
}

// Polls counts getUpdates calls; Pollers is how many are waiting now.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// Pollers is how many getUpdates requests are open now.
func (s *Server) Pollers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollers
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"); ok {
		s.download(w, rest)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, method, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		writeErr(w, 404, "Not Found", 0)
		return
	}
	if token != s.Token {
		writeErr(w, 401, "Unauthorized", 0)
		return
	}
	p, files, err := params(r)
	if err != nil {
		writeErr(w, 400, "Bad Request: "+err.Error(), 0)
		return
	}
	s.mu.Lock()
	if q := s.fail[method]; len(q) > 0 {
		f := q[0]
		s.fail[method] = q[1:]
		if !f.Pass {
			s.mu.Unlock()
			writeErrParams(w, f.Code, f.Description, f.RetryAfter, f.MigrateTo)
			return
		}
	}
	s.mu.Unlock()
	switch method {
	case "getMe":
		writeOK(w, s.Bot())
	case "getUpdates":
		s.getUpdates(w, r, p)
	case "sendMessage":
		s.sendMessage(w, p)
	case "sendChatAction":
		s.mu.Lock()
		s.actions++
		s.mu.Unlock()
		writeOK(w, true)
	case "getFile":
		s.mu.Lock()
		f, ok := s.files[p["file_id"]]
		s.mu.Unlock()
		if !ok {
			writeErr(w, 400, "Bad Request: invalid file_id", 0)
			return
		}
		writeOK(w, map[string]any{"file_id": p["file_id"], "file_unique_id": "u" + p["file_id"], "file_size": len(f.data), "file_path": f.path})
	case "sendPhoto", "sendDocument":
		field := "photo"
		if method == "sendDocument" {
			field = "document"
		}
		up, ok := files[field]
		if !ok && p[field] == "" {
			writeErr(w, 400, "Bad Request: there is no "+field+" in the request", 0)
			return
		}
		st := Sent{Method: method, ChatID: p["chat_id"], ThreadID: p["message_thread_id"], Text: p["caption"], FileName: up.name, FileSize: len(up.data), At: time.Now()}
		if !ok {
			st.FileName = p[field]
		}
		s.record(st)
		writeOK(w, s.message(p["chat_id"]))
	case "deleteWebhook":
		s.set(func() { s.webhook = "" })
		writeOK(w, true)
	case "getWebhookInfo":
		s.mu.Lock()
		u := s.webhook
		s.mu.Unlock()
		writeOK(w, map[string]any{"url": u, "pending_update_count": s.Pending()})
	default:
		writeErr(w, 404, "Not Found: method not found", 0)
	}
}

func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, p map[string]string) {
	offset, _ := strconv.ParseInt(p["offset"], 10, 64)
	timeout, _ := strconv.Atoi(p["timeout"])
	limit, _ := strconv.Atoi(p["limit"])
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	s.mu.Lock()
	s.polls++
	switch {
	case s.webhook != "":
		s.mu.Unlock()
		writeErr(w, 409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first", 0)
		return
	case s.conflict:
		s.mu.Unlock()
		writeErr(w, 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running", 0)
		return
	}
	if offset > 0 {
		// Telegram forgets every update below the offset.
		if offset > s.confirmed {
			s.confirmed = offset
		}
		kept := s.updates[:0]
		for _, u := range s.updates {
			if id, _ := u["update_id"].(int64); id >= offset {
				kept = append(kept, u)
			}
		}
		s.updates = kept
	}
	s.pollers++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.pollers--
		s.mu.Unlock()
	}()
	deadline := time.After(time.Duration(timeout) * time.Second)
	for {
		s.mu.Lock()
		wedged := s.wedged
		var out []map[string]any
		if !wedged {
			out = append(out, s.again...)
			s.again = nil
			for _, u := range s.updates {
				if len(out) < limit {
					out = append(out, u)
				}
			}
		}
		ch := s.changed
		s.mu.Unlock()
		if len(out) > 0 || (timeout == 0 && !wedged) {
			if out == nil {
				out = []map[string]any{}
			}
			writeOK(w, out)
			return
		}
		if wedged {
			deadline = nil // hang until the client gives up
		}
		select {
		case <-ch:
		case <-deadline:
			writeOK(w, []map[string]any{})
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) sendMessage(w http.ResponseWriter, p map[string]string) {
	text := p["text"]
	if strings.TrimSpace(text) == "" {
		writeErr(w, 400, "Bad Request: message text is empty", 0)
		return
	}
	mode := p["parse_mode"]
	shown := text
	if strings.EqualFold(mode, "HTML") {
		s.mu.Lock()
		reject := s.rejectHTML
		s.mu.Unlock()
		plain, err := CheckHTML(text)
		if reject && err == nil {
			err = fmt.Errorf("can't find end tag corresponding to start tag \"b\"")
		}
		if err != nil {
			writeErr(w, 400, "Bad Request: can't parse entities: "+err.Error(), 0)
			return
		}
		shown = plain
	}
	if n := len(utf16.Encode([]rune(shown))); n > Limit {
		writeErr(w, 400, "Bad Request: message is too long", 0)
		return
	}
	st := Sent{Method: "sendMessage", ChatID: p["chat_id"], ThreadID: p["message_thread_id"], Text: text, ParseMode: mode, At: time.Now()}
	if rp := p["reply_parameters"]; rp != "" {
		var v struct {
			MessageID int `json:"message_id"`
		}
		json.Unmarshal([]byte(rp), &v)
		st.ReplyTo = v.MessageID
	}
	s.record(st)
	writeOK(w, s.message(p["chat_id"]))
}

func (s *Server) record(st Sent) {
	s.mu.Lock()
	s.sent = append(s.sent, st)
	s.notify()
	s.mu.Unlock()
}

func (s *Server) message(chat string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextMsg++
	id, _ := strconv.ParseInt(chat, 10, 64)
	return map[string]any{"message_id": s.nextMsg, "date": time.Now().Unix(), "chat": map[string]any{"id": id, "type": "private"}, "from": s.bot}
}

func (s *Server) download(w http.ResponseWriter, rest string) {
	token, path, ok := strings.Cut(rest, "/")
	if !ok || token != s.Token {
		writeErr(w, 401, "Unauthorized", 0)
		return
	}
	s.mu.Lock()
	slow := s.slowFiles
	s.mu.Unlock()
	time.Sleep(slow)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		if f.path == path {
			w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
			w.Write(f.data)
			return
		}
	}
	http.NotFound(w, nil)
}

type upload struct {
	name string
	data []byte
}

// params reads a Bot API request's parameters: JSON, URL-encoded or
// multipart (uploads are multipart; JSON values of nested objects stay
// text).
func params(r *http.Request) (map[string]string, map[string]upload, error) {
	out := map[string]string{}
	files := map[string]upload{}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			return nil, nil, fmt.Errorf("bad JSON: %v", err)
		}
		for k, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				out[k] = s
			} else {
				out[k] = string(v)
			}
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			return nil, nil, err
		}
		for k, v := range r.MultipartForm.Value {
			out[k] = v[0]
		}
		for k, fh := range r.MultipartForm.File {
			f, err := fh[0].Open()
			if err != nil {
				return nil, nil, err
			}
			data, _ := io.ReadAll(f)
			f.Close()
			files[k] = upload{name: fh[0].Filename, data: data}
		}
	case "", "application/x-www-form-urlencoded":
		r.ParseForm()
		for k, v := range r.Form {
			out[k] = v[0]
		}
	default:
		return nil, nil, fmt.Errorf("unsupported Content-Type %q", ct)
	}
	return out, files, nil
}

func writeOK(w http.ResponseWriter, result any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
}

func writeErr(w http.ResponseWriter, code int, desc string, retryAfter int) {
	writeErrParams(w, code, desc, retryAfter, 0)
}

func writeErrParams(w http.ResponseWriter, code int, desc string, retryAfter int, migrateTo int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	body := map[string]any{"ok": false, "error_code": code, "description": desc}
	params := map[string]any{}
	if retryAfter > 0 {
		params["retry_after"] = retryAfter
	}
	if migrateTo != 0 {
		params["migrate_to_chat_id"] = migrateTo
	}
	if len(params) > 0 {
		body["parameters"] = params
	}
	json.NewEncoder(w).Encode(body)
}
