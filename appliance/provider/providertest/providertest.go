// Package providertest is an OpenAI-compatible chat-completions server on
// loopback for tests: it answers from a script of replies (text, tool calls,
// errors with status and Retry-After) and records every request it got, so
// tests drive the production client over real HTTP.
package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
)

// ToolCall is a tool call the fake model makes.
type ToolCall struct {
	ID   string
	Name string
	Args string // JSON object text
}

// Reply is one scripted answer.
type Reply struct {
	Content   string
	ToolCalls []ToolCall
	// Status, when not 0 or 200, makes an error response with ErrorBody (or
	// a default OpenAI-style error built from ErrorMessage/ErrorCode).
	Status       int
	ErrorMessage string
	ErrorCode    string
	ErrorBody    string
	RetryAfter   string
	Usage        [3]int // prompt, completion, total
}

// Request is a recorded chat-completions request.
type Request struct {
	Header http.Header
	Raw    []byte
	Body   ChatRequest
}

// ChatRequest is the decoded request body.
type ChatRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	Tools               []any          `json:"tools"`
	ToolChoice          any            `json:"tool_choice"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Temperature         *float64       `json:"temperature"`
	Route               string         `json:"route"`
	Models              []string       `json:"models"`
	Extra               map[string]any `json:"-"`
}

// Message is a decoded request message.
type Message struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// Server is the fake provider.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	script   []Reply
	requests []Request
	// Default answers when the script is empty; nil echoes the last user
	// message as "echo: <text>".
	Default func(ChatRequest) Reply
	// Models is what GET /models returns (data array entries); set it
	// with SetModels once requests may be in flight.
	Models []map[string]any
	// Image is the base64 image POST /images/generations returns.
	Image string
	// Transcript is the text POST /audio/transcriptions returns.
	Transcript string
	// Transcriptions records the audio uploads received.
	Transcriptions []Transcription

	calls atomic.Int64
}

// New starts a fake provider; close it with Close (or t.Cleanup).
func New() *Server {
	s := &Server{Image: "iVBORw0KGgo="}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /chat/completions", s.chat)
	mux.HandleFunc("GET /models", s.models)
	mux.HandleFunc("POST /images/generations", s.images)
	mux.HandleFunc("POST /audio/transcriptions", s.transcribe)
	s.Server = httptest.NewServer(mux)
	return s
}

// URL of the API base, for providers.<p>.api_base.
func (s *Server) Base() string { return s.Server.URL }

// Enqueue appends replies to the script.
func (s *Server) Enqueue(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Requests returns the chat requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Calls counts chat requests, retries included.
func (s *Server) Calls() int { return int(s.calls.Load()) }

// Pending is the number of scripted replies not yet used.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	raw, _ := io.ReadAll(r.Body)
	var req ChatRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		writeError(w, 400, "invalid JSON body: "+err.Error(), "")
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Header: r.Header.Clone(), Raw: raw, Body: req})
	var rep Reply
	if len(s.script) > 0 {
		rep, s.script = s.script[0], s.script[1:]
	} else if s.Default != nil {
		rep = s.Default(req)
	} else {
		rep = Reply{Content: "echo: " + LastUser(req)}
	}
	s.mu.Unlock()
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	if rep.Status != 0 && rep.Status != 200 {
		if rep.ErrorBody != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rep.Status)
			io.WriteString(w, rep.ErrorBody)
			return
		}
		writeError(w, rep.Status, rep.ErrorMessage, rep.ErrorCode)
		return
	}
	WriteReply(w, req.Model, rep)
}

// WriteReply writes rep as a chat-completions response.
func WriteReply(w http.ResponseWriter, model string, rep Reply) {
	msg := map[string]any{"role": "assistant", "content": rep.Content}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		calls := make([]map[string]any, len(rep.ToolCalls))
		for i, tc := range rep.ToolCalls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_%d", i+1)
			}
			calls[i] = map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Args}}
		}
		msg["tool_calls"] = calls
		finish = "tool_calls"
	}
	u := rep.Usage
	if u == [3]int{} {
		u = [3]int{10, 5, 15}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": u[0], "completion_tokens": u[1], "total_tokens": u[2]},
	})
}

func writeError(w http.ResponseWriter, status int, msg, code string) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": msg, "type": "error"}
	if code != "" {
		e["code"] = code
	}
	json.NewEncoder(w).Encode(map[string]any{"error": e})
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		writeError(w, 401, "missing bearer token", "")
		return
	}
	s.mu.Lock()
	data := s.Models
	s.mu.Unlock()
	if data == nil {
		data = []map[string]any{{"id": "test/model"}}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"data": data})
}

func (s *Server) images(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	json.NewDecoder(r.Body).Decode(&req)
	if p, _ := req["prompt"].(string); p == "" {
		writeError(w, 400, "prompt is required", "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"created": 1, "data": []any{map[string]any{"b64_json": s.Image}}})
}

// SetModels sets what GET /models returns, also while the server runs (a
// request from another process does not order the write before its read
// for the race detector).
func (s *Server) SetModels(models []map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Models = models
}

// LastUser returns the content of the last user message of req.
func LastUser(req ChatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	return ""
}

// LastTool returns the content of the last tool message of req.
func LastTool(req ChatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "tool" {
			return req.Messages[i].Content
		}
	}
	return ""
}

// Transcription is a recorded speech-to-text request.
type Transcription struct {
	Model    string
	FileName string
	Size     int
}

// transcribe answers a Whisper-style multipart upload with Transcript.
func (s *Server) transcribe(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		writeError(w, 400, "expected a multipart form: "+err.Error(), "")
		return
	}
	f, fh, err := r.FormFile("file")
	if err != nil {
		writeError(w, 400, "missing file", "")
		return
	}
	data, _ := io.ReadAll(f)
	f.Close()
	s.mu.Lock()
	s.Transcriptions = append(s.Transcriptions, Transcription{Model: r.FormValue("model"), FileName: fh.Filename, Size: len(data)})
	text := s.Transcript
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"text": text})
}

// Transcribed returns the speech-to-text requests received.
func (s *Server) Transcribed() []Transcription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Transcription(nil), s.Transcriptions...)
}
