package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

// maxAnswer caps a Web API answer read into memory: the methods used
// answer a few KiB at most.
const maxAnswer = 1 << 20

// webAPI calls the few Slack Web API methods the channel needs. The tokens
// are config.Secrets so that formatting the client by mistake shows
// [redacted]; they travel only in the Authorization header, never in a
// URL, so no transport error can carry them.
type webAPI struct {
	http *http.Client
	base *url.URL
	bot  config.Secret
	app  config.Secret
}

// apiError is Slack's {"ok": false, "error": "..."} answer.
type apiError struct {
	Method string
	Code   string
}

func (e *apiError) Error() string { return "slack: " + e.Method + ": " + e.Code }

// statusError is an answer with an HTTP status other than 200. RetryAfter
// is set from a 429's Retry-After header.
type statusError struct {
	Method     string
	Status     int
	Text       string
	RetryAfter time.Duration
}

func (e *statusError) Error() string {
	return fmt.Sprintf("slack: %s: HTTP %d %s", e.Method, e.Status, e.Text)
}

// call posts args (a form, as every Web API method accepts) to method with
// token and decodes the answer into out, whose ok/error fields it checks.
func (a *webAPI) call(ctx context.Context, method string, token config.Secret, args url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base.String()+method, strings.NewReader(args.Encode()))
	if err != nil {
		return fmt.Errorf("slack: %s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token.Value())
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("slack: %s: %w", method, err)
	}
	defer resp.Body.Close()
	if err := statusOf(method, resp); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("slack: %s: reading the answer: %w", method, err)
	}
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("slack: %s: the answer is not JSON: %w", method, err)
	}
	if !res.OK {
		if res.Error == "" {
			res.Error = "unknown_error"
		}
		res.Error = string(channel.Scrub([]byte(res.Error), a.bot, a.app))
		return &apiError{Method: method, Code: res.Error}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("slack: %s: the answer is not understood: %w", method, err)
		}
	}
	return nil
}

// statusOf turns an answer's HTTP status other than 200 into a
// *statusError (and drains a little of its body so the connection can be
// reused).
func statusOf(method string, resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	e := &statusError{Method: method, Status: resp.StatusCode, Text: http.StatusText(resp.StatusCode)}
	if resp.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = time.Second // Slack always sends the header; this is the fallback
		if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
	}
	return e
}

// authTest checks the bot token and says who the bot is.
func (a *webAPI) authTest(ctx context.Context) (botIdentity, error) {
	var res struct {
		UserID string `json:"user_id"`
		User   string `json:"user"`
		TeamID string `json:"team_id"`
	}
	if err := a.call(ctx, "auth.test", a.bot, nil, &res); err != nil {
		return botIdentity{}, err
	}
	return botIdentity{UserID: res.UserID, Name: res.User, TeamID: res.TeamID}, nil
}

// connectionsOpen asks for a Socket Mode WebSocket URL with the app-level
// token. The URL carries a one-time ticket: it is never logged.
func (a *webAPI) connectionsOpen(ctx context.Context) (string, error) {
	var res struct {
		URL string `json:"url"`
	}
	if err := a.call(ctx, "apps.connections.open", a.app, nil, &res); err != nil {
		return "", err
	}
	if !strings.HasPrefix(res.URL, "wss://") && !strings.HasPrefix(res.URL, "ws://") {
		return "", errors.New("slack: apps.connections.open: the answer has no WebSocket URL")
	}
	return res.URL, nil
}

// postMessage posts text in chat (and thread); formatted false asks Slack
// to show it as typed (mrkdwn=false).
func (a *webAPI) postMessage(ctx context.Context, chat, thread, text string, formatted bool) error {
	args := url.Values{"channel": {chat}, "text": {text}}
	if !formatted {
		args.Set("mrkdwn", "false")
	}
	if thread != "" {
		args.Set("thread_ts", thread)
	}
	return a.call(ctx, "chat.postMessage", a.bot, args, nil)
}

// reaction adds (add) or removes the bot's reaction name on message ts.
func (a *webAPI) reaction(ctx context.Context, add bool, chat, ts, name string) error {
	method := "reactions.remove"
	if add {
		method = "reactions.add"
	}
	return a.call(ctx, method, a.bot, url.Values{"channel": {chat}, "timestamp": {ts}, "name": {name}}, nil)
}

// userInfo is the part of users.info the channel reads.
func (a *webAPI) userInfo(ctx context.Context, id string) (user, error) {
	var res struct {
		User struct {
			TeamID   string `json:"team_id"`
			Name     string `json:"name"`
			RealName string `json:"real_name"`
			Profile  struct {
				DisplayName string `json:"display_name"`
			} `json:"profile"`
		} `json:"user"`
	}
	if err := a.call(ctx, "users.info", a.bot, url.Values{"user": {id}}, &res); err != nil {
		return user{}, err
	}
	return user{TeamID: res.User.TeamID, Name: res.User.Name, RealName: res.User.RealName, DisplayName: res.User.Profile.DisplayName}, nil
}

// uploadFile shares data as a file named name in chat (and thread) with
// Slack's external upload: files.getUploadURLExternal, a POST of the
// content to the URL it names, files.completeUploadExternal.
func (a *webAPI) uploadFile(ctx context.Context, chat, thread, name string, data []byte) error {
	if len(data) == 0 {
		return errors.New("slack: files.upload: the file is empty")
	}
	var slot struct {
		UploadURL string `json:"upload_url"`
		FileID    string `json:"file_id"`
	}
	err := a.call(ctx, "files.getUploadURLExternal", a.bot, url.Values{"filename": {name}, "length": {strconv.Itoa(len(data))}}, &slot)
	if err != nil {
		return err
	}
	if err := a.putUpload(ctx, slot.UploadURL, name, data); err != nil {
		return err
	}
	files, err := json.Marshal([]struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}{{ID: slot.FileID, Title: name}})
	if err != nil {
		return err
	}
	args := url.Values{"files": {string(files)}, "channel_id": {chat}}
	if thread != "" {
		args.Set("thread_ts", thread)
	}
	return a.call(ctx, "files.completeUploadExternal", a.bot, args, nil)
}

// putUpload sends data as the multipart "file" field to the upload URL.
// The body is the part's header, data itself and the closing boundary, so
// the content is not copied. The bot token goes along only to Slack's own
// hosts or the configured API host.
func (a *webAPI) putUpload(ctx context.Context, raw, name string, data []byte) error {
	const method = "files upload"
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("slack: %s: Slack gave no usable upload URL", method)
	}
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if _, err := mw.CreateFormFile("file", name); err != nil {
		return err
	}
	n := head.Len()
	if err := mw.Close(); err != nil {
		return err
	}
	tail := bytes.Clone(head.Bytes()[n:])
	head.Truncate(n)
	body := io.MultiReader(&head, bytes.NewReader(data), bytes.NewReader(tail))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return fmt.Errorf("slack: %s: %w", method, err)
	}
	req.ContentLength = int64(n + len(data) + len(tail))
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if tokenMayGo(a.base, u) {
		req.Header.Set("Authorization", "Bearer "+a.bot.Value())
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("slack: %s: %w", method, err)
	}
	defer resp.Body.Close()
	if err := statusOf(method, resp); err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return nil
}
