package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/sashabaranov/go-openai"

	"github.com/perchhq/perch/appliance/chat"
)

// The chat call is encoded here rather than by go-openai's client, for three
// reasons: go-openai marshals every message through a reflective
// MarshalJSON, which was a quarter of the gateway's CPU per turn with a
// 200-message history, and needs the history copied into its message type
// first; it cannot send the aggregator's route/models fields; and its
// omitempty drops a temperature of exactly 0. Errors still decode into
// go-openai's types, and responses into the part of its response type a turn
// reads (chatResponse), so the wire format stays theirs.

// chatBody holds what one request needs besides the messages.
type chatBody struct {
	model               string
	maxTokens           int
	maxCompletionTokens int
	temperature         *float64
	toolsJSON           []byte // a JSON array, or nil
	route               string
	models              []string
}

// Buffers for request bodies and responses: a turn sends tens of KiB and
// reads its answer whole. Buffers over maxPooled are dropped, so one huge
// call does not pin its memory.
var (
	bodyPool = sync.Pool{New: func() any { return new([]byte) }}
	bufPool  = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

const maxPooled = 1 << 20

// encodeChat appends the request body to out.
func encodeChat(out []byte, b chatBody, r Request) []byte {
	return encodeChatWith(out, b, r, nil)
}

// encodeChatWith is encodeChat taking the history's encoding from wc where
// an earlier call of the same conversation left it (wc may be nil).
func encodeChatWith(out []byte, b chatBody, r Request, wc *wireCache) []byte {
	out = append(out, `{"model":`...)
	out = appendString(out, b.model)
	out = append(out, `,"messages":[`...)
	// Every message is followed by a comma, the last one's replaced by
	// the closing bracket: the history's encoding is then the same bytes
	// wherever it lands, and can be kept and copied whole.
	if r.SystemHead != "" || r.System != "" {
		// Escaping is per character, so the two parts escaped one after
		// the other are the whole prompt escaped.
		out = append(out, `{"role":"system","content":"`...)
		out = wc.appendHead(out, r.SystemHead)
		out = appendEscaped(out, r.System)
		out = append(out, '"', '}', ',')
	}
	out = wc.appendHistory(out, r.HistoryKey, r.History)
	for i := range r.Messages {
		out = appendMessage(out, &r.Messages[i])
		out = append(out, ',')
	}
	if out[len(out)-1] == ',' {
		out = out[:len(out)-1]
	}
	out = append(out, ']')
	if b.maxCompletionTokens > 0 {
		out = append(out, `,"max_completion_tokens":`...)
		out = strconv.AppendInt(out, int64(b.maxCompletionTokens), 10)
	} else if b.maxTokens > 0 {
		out = append(out, `,"max_tokens":`...)
		out = strconv.AppendInt(out, int64(b.maxTokens), 10)
	}
	if b.temperature != nil {
		out = append(out, `,"temperature":`...)
		out = strconv.AppendFloat(out, *b.temperature, 'g', -1, 64)
	}
	if len(b.toolsJSON) > 0 {
		out = append(out, `,"tools":`...)
		out = append(out, b.toolsJSON...)
		out = append(out, `,"tool_choice":"auto"`...)
	}
	if b.route != "" {
		out = append(out, `,"route":`...)
		out = appendString(out, b.route)
		out = append(out, `,"models":[`...)
		for i, m := range b.models {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, m)
		}
		out = append(out, ']')
	}
	return append(out, '}')
}

func appendMessage(out []byte, m *chat.Message) []byte {
	// The four roles are written as constants; half the strings of a
	// history are roles.
	switch m.Role {
	case chat.RoleUser:
		out = append(out, `{"role":"user"`...)
	case chat.RoleAssistant:
		out = append(out, `{"role":"assistant"`...)
	case chat.RoleTool:
		out = append(out, `{"role":"tool"`...)
	case chat.RoleSystem:
		out = append(out, `{"role":"system"`...)
	default:
		out = append(out, `{"role":`...)
		out = appendString(out, m.Role)
	}
	switch {
	case m.Content != "":
		out = append(out, `,"content":`...)
		out = appendString(out, m.Content)
	case len(m.ToolCalls) > 0:
		out = append(out, `,"content":null`...)
	}
	if m.Name != "" {
		out = append(out, `,"name":`...)
		out = appendString(out, m.Name)
	}
	if len(m.ToolCalls) > 0 {
		out = append(out, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"id":`...)
			out = appendString(out, tc.ID)
			out = append(out, `,"type":"function","function":{"name":`...)
			out = appendString(out, tc.Name)
			out = append(out, `,"arguments":`...)
			out = appendString(out, tc.Arguments)
			out = append(out, `}}`...)
		}
		out = append(out, ']')
	}
	if m.ToolCallID != "" {
		out = append(out, `,"tool_call_id":`...)
		out = appendString(out, m.ToolCallID)
	}
	return append(out, '}')
}

const hexDigits = "0123456789abcdef"

// Bytes repeated in each lane of a word, for appendString.
const (
	lanes1   = 0x0101010101010101
	lanesMSB = 0x8080808080808080
)

// appendString appends s as a JSON string, escaping as encoding/json does
// (HTML characters excepted: this is an API body, not a page). Invalid UTF-8
// becomes U+FFFD.
func appendString(out []byte, s string) []byte {
	out = append(out, '"')
	out = appendEscaped(out, s)
	return append(out, '"')
}

// appendEscaped appends s escaped as in a JSON string, without the quotes.
func appendEscaped(out []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		// A chat request is mostly plain text: it is tested a word of 8
		// bytes at a time, which halves the encoder's time.
		if i+8 <= len(s) {
			w := s[i : i+8]
			x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
				uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
			// A lane's top bit ends up set when its byte is below 0x20, is
			// '"' or '\\' (a zero lane after the XOR), or is not ASCII. A
			// borrow can set lanes above such a lane too, never instead of it.
			ctl := (x - lanes1*0x20) &^ x
			q := x ^ (lanes1 * '"')
			q = (q - lanes1) &^ q
			bs := x ^ (lanes1 * '\\')
			bs = (bs - lanes1) &^ bs
			if (ctl|q|bs|x)&lanesMSB == 0 {
				i += 8
				continue
			}
		}
		// Byte by byte through this word, and on through text that is not
		// ASCII, where words would not pass the test above.
		for end := min(i+8, len(s)); i < end || i < len(s) && s[i] >= utf8.RuneSelf; {
			c := s[i]
			if c < utf8.RuneSelf {
				if c >= 0x20 && c != '"' && c != '\\' {
					i++
					continue
				}
				out = append(out, s[start:i]...)
				switch c {
				case '"', '\\':
					out = append(out, '\\', c)
				case '\n':
					out = append(out, '\\', 'n')
				case '\r':
					out = append(out, '\\', 'r')
				case '\t':
					out = append(out, '\\', 't')
				case '\b':
					out = append(out, '\\', 'b')
				case '\f':
					out = append(out, '\\', 'f')
				default:
					out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				}
				i++
				start = i
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = append(out, s[start:i]...)
				out = append(out, `\ufffd`...)
				i += size
				start = i
				continue
			}
			if r == '\u2028' || r == '\u2029' {
				out = append(out, s[start:i]...)
				out = append(out, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
				i += size
				start = i
				continue
			}
			i += size
		}
	}
	return append(out, s[start:]...)
}

// chatResponse is what a turn reads of a chat-completions response, under
// go-openai's field names and types. Decoding into go-openai's whole
// ChatCompletionResponse cost a third more and twice the allocations: its
// message type decodes itself twice (once with text content, once with
// parts), and it fills fields nothing reads.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Content   messageContent `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// messageContent is a message's text. Like go-openai's message type it
// accepts a string, null, or an array of content parts (which carry no
// text for a turn, as before); anything else is not chat-completions JSON.
type messageContent string

func (c *messageContent) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case '"':
		return json.Unmarshal(b, (*string)(c))
	case 'n':
		return nil
	case '[':
		var parts []openai.ChatMessagePart
		return json.Unmarshal(b, &parts)
	}
	return fmt.Errorf("message content is %s, neither a string nor an array of parts", b)
}

// maxResponse bounds a chat response body: a runaway upstream must not eat
// the board's memory.
const maxResponse = 16 << 20

// postChat sends body to {api_base}/chat/completions and decodes the answer,
// or its error into go-openai's error types.
func (c *Client) postChat(ctx context.Context, body []byte) (*chatResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.chatURL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	// One map and one array for the three headers, instead of a slice
	// per Set.
	vals := [3]string{"application/json", "application/json", c.auth}
	req.Header = http.Header{"Content-Type": vals[0:1:1], "Accept": vals[1:2:2]}
	if c.auth != "" {
		req.Header["Authorization"] = vals[2:3:3]
	}
	resp, err := c.tr.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// The body is read into a pooled buffer: the decoders below copy what
	// they keep.
	rb := bufPool.Get().(*bytes.Buffer)
	rb.Reset()
	defer func() {
		if rb.Cap() <= maxPooled {
			bufPool.Put(rb)
		}
	}()
	if _, err := rb.ReadFrom(io.LimitReader(resp.Body, maxResponse+1)); err != nil {
		return nil, err
	}
	data := rb.Bytes()
	if len(data) > maxResponse {
		return nil, &Error{Kind: KindUpstream, Provider: c.name, Status: resp.StatusCode, Message: "the response is larger than 16 MiB"}
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		var er openai.ErrorResponse
		if json.Unmarshal(data, &er) == nil && er.Error != nil {
			er.Error.HTTPStatusCode = resp.StatusCode
			er.Error.HTTPStatus = resp.Status
			return nil, er.Error
		}
		return nil, &openai.RequestError{HTTPStatus: resp.Status, HTTPStatusCode: resp.StatusCode, Body: bytes.Clone(data),
			Err: errors.New(http.StatusText(resp.StatusCode))}
	}
	var out chatResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, &Error{Kind: KindUpstream, Provider: c.name, Status: resp.StatusCode, Message: "the response is not chat-completions JSON: " + err.Error()}
	}
	return &out, nil
}
