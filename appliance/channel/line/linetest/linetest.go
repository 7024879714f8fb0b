// Package linetest is the LINE Messaging API on loopback for tests: bot
// info, reply (single-use tokens that expire), push (with X-Line-Retry-Key
// and 409 on a repeated key), the loading animation, message content — each
// validated and answered as LINE does, with its error bodies, or taken and
// then left unanswered (StallNext) — and a
// webhook client that delivers signed events (and redeliveries) to the
// channel under test.
package linetest

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

// Limits LINE enforces.
const (
	TextLimit     = 5000
	MaxPerRequest = 5
)

// BotID is the fake bot's user id.
const BotID = "U0000000000000000000000000000b07"

// Sent is a message the bot sent.
type Sent struct {
	API        string // reply or push
	To         string // push: the chat; reply: the chat of the token
	Type       string
	Text       string
	QuoteToken string
	ImageURL   string
	ID         string
	Batch      int // the request it came in (1-based)
	At         time.Time
}

// Failure is a scripted error answer.
type Failure struct {
	Status     int
	Body       string // JSON; empty: {"message": Message}
	Message    string
	RetryAfter int
}

// Server is the fake Messaging API (both api.line.me and api-data.line.me).
type Server struct {
	*httptest.Server
	Token  string
	Secret string
	// BotName is the bot's display name.
	BotName string

	mu       sync.Mutex
	tokens   map[string]token
	sent     []Sent
	batches  int
	loading  []Loading
	keys     map[string]bool
	fail     map[string][]Failure
	stall    map[string][]time.Duration
	content  map[string][]byte
	nextMsg  int
	pushes   int
	replyTTL time.Duration
	requests map[string]int
}

type token struct {
	chat    string
	expires time.Time
	used    bool
}

// Loading is a recorded loading-animation request.
type Loading struct {
	ChatID  string
	Seconds int
}

// New starts a fake for the channel access token and secret.
func New(accessToken, secret string) *Server { return NewAt(accessToken, secret, "127.0.0.1:0") }

// NewAt starts the fake on addr.
func NewAt(accessToken, secret, addr string) *Server {
	s := &Server{Token: accessToken, Secret: secret, BotName: "Perch", tokens: map[string]token{}, keys: map[string]bool{},
		fail: map[string][]Failure{}, stall: map[string][]time.Duration{}, content: map[string][]byte{}, nextMsg: 500000, replyTTL: time.Minute, requests: map[string]int{}}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic("linetest: listen " + addr + ": " + err.Error())
	}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.Server.Start()
	return s
}

// Base is the API base for channels.line.api_base and data_api_base.
func (s *Server) Base() string { return s.Server.URL }

// SetReplyTTL sets how long reply tokens stay valid on LINE's side.
func (s *Server) SetReplyTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replyTTL = d
}

// FailNext makes the next calls of api (reply, push, loading, info)
// answer with the failures, in order.
func (s *Server) FailNext(api string, f ...Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[api] = append(s.fail[api], f...)
}

// StallNext makes the next calls of api (reply, push) do their work, then
// hold the answer for each d in turn (or until the client gives up): the
// message is delivered, the sender cannot know it.
func (s *Server) StallNext(api string, d ...time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stall[api] = append(s.stall[api], d...)
}

// AddContent makes data the content of message id.
func (s *Server) AddContent(id string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.content[id] = data
}

// Sent returns the messages sent, in order.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// WaitSent waits for at least n messages.
func (s *Server) WaitSent(n int, timeout time.Duration) []Sent {
	deadline := time.Now().Add(timeout)
	for {
		if got := s.Sent(); len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Loadings returns the loading-animation requests.
func (s *Server) Loadings() []Loading {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Loading(nil), s.loading...)
}

// Requests counts the calls of api (reply, push, loading, info, content),
// failed ones included.
func (s *Server) Requests(api string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[api]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	api := ""
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v2/bot/info":
		api = "info"
	case r.Method == http.MethodPost && r.URL.Path == "/v2/bot/message/reply":
		api = "reply"
	case r.Method == http.MethodPost && r.URL.Path == "/v2/bot/message/push":
		api = "push"
	case r.Method == http.MethodPost && r.URL.Path == "/v2/bot/chat/loading/start":
		api = "loading"
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v2/bot/message/") && strings.HasSuffix(r.URL.Path, "/content"):
		api = "content"
	default:
		writeErr(w, 404, "Not found", nil)
		return
	}
	s.mu.Lock()
	s.requests[api]++
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		writeErr(w, 401, "Authentication failed. Confirm that the access token in the authorization header is valid.", nil)
		return
	}
	if key := r.Header.Get("X-Line-Retry-Key"); key != "" && api != "push" {
		writeErr(w, 400, "X-Line-Retry-Key is not supported by this API", nil)
		return
	}
	s.mu.Lock()
	if q := s.fail[api]; len(q) > 0 {
		f := q[0]
		s.fail[api] = q[1:]
		s.mu.Unlock()
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(f.RetryAfter))
		}
		if f.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(f.Status)
			io.WriteString(w, f.Body)
			return
		}
		writeErr(w, f.Status, f.Message, nil)
		return
	}
	s.mu.Unlock()
	switch api {
	case "info":
		writeJSON(w, 200, map[string]any{"userId": BotID, "basicId": "@123perch", "displayName": s.BotName, "chatMode": "bot", "markAsReadMode": "auto"})
	case "loading":
		var b struct {
			ChatID         string `json:"chatId"`
			LoadingSeconds int    `json:"loadingSeconds"`
		}
		json.NewDecoder(r.Body).Decode(&b)
		if b.LoadingSeconds%5 != 0 || b.LoadingSeconds < 5 || b.LoadingSeconds > 60 || !strings.HasPrefix(b.ChatID, "U") {
			writeErr(w, 400, "The request body has 1 error(s)", []map[string]string{{"message": "invalid", "property": "loadingSeconds"}})
			return
		}
		s.mu.Lock()
		s.loading = append(s.loading, Loading{b.ChatID, b.LoadingSeconds})
		s.mu.Unlock()
		writeJSON(w, 202, map[string]any{})
	case "content":
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v2/bot/message/"), "/content")
		s.mu.Lock()
		data, ok := s.content[id]
		s.mu.Unlock()
		if !ok {
			writeErr(w, 404, "Not found", nil)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(data)
	case "reply", "push":
		s.send(w, r, api)
	}
}

type msgObj struct {
	Type               string `json:"type"`
	Text               string `json:"text"`
	QuoteToken         string `json:"quoteToken"`
	OriginalContentURL string `json:"originalContentUrl"`
	PreviewImageURL    string `json:"previewImageUrl"`
}

func (s *Server) send(w http.ResponseWriter, r *http.Request, api string) {
	var b struct {
		ReplyToken string   `json:"replyToken"`
		To         string   `json:"to"`
		Messages   []msgObj `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		writeErr(w, 400, "The request body is not valid JSON", nil)
		return
	}
	if len(b.Messages) == 0 || len(b.Messages) > MaxPerRequest {
		writeErr(w, 400, "The request body has 1 error(s)", []map[string]string{{"message": "Size must be between 1 and 5", "property": "messages"}})
		return
	}
	var details []map[string]string
	for i, m := range b.Messages {
		switch m.Type {
		case "text":
			if n := len(utf16.Encode([]rune(m.Text))); n == 0 || n > TextLimit {
				details = append(details, map[string]string{"message": "Length must be between 0 and 5000", "property": fmt.Sprintf("messages[%d].text", i)})
			}
		case "image":
			if !strings.HasPrefix(m.OriginalContentURL, "https://") || !strings.HasPrefix(m.PreviewImageURL, "https://") {
				details = append(details, map[string]string{"message": "must be an https URL", "property": fmt.Sprintf("messages[%d].originalContentUrl", i)})
			}
		default:
			details = append(details, map[string]string{"message": "unsupported type", "property": fmt.Sprintf("messages[%d].type", i)})
		}
	}
	if len(details) > 0 {
		writeErr(w, 400, fmt.Sprintf("The request body has %d error(s)", len(details)), details)
		return
	}
	s.mu.Lock()
	locked := true
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	to := b.To
	if api == "reply" {
		t, ok := s.tokens[b.ReplyToken]
		if !ok || t.used || time.Now().After(t.expires) {
			writeErrLocked(w, 400, "Invalid reply token", nil)
			return
		}
		t.used = true
		s.tokens[b.ReplyToken] = t
		to = t.chat
	} else {
		if to == "" {
			writeErrLocked(w, 400, "The property, 'to', in the request body is invalid", nil)
			return
		}
		if key := r.Header.Get("X-Line-Retry-Key"); key != "" {
			if s.keys[key] {
				writeErrLocked(w, 409, "The retry key is already accepted", nil)
				return
			}
			s.keys[key] = true
		}
		s.pushes += len(b.Messages)
	}
	s.batches++
	var out []map[string]any
	for _, m := range b.Messages {
		s.nextMsg++
		id := fmt.Sprint(s.nextMsg)
		s.sent = append(s.sent, Sent{API: api, To: to, Type: m.Type, Text: m.Text, QuoteToken: m.QuoteToken, ImageURL: m.OriginalContentURL, ID: id, Batch: s.batches, At: time.Now()})
		out = append(out, map[string]any{"id": id, "quoteToken": "q" + id})
	}
	if q := s.stall[api]; len(q) > 0 {
		d := q[0]
		s.stall[api] = q[1:]
		s.mu.Unlock()
		locked = false
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	json.NewEncoder(w).Encode(map[string]any{"sentMessages": out})
}

// Pushes counts the messages pushed.
func (s *Server) Pushes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushes
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, msg string, details []map[string]string) {
	body := map[string]any{"message": msg}
	if len(details) > 0 {
		body["details"] = details
	}
	writeJSON(w, status, body)
}

// writeErrLocked is writeErr for callers holding s.mu (it takes no lock).
func writeErrLocked(w http.ResponseWriter, status int, msg string, details []map[string]string) {
	writeErr(w, status, msg, details)
}

// Event builds webhook events.
type Event struct {
	// UserID sends it; GroupID puts it in a group.
	UserID, GroupID string
	Text            string
	// Type is the message type (text by default; image, audio, file, sticker).
	Type string
	// MessageID is set by NewEvent unless given (for content).
	MessageID string
	// SelfMention marks a mention of the bot at MentionIndex/MentionLength.
	SelfMention                 bool
	MentionIndex, MentionLength int
	// QuotedMessageID makes the message reply to (quote) that message.
	QuotedMessageID string
	FileName        string
	FileSize        int
}

// Delivery is one event as sent, with what a test needs to check the
// answer: its ids and reply token.
type Delivery struct {
	EventID    string
	MessageID  string
	ReplyToken string
	QuoteToken string
	JSON       map[string]any
}

// NewEvent builds a message event with a fresh webhookEventId, message id
// and reply token (valid for the fake's reply TTL).
func (s *Server) NewEvent(e Event) Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextMsg++
	d := Delivery{EventID: ulid(), MessageID: e.MessageID, ReplyToken: hex16(), QuoteToken: "qt" + hex16()}
	if d.MessageID == "" {
		d.MessageID = fmt.Sprint(s.nextMsg)
	}
	source := map[string]any{"type": "user", "userId": e.UserID}
	chat := e.UserID
	if e.GroupID != "" {
		source = map[string]any{"type": "group", "groupId": e.GroupID, "userId": e.UserID}
		chat = e.GroupID
	}
	s.tokens[d.ReplyToken] = token{chat: chat, expires: time.Now().Add(s.replyTTL)}
	typ := e.Type
	if typ == "" {
		typ = "text"
	}
	msg := map[string]any{"id": d.MessageID, "type": typ}
	switch typ {
	case "text":
		msg["text"] = e.Text
		msg["quoteToken"] = d.QuoteToken
		if e.SelfMention {
			msg["mention"] = map[string]any{"mentionees": []map[string]any{{"index": e.MentionIndex, "length": e.MentionLength, "type": "user", "userId": BotID, "isSelf": true}}}
		}
	case "image", "video", "audio":
		msg["contentProvider"] = map[string]any{"type": "line"}
		if typ != "image" {
			msg["duration"] = 2000
		}
		msg["quoteToken"] = d.QuoteToken
	case "file":
		msg["fileName"], msg["fileSize"] = e.FileName, e.FileSize
	case "sticker":
		msg["packageId"], msg["stickerId"], msg["stickerResourceType"] = "446", "1988", "STATIC"
	}
	if e.QuotedMessageID != "" {
		msg["quotedMessageId"] = e.QuotedMessageID
	}
	d.JSON = map[string]any{
		"type": "message", "mode": "active", "timestamp": time.Now().UnixMilli(),
		"webhookEventId": d.EventID, "deliveryContext": map[string]any{"isRedelivery": false},
		"replyToken": d.ReplyToken, "source": source, "message": msg,
	}
	return d
}

// Redelivery is d as LINE redelivers it: same webhookEventId, marked as a
// redelivery, with a reply token of its own.
func (s *Server) Redelivery(d Delivery) Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := d
	r.JSON = map[string]any{}
	for k, v := range d.JSON {
		r.JSON[k] = v
	}
	r.JSON["deliveryContext"] = map[string]any{"isRedelivery": true}
	r.ReplyToken = hex16()
	r.JSON["replyToken"] = r.ReplyToken
	s.tokens[r.ReplyToken] = token{chat: "", expires: time.Now().Add(s.replyTTL)}
	return r
}

// Body is the webhook request body carrying ds.
func Body(ds ...Delivery) []byte {
	events := make([]map[string]any, 0, len(ds))
	for _, d := range ds {
		events = append(events, d.JSON)
	}
	b, _ := json.Marshal(map[string]any{"destination": BotID, "events": events})
	return b
}

// Deliver posts ds to the webhook url signed with the channel secret and
// returns the status code.
func (s *Server) Deliver(url string, ds ...Delivery) (int, error) {
	body := Body(ds...)
	return Post(url, body, Signature(s.Secret, body))
}

// Signature is X-Line-Signature for body.
func Signature(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Post sends body with signature sig ("" for none) to url, on a fresh
// connection each time (LINE's deliveries come from many hosts).
func Post(url string, body []byte, sig string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "LineBotWebhook/2.0")
	if sig != "" {
		req.Header.Set("X-Line-Signature", sig)
	}
	req.Close = true
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func hex16() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ulid is an id shaped like LINE's webhookEventId (26 characters).
func ulid() string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [26]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}
