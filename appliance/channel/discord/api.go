package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

// This file is the REST client: the four calls the channel makes
// (GET /gateway/bot, POST /channels/{id}/messages, POST
// /channels/{id}/typing, GET /guilds/{id}/roles) as plain HTTPS requests. It replaces discordgo,
// whose package init (image decoders, NaCl, zlib, compiled regexps) every
// start and every sandboxed re-execution of the binary paid for.

// maxAnswer caps an answer read into memory: the calls made answer a few
// KiB (a created message, the gateway's URL), and error answers less.
const maxAnswer = 1 << 20

// Rate-limit bounds. A 429's wait up to rateWaitMax is sat out here and
// the call made again, at most rateRetries times; a longer one comes back
// as a *rateLimitError for the caller to decide (the sender keeps the
// reply for later, the gateway backs off). It is the sender's own bound:
// a wait here holds the replies to every other chat.
const (
	rateRetries = 3
	rateWaitMax = channel.DefaultMaxWait
	// rateFallback is the wait of a 429 that says nothing of how long.
	rateFallback = time.Second
)

// restClient calls Discord's REST API with the bot token. The token is a
// config.Secret, so formatting the client by mistake shows [redacted]; it
// travels only in the Authorization header, never in a URL, so no
// transport error can carry it.
type restClient struct {
	http      *http.Client
	base      string // without a trailing slash
	token     config.Secret
	userAgent string
	limits    rateLimits
	// waitMax and retries are rateWaitMax and rateRetries; tests shorten
	// them.
	waitMax time.Duration
	retries int
}

func newREST(client *http.Client, base, token, version string) *restClient {
	if version == "" {
		version = "dev"
	}
	return &restClient{
		http: client, base: strings.TrimSuffix(base, "/"), token: config.Secret(token),
		// Discord asks bots for "DiscordBot ($url, $version)".
		userAgent: "DiscordBot (https://github.com/perchhq/perch, " + version + ")",
		waitMax:   rateWaitMax, retries: rateRetries,
	}
}

// apiError is an answer with an HTTP status other than 2xx and 429: the
// status and, when Discord sent its JSON error, its code and message.
type apiError struct {
	Route   string // "POST /channels/123/messages"
	Status  int
	Code    int    // Discord's JSON error code, 0 if none
	Message string // Discord's message, or the start of a body that is not Discord's
	// Detail lists the field errors of an Invalid Form Body
	// ("content: BASE_TYPE_MAX_LENGTH").
	Detail []string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("discord: %s: HTTP %d %s", e.Route, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Code != 0 {
		s += fmt.Sprintf(" (code %d)", e.Code)
	}
	if len(e.Detail) > 0 {
		s += ": " + strings.Join(e.Detail, "; ")
	}
	return s
}

// hasDetail reports whether one of the field errors has code.
func (e *apiError) hasDetail(code string) bool {
	for _, d := range e.Detail {
		if strings.HasSuffix(d, ": "+code) {
			return true
		}
	}
	return false
}

// rateLimitError is a 429 (or a known exhausted limit) whose wait is
// longer than the client sits out, or that came back once too often.
type rateLimitError struct {
	Route      string
	RetryAfter time.Duration
	// Global means the bot's limit across all routes, not this route's.
	Global bool
	// Scope is X-RateLimit-Scope: user, global or shared (a limit on the
	// resource, shared with other bots).
	Scope string
}

func (e *rateLimitError) Error() string {
	what := "rate limited"
	switch {
	case e.Global:
		what = "rate limited (global)"
	case e.Scope != "":
		what = "rate limited (" + e.Scope + ")"
	}
	return fmt.Sprintf("discord: %s: %s; retry after %s", e.Route, what, e.RetryAfter)
}

// uploadBody is Discord's multipart message: payload_json (the message's
// JSON, whose attachments name the file) and files[0], whose bytes are not
// copied.
func uploadBody(payload any, name, ctype string, data []byte) (*channel.Body, error) {
	js, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="payload_json"`)
	h.Set("Content-Type", "application/json")
	pw, err := w.CreatePart(h)
	if err != nil {
		return nil, err
	}
	pw.Write(js)
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="files[0]"; filename="%s"`, escapeQuotes(name)))
	h.Set("Content-Type", ctype)
	if _, err := w.CreatePart(h); err != nil {
		return nil, err
	}
	return channel.MultipartBody(&buf, w, data)
}

// escapeQuotes escapes a filename as mime/multipart does (a Replacer
// would be built at init, on every start).
func escapeQuotes(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`)
}

// call makes method path with b (nil: no body) and decodes a 2xx answer
// into out (nil: the answer is drained). It waits out what the rate
// limits ask, within waitMax, and repeats a call answered 429 at most
// retries times.
func (c *restClient) call(ctx context.Context, method, path string, b *channel.Body, out any) error {
	route := method + " " + path
	for try := 0; ; try++ {
		if err := c.limits.wait(ctx, route, c.waitMax); err != nil {
			return err
		}
		rl, err := c.once(ctx, method, path, b, out)
		if rl == nil {
			return err
		}
		c.limits.hit(route, rl)
		if try >= c.retries || rl.RetryAfter > c.waitMax {
			return rl
		}
	}
}

// once makes the call once; a 429 comes back as rl.
func (c *restClient) once(ctx context.Context, method, path string, b *channel.Body, out any) (rl *rateLimitError, err error) {
	route := method + " " + path
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("discord: %s: %w", route, err)
	}
	if b != nil {
		b.Attach(req)
	}
	req.Header.Set("Authorization", "Bot "+c.token.Value())
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("discord: %s: %w", route, err)
	}
	defer resp.Body.Close()
	c.limits.update(route, resp.Header)
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("discord: %s: reading the answer: %w", route, err)
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("discord: %s: HTTP %d with an answer over %d bytes; not read", route, resp.StatusCode, maxAnswer)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data = channel.Scrub(data, c.token)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return tooMany(route, resp.Header, data), nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, answerError(route, resp.StatusCode, data)
	case out != nil:
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("discord: %s: the answer is not what Discord sends: %w", route, err)
		}
	}
	return nil, nil
}

// tooMany reads a 429: retry_after (seconds, fractional) and global from
// the JSON body, else the Retry-After header.
func tooMany(route string, h http.Header, data []byte) *rateLimitError {
	var r struct {
		RetryAfter *float64 `json:"retry_after"`
		Global     bool     `json:"global"`
	}
	json.Unmarshal(data, &r) // a 429 from a proxy has no JSON: the headers decide
	e := &rateLimitError{Route: route, Scope: h.Get("X-RateLimit-Scope"), RetryAfter: rateFallback}
	e.Global = r.Global || strings.EqualFold(h.Get("X-RateLimit-Global"), "true") || e.Scope == "global"
	switch {
	case r.RetryAfter != nil && *r.RetryAfter >= 0:
		e.RetryAfter = seconds(*r.RetryAfter)
	default:
		if s, err := strconv.ParseFloat(strings.TrimSpace(h.Get("Retry-After")), 64); err == nil && s >= 0 {
			e.RetryAfter = seconds(s)
		}
	}
	return e
}

// seconds converts Discord's fractional seconds, capped at a day so a
// nonsense value cannot overflow.
func seconds(s float64) time.Duration {
	return time.Duration(min(s, 86400) * float64(time.Second))
}

// answerError reads an error answer: Discord's {"code", "message",
// "errors"} when it is one, else the start of the body (a proxy's page).
func answerError(route string, status int, data []byte) *apiError {
	e := &apiError{Route: route, Status: status}
	var r struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Errors  json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		if t := strings.TrimSpace(string(data)); t != "" {
			e.Message = fmt.Sprintf("%.120q", t)
		}
		return e
	}
	e.Code, e.Message = r.Code, r.Message
	if len(r.Errors) > 0 {
		var tree any
		if json.Unmarshal(r.Errors, &tree) == nil {
			fieldErrors("", tree, &e.Detail)
		}
	}
	return e
}

// fieldErrors flattens Invalid Form Body's error tree
// ({"content": {"_errors": [{"code", "message"}]}}) into "content: CODE".
func fieldErrors(path string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || len(*out) >= 8 {
		return
	}
	if list, ok := m["_errors"].([]any); ok {
		for _, it := range list {
			if e, ok := it.(map[string]any); ok {
				if code, _ := e["code"].(string); code != "" {
					*out = append(*out, strings.TrimPrefix(path, ".")+": "+code)
				}
			}
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "_errors" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fieldErrors(path+"."+k, m[k], out)
	}
}

// rateLimits remembers, per route, until when Discord said not to call it
// (a bucket with none remaining, a 429), and the bot's global limit. A
// route is the method and path: the channel id in it is what Discord's
// buckets are keyed by.
type rateLimits struct {
	mu     sync.Mutex
	global time.Time
	routes map[string]time.Time
}

// maxRoutes bounds the remembered routes; past it, expired ones go.
const maxRoutes = 256

// wait blocks until route may be called, within limit: a longer wait is
// returned as a *rateLimitError at once, without waiting.
func (l *rateLimits) wait(ctx context.Context, route string, limit time.Duration) error {
	l.mu.Lock()
	until, global := l.routes[route], false
	if l.global.After(until) {
		until, global = l.global, true
	}
	l.mu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	if d > limit {
		return &rateLimitError{Route: route, RetryAfter: d, Global: global}
	}
	if !channel.Sleep(ctx, d) {
		return fmt.Errorf("discord: %s: waiting for the rate limit: %w", route, context.Cause(ctx))
	}
	return nil
}

// update reads an answer's X-RateLimit-Remaining and -Reset-After: a
// bucket with none left is not called again before it resets.
func (l *rateLimits) update(route string, h http.Header) {
	if strings.TrimSpace(h.Get("X-RateLimit-Remaining")) != "0" {
		return
	}
	s, err := strconv.ParseFloat(strings.TrimSpace(h.Get("X-RateLimit-Reset-After")), 64)
	if err != nil || s <= 0 {
		return
	}
	l.set(route, time.Now().Add(seconds(s)), false)
}

// hit records a 429.
func (l *rateLimits) hit(route string, e *rateLimitError) {
	l.set(route, time.Now().Add(e.RetryAfter), e.Global)
}

func (l *rateLimits) set(route string, until time.Time, global bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if global {
		if until.After(l.global) {
			l.global = until
		}
		return
	}
	if l.routes == nil {
		l.routes = map[string]time.Time{}
	}
	if len(l.routes) >= maxRoutes {
		now := time.Now()
		for r, t := range l.routes {
			if !t.After(now) {
				delete(l.routes, r)
			}
		}
	}
	if _, ok := l.routes[route]; ok || len(l.routes) < maxRoutes {
		if until.After(l.routes[route]) {
			l.routes[route] = until
		}
	}
}

// gatewayBot is GET /gateway/bot: where to connect.
func (c *restClient) gatewayBot(ctx context.Context) (string, error) {
	var res struct {
		URL string `json:"url"`
	}
	if err := c.call(ctx, http.MethodGet, "/gateway/bot", nil, &res); err != nil {
		return "", err
	}
	return res.URL, nil
}

// messageSend is the JSON of a created message.
type messageSend struct {
	Content         string            `json:"content,omitempty"`
	AllowedMentions *allowedMentions  `json:"allowed_mentions,omitempty"`
	Reference       *messageReference `json:"message_reference,omitempty"`
	Attachments     []attachmentSlot  `json:"attachments,omitempty"`
}

// allowedMentions says whom a message may ping.
type allowedMentions struct {
	Parse       []string `json:"parse"`
	RepliedUser bool     `json:"replied_user"`
}

// messageReference makes a message a reply.
type messageReference struct {
	MessageID       string `json:"message_id"`
	ChannelID       string `json:"channel_id,omitempty"`
	FailIfNotExists *bool  `json:"fail_if_not_exists,omitempty"`
}

// attachmentSlot names an uploaded file (files[ID]) in payload_json.
type attachmentSlot struct {
	ID       int    `json:"id"`
	Filename string `json:"filename"`
}

// upload is a file to attach.
type upload struct {
	Name, MIME string
	Data       []byte
}

// createMessage posts m in channel chat, with file attached when not nil.
// The created message is not read: the channel needs nothing of it.
func (c *restClient) createMessage(ctx context.Context, chat string, m messageSend, file *upload) error {
	var (
		b   *channel.Body
		err error
	)
	if file != nil {
		m.Attachments = []attachmentSlot{{ID: 0, Filename: file.Name}}
		b, err = uploadBody(m, file.Name, file.MIME, file.Data)
	} else {
		b, err = channel.JSONBody(m)
	}
	if err != nil {
		return fmt.Errorf("discord: POST /channels/%s/messages: %w", chat, err)
	}
	return c.call(ctx, http.MethodPost, "/channels/"+pathSegment(chat)+"/messages", b, nil)
}

// role is the part of a guild role the channel reads: a bot's own role,
// made when it joined the server, is managed and tagged with its id.
type role struct {
	ID      string `json:"id"`
	Managed bool   `json:"managed"`
	Tags    *struct {
		BotID string `json:"bot_id"`
	} `json:"tags"`
}

// guildRoles is GET /guilds/{id}/roles.
func (c *restClient) guildRoles(ctx context.Context, guild string) ([]role, error) {
	var roles []role
	if err := c.call(ctx, http.MethodGet, "/guilds/"+pathSegment(guild)+"/roles", nil, &roles); err != nil {
		return nil, err
	}
	return roles, nil
}

// triggerTyping shows the bot typing in chat.
func (c *restClient) triggerTyping(ctx context.Context, chat string) error {
	return c.call(ctx, http.MethodPost, "/channels/"+pathSegment(chat)+"/typing", nil, nil)
}

// pathSegment keeps a chat id from reaching another route (Discord's ids
// are digits; anything else is escaped).
func pathSegment(s string) string { return url.PathEscape(s) }

// tokenRejected reports whether err is Discord refusing the token.
func tokenRejected(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusUnauthorized
}
