// Command floor is what Perch's /chat is measured against: the least a
// server can do to offer the same turn. It proxies POST /chat to an
// OpenAI-compatible provider, keeping each session's history in memory
// (capped like Perch's) and sending it with every request as Perch does.
// With -durable it also makes the turn durable the plain way: the user's
// message is appended to a log and fdatasync'd before the provider is
// called, the reply likewise before it is sent — two synced writes, one
// after the other.
//
//	floor -addr 127.0.0.1:9000 -provider http://127.0.0.1:9100 [-durable -dir /tmp/x]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type server struct {
	provider string
	limit    int
	hc       *http.Client

	mu       sync.Mutex
	sessions map[string]*session

	logMu sync.Mutex
	log   *os.File // nil without -durable
}

type session struct {
	mu   sync.Mutex
	msgs []message
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	provider := flag.String("provider", "", "provider base URL (…/chat/completions is appended)")
	durable := flag.Bool("durable", false, "fdatasync the user's message and the reply, one after the other")
	dir := flag.String("dir", os.TempDir(), "where -durable keeps its log")
	limit := flag.Int("history", 200, "messages kept per session")
	flag.Parse()
	s := &server{provider: *provider, limit: *limit, sessions: map[string]*session{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	if *durable {
		f, err := os.OpenFile(filepath.Join(*dir, "floor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s.log = f
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /chat", s.chat)
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"status":"ready"}`)) })
	if err := http.ListenAndServe(*addr, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// persist appends rec to the log and syncs it.
func (s *server) persist(rec []byte) error {
	if s.log == nil {
		return nil
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if _, err := s.log.Write(append(rec, '\n')); err != nil {
		return err
	}
	return unix.Fdatasync(int(s.log.Fd()))
}

func (s *server) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Message    string `json:"message"`
		SessionKey string `json:"session_key"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.Message == "" {
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	sess := s.sessions[req.SessionKey]
	if sess == nil {
		sess = &session{}
		s.sessions[req.SessionKey] = sess
	}
	s.mu.Unlock()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	user := message{Role: "user", Content: req.Message}
	rec, _ := json.Marshal(struct {
		Key string  `json:"key"`
		M   message `json:"m"`
	}{req.SessionKey, user})
	if err := s.persist(rec); err != nil {
		http.Error(w, `{"error":"store"}`, http.StatusInternalServerError)
		return
	}
	sess.msgs = append(sess.msgs, user)
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": sess.msgs, "max_tokens": 8192, "temperature": 0.7})
	resp, err := s.hc.Post(s.provider+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		http.Error(w, `{"error":"upstream"}`, http.StatusBadGateway)
		return
	}
	var out struct {
		Choices []struct {
			Message message `json:"message"`
		} `json:"choices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || len(out.Choices) == 0 {
		http.Error(w, `{"error":"upstream"}`, http.StatusBadGateway)
		return
	}
	reply := out.Choices[0].Message
	rec, _ = json.Marshal(struct {
		Key string  `json:"key"`
		M   message `json:"m"`
	}{req.SessionKey, reply})
	if err := s.persist(rec); err != nil {
		http.Error(w, `{"error":"store"}`, http.StatusInternalServerError)
		return
	}
	sess.msgs = append(sess.msgs, reply)
	if n := len(sess.msgs); n > s.limit {
		sess.msgs = append(sess.msgs[:0:0], sess.msgs[n-s.limit:]...)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"response": reply.Content, "ui_commands": []any{}})
}
