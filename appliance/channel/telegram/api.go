package telegram

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

	"github.com/perchhq/perch/appliance/channel"
)

// This file is the Bot API client: the eight methods the channel calls, as
// plain HTTPS requests. Only the fields the channel reads are decoded.

// apiError is a Bot API error answer ({"ok":false,...}).
type apiError struct {
	Method      string
	Code        int
	Description string
	// RetryAfter is parameters.retry_after of a 429, in seconds.
	RetryAfter int
	// MigrateTo is parameters.migrate_to_chat_id: the group became a
	// supergroup with this id.
	MigrateTo int64
}

func (e *apiError) Error() string {
	return fmt.Sprintf("telegram: %s: %d %s", e.Method, e.Code, e.Description)
}

// tokenRejected reports whether err is Telegram refusing the token: the
// Bot API answers an unknown token with 401 and a malformed one with 404.
func tokenRejected(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (ae.Code == http.StatusUnauthorized || ae.Code == http.StatusNotFound)
}

// netError is a call that got no answer (unreachable, timed out, cut).
// net/http's *url.Error quotes the request URL, and the token is in that
// URL's path: the text here is built without it, and the chain skips the
// *url.Error so no caller can print it by unwrapping.
type netError struct {
	text string
	err  error
}

func (e *netError) Error() string { return e.text }
func (e *netError) Unwrap() error { return e.err }

// netErr wraps a transport error of method without the token.
func (c *Channel) netErr(method string, err error) error {
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	text := c.scrub(inner.Error())
	ne := &netError{text: fmt.Sprintf("telegram: %s at %s: %s", method, c.base, text), err: inner}
	if t := c.token.Value(); t != "" && strings.Contains(inner.Error(), t) {
		ne.err = nil // never hand out an error whose own text shows the token
	}
	return ne
}

// scrub removes the token from s.
func (c *Channel) scrub(s string) string {
	if t := c.token.Value(); t != "" {
		s = strings.ReplaceAll(s, t, "<token>")
	}
	return s
}

// checkToken refuses a token that cannot be a path segment of the method
// URLs (BotFather's are digits, a colon and URL-safe letters), so a
// pasted line break or slash is reported as such rather than as a
// confusing 404.
func checkToken(t string) error {
	if strings.TrimSpace(t) == "" {
		return errors.New("telegram: the bot token is empty; set channels.telegram.token (BotFather's /token shows it)")
	}
	for _, r := range t {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`/?#%\"<>`, r) {
			return errors.New("telegram: the bot token holds a space, slash or other character Telegram tokens never have; check channels.telegram.token (BotFather's /token shows it)")
		}
	}
	return nil
}

// maxAnswer caps a Bot API answer read into memory (a getUpdates answer
// has its own, larger cap).
const maxAnswer = 1 << 20

// uploadBody is a multipart/form-data body of fields and one file, whose
// bytes are not copied.
func uploadBody(fields [][2]string, field, name string, data []byte) (*channel.Body, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := w.WriteField(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	if _, err := w.CreateFormFile(field, name); err != nil {
		return nil, err
	}
	return channel.MultipartBody(&buf, w, data)
}

// call posts b (nil: no parameters) to method and decodes the result into
// out (nil: ignored), reading at most limit bytes of answer.
func (c *Channel) call(ctx context.Context, method string, b *channel.Body, limit int64, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/bot"+c.token.Value()+"/"+method, nil)
	if err != nil {
		return c.netErr(method, err)
	}
	if b != nil {
		b.Attach(req)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return c.netErr(method, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return c.netErr(method, fmt.Errorf("reading the answer: %w", err))
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("telegram: %s: HTTP %d with an answer over %d bytes; not read", method, resp.StatusCode, limit)
	}
	var r struct {
		OK          bool            `json:"ok"`
		Result      json.RawMessage `json:"result"`
		Description string          `json:"description"`
		ErrorCode   int             `json:"error_code"`
		Parameters  struct {
			RetryAfter      int   `json:"retry_after"`
			MigrateToChatID int64 `json:"migrate_to_chat_id"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		// A proxy's or captive portal's page, most likely.
		return fmt.Errorf("telegram: %s: HTTP %d with a body that is not the Bot API's: %.120q", method, resp.StatusCode, c.scrub(string(data)))
	}
	if !r.OK {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		return &apiError{Method: method, Code: code, Description: c.scrub(r.Description),
			RetryAfter: r.Parameters.RetryAfter, MigrateTo: r.Parameters.MigrateToChatID}
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			return fmt.Errorf("telegram: %s: the result is not what the Bot API sends: %w", method, err)
		}
	}
	return nil
}

// callJSON calls method with params as JSON.
func (c *Channel) callJSON(ctx context.Context, method string, params, out any) error {
	b, err := channel.JSONBody(params)
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, err)
	}
	return c.call(ctx, method, b, maxAnswer, out)
}

// user is a Bot API User.
type user struct {
	ID                      int64  `json:"id"`
	IsBot                   bool   `json:"is_bot"`
	FirstName               string `json:"first_name"`
	LastName                string `json:"last_name"`
	Username                string `json:"username"`
	CanReadAllGroupMessages bool   `json:"can_read_all_group_messages"`
}

// update is a Bot API Update; only messages are asked for.
type update struct {
	ID      int64    `json:"update_id"`
	Message *message `json:"message"`
}

// message is the part of a Bot API Message the channel reads.
type message struct {
	ID              int      `json:"message_id"`
	MessageThreadID int      `json:"message_thread_id"`
	IsTopicMessage  bool     `json:"is_topic_message"`
	From            *user    `json:"from"`
	Chat            chatInfo `json:"chat"`
	Text            string   `json:"text"`
	Entities        []entity `json:"entities"`
	Caption         string   `json:"caption"`
	CaptionEntities []entity `json:"caption_entities"`
	ReplyToMessage  *struct {
		From *user `json:"from"`
	} `json:"reply_to_message"`
	Photo     []fileInfo `json:"photo"`
	Voice     *fileInfo  `json:"voice"`
	Audio     *fileInfo  `json:"audio"`
	Video     *fileInfo  `json:"video"`
	VideoNote *fileInfo  `json:"video_note"`
	Animation *fileInfo  `json:"animation"`
	Document  *fileInfo  `json:"document"`
	Sticker   *struct{}  `json:"sticker"`
	// MediaGroupID joins the messages of an album (photos sent together).
	MediaGroupID string `json:"media_group_id"`
}

type chatInfo struct {
	ID   int64  `json:"id"`
	Type string `json:"type"` // private, group, supergroup, channel
}

// entity is a MessageEntity: a mention, text_mention or bot_command span
// in UTF-16 code units.
type entity struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	User   *user  `json:"user"`
}

// fileInfo is what photos, voice notes, audio, video, animations and
// documents share.
type fileInfo struct {
	FileID   string `json:"file_id"`
	FileName string `json:"file_name"`
	MimeType string `json:"mime_type"`
	FileSize int64  `json:"file_size"`
}

// apiGetMe is getMe.
func (c *Channel) apiGetMe(ctx context.Context) (*user, error) {
	var me user
	if err := c.call(ctx, "getMe", nil, maxAnswer, &me); err != nil {
		return nil, err
	}
	return &me, nil
}

// maxUpdateBytes caps a getUpdates answer (100 updates of text are far
// below it; files are downloaded separately).
const maxUpdateBytes = 8 << 20

// replyParams quotes a message; a quoted message deleted meanwhile does not
// stop the answer.
type replyParams struct {
	MessageID                int  `json:"message_id"`
	AllowSendingWithoutReply bool `json:"allow_sending_without_reply"`
}

// sendMessageParams is sendMessage's parameters.
type sendMessageParams struct {
	ChatID          int64        `json:"chat_id"`
	MessageThreadID int          `json:"message_thread_id,omitempty"`
	Text            string       `json:"text"`
	ParseMode       string       `json:"parse_mode,omitempty"`
	ReplyParameters *replyParams `json:"reply_parameters,omitempty"`
	// Links in answers are not unfolded into previews: an answer is read
	// on a phone, and a preview can be larger than the answer.
	LinkPreviewOptions struct {
		IsDisabled bool `json:"is_disabled"`
	} `json:"link_preview_options"`
}

// apiSendChatAction shows action (typing) in a chat.
func (c *Channel) apiSendChatAction(ctx context.Context, chat int64, thread int, action string) error {
	return c.callJSON(ctx, "sendChatAction", struct {
		ChatID          int64  `json:"chat_id"`
		MessageThreadID int    `json:"message_thread_id,omitempty"`
		Action          string `json:"action"`
	}{chat, thread, action}, nil)
}

// apiDeleteWebhook removes a webhook, keeping the updates that wait.
func (c *Channel) apiDeleteWebhook(ctx context.Context) error {
	return c.call(ctx, "deleteWebhook", nil, maxAnswer, nil)
}

// file is getFile's answer.
type file struct {
	FileSize int64  `json:"file_size"`
	FilePath string `json:"file_path"`
}

// apiGetFile learns where a file can be downloaded.
func (c *Channel) apiGetFile(ctx context.Context, fileID string) (*file, error) {
	var f file
	if err := c.callJSON(ctx, "getFile", map[string]string{"file_id": fileID}, &f); err != nil {
		return nil, err
	}
	if f.FilePath == "" {
		return nil, errors.New("telegram: getFile: no file_path in the answer (the file is no longer available)")
	}
	return &f, nil
}

// fileURL is where getFile's file is downloaded from; it holds the token.
func (c *Channel) fileURL(f *file) string {
	return c.base + "/file/bot" + c.token.Value() + "/" + f.FilePath
}

// apiSendFile sends a photo or document (method sendPhoto or
// sendDocument, field photo or document): data uploaded as name, or, when
// data is nil, ref (an http(s) URL Telegram fetches itself, or a file_id).
func (c *Channel) apiSendFile(ctx context.Context, method, field string, chat int64, thread int, caption, ref, name string, data []byte) error {
	if data == nil {
		params := map[string]any{"chat_id": chat, field: ref}
		if thread != 0 {
			params["message_thread_id"] = thread
		}
		if caption != "" {
			params["caption"] = caption
		}
		return c.callJSON(ctx, method, params, nil)
	}
	fields := [][2]string{{"chat_id", strconv.FormatInt(chat, 10)}}
	if thread != 0 {
		fields = append(fields, [2]string{"message_thread_id", strconv.Itoa(thread)})
	}
	if caption != "" {
		fields = append(fields, [2]string{"caption", caption})
	}
	b, err := uploadBody(fields, field, name, data)
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, err)
	}
	return c.call(ctx, method, b, maxAnswer, nil)
}
