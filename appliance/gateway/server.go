package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/perchhq/perch/appliance/config"
)

// Access says who may call a route.
type Access int

const (
	// Open routes answer everyone (/health, /ready, the page).
	Open Access = iota
	// Protected routes need the token, or loopback when there is none.
	Protected
	// SelfGuarded routes check their own credentials (a webhook's HMAC).
	SelfGuarded
)

// MaxBody caps request bodies (413 beyond).
const MaxBody = 1 << 20

// Options configure the server.
type Options struct {
	Host  string
	Port  int
	Token config.Secret
	// AllowedHosts are host names (or addresses) besides the board's own
	// that requests may name in Host: gateway.allowed_hosts.
	AllowedHosts []string
	Log          *slog.Logger
	// WriteTimeout must exceed the longest turn.
	WriteTimeout time.Duration
	// ProofKey is the pid file's key: /health proves knowledge of it to
	// the CLI (see package pidfile).
	ProofKey string
	// HeaderTimeout bounds the wait for a request's headers, from the
	// connection's start or its last request (default 5 s).
	HeaderTimeout time.Duration
	// MaxConns caps the connections held at once (default 256; beyond, new
	// ones wait), and MaxConnsPerClient one client's share (default 64;
	// beyond, its new ones are closed at once).
	MaxConns          int
	MaxConnsPerClient int
	// NotFoundHint, when set, may explain a path nothing serves (a
	// platform's webhook whose channel is off) instead of the plain 404.
	NotFoundHint func(path string) string
}

// Server is the HTTP gateway.
type Server struct {
	opts    Options
	log     *slog.Logger
	router  *httprouter.Router
	srv     *http.Server
	ln      net.Listener
	lanOnly bool // token empty on a non-loopback address: loopback clients only
	hosts   *hostPolicy
	csrf    *http.CrossOriginProtection
	tokens  *tokenGuard
	ready   atomic.Bool
	started time.Time

	answered     chan struct{} // see Answered
	answeredOnce sync.Once
}

// New returns a server with no routes; add them with Handle.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 6 * time.Minute
	}
	if opts.HeaderTimeout <= 0 {
		opts.HeaderTimeout = 5 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 256
	}
	if opts.MaxConnsPerClient <= 0 {
		opts.MaxConnsPerClient = min(64, opts.MaxConns)
	}
	s := &Server{opts: opts, log: opts.Log, router: httprouter.New(), started: time.Now(),
		hosts: newHostPolicy(opts.Host, opts.AllowedHosts), csrf: http.NewCrossOriginProtection(),
		tokens: newTokenGuard(opts.Log), answered: make(chan struct{})}
	s.lanOnly = !opts.Token.IsSet() && !config.IsLoopbackHost(opts.Host)
	s.router.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.NotFoundHint != nil {
			if hint := opts.NotFoundHint(r.URL.Path); hint != "" {
				WriteError(w, http.StatusNotFound, hint)
				return
			}
		}
		WriteError(w, http.StatusNotFound, fmt.Sprintf("no such path %s; see the API in README.md", r.URL.Path))
	})
	s.router.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, w.Header().Get("Allow")))
	})
	s.router.PanicHandler = func(w http.ResponseWriter, r *http.Request, v any) {
		s.log.Error("handler panicked", "path", r.URL.Path, "panic", v)
		WriteError(w, http.StatusInternalServerError, "internal error; see the gateway log")
	}
	return s
}

// Handle adds a route.
func (s *Server) Handle(method, path string, access Access, h http.HandlerFunc) {
	s.router.Handler(method, path, s.guard(access, h))
}

// HandleParams adds a route with path parameters.
func (s *Server) HandleParams(method, path string, access Access, h httprouter.Handle) {
	s.router.Handle(method, path, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		s.guard(access, func(w http.ResponseWriter, r *http.Request) { h(w, r, ps) })(w, r)
	})
}

// SetReady marks the start-up as finished (or not).
func (s *Server) SetReady(v bool) { s.ready.Store(v) }

// IsReady reports whether start-up finished.
func (s *Server) IsReady() bool { return s.ready.Load() }

// Uptime is the time since New.
func (s *Server) Uptime() time.Duration { return time.Since(s.started) }

// Bind opens the gateway's listening socket on host:port. A busy port's
// error matches syscall.EADDRINUSE and names the setting to change.
func Bind(host string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	// Plain TCP: Go listens with Multipath TCP where the kernel has it,
	// which a board on one LAN link gains nothing from, and its probe and
	// bind cost every start.
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		if errors.Is(err, syscallEADDRINUSE) {
			return nil, &busyPortError{host: host, port: port}
		}
		return nil, fmt.Errorf("gateway: listen on %s: %w; check gateway.host and gateway.port", addr, err)
	}
	return ln, nil
}

// busyPortError is a port another program holds; it matches
// syscall.EADDRINUSE.
type busyPortError struct {
	host string
	port int
}

func (e *busyPortError) Error() string {
	return fmt.Sprintf("gateway: port %d on %s is already in use (another perch or program?); stop it or change gateway.port", e.port, e.host)
}

func (e *busyPortError) Unwrap() error { return syscallEADDRINUSE }

// Listen binds the address (Bind) and builds the HTTP server; a busy port
// is reported here, before anything else starts serving.
func (s *Server) Listen() error {
	ln, err := Bind(s.opts.Host, s.opts.Port)
	if err != nil {
		return err
	}
	s.ListenOn(ln)
	return nil
}

// ListenOn builds the HTTP server on ln, a socket Bind opened earlier;
// Stop closes it. Until Serve, connections wait in its listen queue.
func (s *Server) ListenOn(ln net.Listener) {
	s.ln = newLimitListener(ln, s.opts.MaxConns, s.opts.MaxConnsPerClient, s.log)
	// Built here, not in Serve, so Stop (which may run while Serve is only
	// starting) reads a field written before either began. Connections
	// that send nothing, or idle between requests, give their slot back
	// within seconds.
	s.srv = &http.Server{
		Handler:           s.router,
		ReadHeaderTimeout: s.opts.HeaderTimeout,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState:         s.connState,
	}
}

// Addr is the bound address (after Listen).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Serve answers requests until Stop; call Listen first. It returns nil
// after Stop, and the error when the listener fails for good: the caller
// must then stop the gateway, which can no longer be reached.
func (s *Server) Serve() error {
	if s.srv == nil {
		return errors.New("gateway: Serve called before Listen")
	}
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("gateway: HTTP server failed: %w", err)
}

// Stop stops accepting requests and waits for those in flight until ctx
// ends. Stop before (or while) Serve starts makes Serve return nil.
func (s *Server) Stop(ctx context.Context) error {
	s.ready.Store(false)
	defer s.tokens.close() // reports the last minute's wrong tokens
	if s.srv == nil {
		return nil
	}
	// Shutdown closes the listeners Serve tracks; ln is closed here too in
	// case Serve has not started (Shutdown then marks the server closed,
	// and a later Serve returns ErrServerClosed at once).
	err := s.srv.Shutdown(ctx)
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) && err == nil {
		err = cerr
	}
	return err
}

// ServeHTTP lets tests drive the router directly.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

func (s *Server) guard(access Access, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if access != SelfGuarded {
			if status, msg := s.browserRules(r); status != 0 {
				WriteError(w, status, msg)
				return
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		}
		if access == Protected && !s.Authorize(w, r) {
			return
		}
		h(w, r)
	}
}

// Authorize applies the Protected rule to r: the token when one is set, else
// loopback clients only on a server that listens beyond loopback. It answers
// 401, 403 or 429 itself and returns false when it did. Routes whose access
// depends on state (POST /setup) register as Open and call it themselves.
//
// A client that sent too many wrong tokens is refused (429) before its
// token is even compared, until it may try again; a request without a
// token is not a guess and does not count.
func (s *Server) Authorize(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.Token.IsSet() {
		if !s.tokens.check(w, r) {
			return false
		}
		if !tokenOK(r, s.opts.Token.Value()) {
			if r.Header.Get("Authorization") != "" {
				s.tokens.fail(r)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="perch"`)
			WriteError(w, http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer <gateway.api_token>")
			return false
		}
	} else if s.lanOnly && !isLoopback(r.RemoteAddr) {
		WriteError(w, http.StatusForbidden, "gateway.api_token is empty, so only this machine may use this path; set gateway.api_token (perch onboard makes one) to allow the network")
		return false
	}
	return true
}

// detailsAllowed applies the Protected rule to a route open to everyone
// whose private details are not (/ready): it reports whether r may read
// them. A client that sends no token reads the public part; one that sends
// a wrong token is refused like on any protected route, so an open route
// never becomes a way to test tokens (answered is then true).
func (s *Server) detailsAllowed(w http.ResponseWriter, r *http.Request) (details, answered bool) {
	if s.opts.Token.IsSet() {
		if r.Header.Get("Authorization") == "" {
			return false, false
		}
		if !s.Authorize(w, r) {
			return false, true
		}
		return true, false
	}
	return !s.lanOnly || isLoopback(r.RemoteAddr), false
}

// detailsHint says where the private details are shown.
func (s *Server) detailsHint() string {
	if s.opts.Token.IsSet() {
		return "the reason is shown to clients that send gateway.api_token"
	}
	return "the reason is shown on this machine only (set gateway.api_token to read it from the network)"
}

func tokenOK(r *http.Request, token string) bool {
	h := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(h) < len(p) || !strings.EqualFold(h[:len(p)], p) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[len(p):])), []byte(token)) == 1
}

func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// WriteError writes {"error": msg} with status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}

// DecodeJSON reads a JSON body into v, answering 413 or 400 itself and
// returning false when it did. A 400 names the field and the type it needs
// in JSON's words, never the Go types behind them.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeJSON(w, r, v, false, nil)
}

// DecodeJSONStrict is DecodeJSON for a body whose fields are all known: a
// field the request does not have is refused by name, where a lenient
// decode dropped it without a word and ran the request without it (a
// schedule's "every_seconds" outside "schedule" read as no schedule at
// all). where, when set, says where such a field belongs.
func DecodeJSONStrict(w http.ResponseWriter, r *http.Request, v any, where func(field string) string) bool {
	return decodeJSON(w, r, v, true, where)
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any, strict bool, where func(string) string) bool {
	dec := json.NewDecoder(r.Body)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over %d bytes (1 MiB)", MaxBody))
		} else if f, ok := unknownField(err); ok {
			msg := fmt.Sprintf("%q is not a field of this request", f)
			if where != nil {
				if hint := where(f); hint != "" {
					msg += "; " + hint
				}
			}
			WriteError(w, http.StatusBadRequest, msg)
		} else {
			WriteError(w, http.StatusBadRequest, bodyError(err))
		}
		return false
	}
	// One JSON value and nothing after it: a client that sent more (two
	// objects, a stray word) meant something else than what would run.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over %d bytes (1 MiB)", MaxBody))
		} else {
			WriteError(w, http.StatusBadRequest, "malformed JSON body: something follows the JSON value; send one object")
		}
		return false
	}
	return true
}

// unknownField is the field a strict decode refused; encoding/json says
// it only in its message.
func unknownField(err error) (string, bool) {
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	f, uerr := strconv.Unquote(rest)
	if uerr != nil {
		return rest, true
	}
	return f, true
}

// bodyError says what is wrong with a JSON body json.Decoder refused.
func bodyError(err error) string {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("%q must be %s, not %s", te.Field, config.KindName(te.Type), config.ValueName(te.Value))
	case errors.As(err, &te):
		return fmt.Sprintf("the body must be %s, not %s", config.KindName(te.Type), config.ValueName(te.Value))
	case errors.Is(err, io.EOF):
		return "the body is empty; send a JSON object ({...})"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON body: it ends early (a missing } or ])"
	}
	return "malformed JSON body: " + err.Error()
}

// FormatUptime renders d as "<h>h<m>m<s>s".
func FormatUptime(d time.Duration) string {
	d = d.Round(time.Second)
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	return fmt.Sprintf("%dh%dm%ds", h, m, d/time.Second)
}
