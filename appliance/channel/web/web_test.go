package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/store"
)

const token = "tok-web-channel-test-0123456789"

type fixture struct {
	ch   *Channel
	db   *store.DB
	base string
}

// start serves the channel's routes on a real loopback gateway over a real
// store.
func start(t *testing.T, opts Options) *fixture {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	opts.Store = db
	opts.Log = slog.New(slog.DiscardHandler)
	ch := New(opts)
	srv := gateway.New(gateway.Options{Host: "127.0.0.1", Token: token, Log: opts.Log})
	ch.Register(srv)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch.Stop(context.Background())
		srv.Stop(context.Background())
	})
	return &fixture{ch: ch, db: db, base: "http://" + srv.Addr()}
}

func (f *fixture) do(t *testing.T, method, path, tok string) *http.Response {
	t.Helper()
	var body io.Reader
	req, _ := http.NewRequest(method, f.base+path, body)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *fixture) ticket(t *testing.T) string {
	t.Helper()
	res := f.do(t, http.MethodPost, "/events/ticket", token)
	defer res.Body.Close()
	var tr TicketResponse
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&tr) != nil || tr.Ticket == "" || tr.ExpiresIn != 30 {
		t.Fatalf("ticket: %d %+v", res.StatusCode, tr)
	}
	return tr.Ticket
}

// sse is an open stream read event by event.
type sse struct {
	res *http.Response
	r   *bufio.Reader
}

type event struct{ id, kind, data string }

func (f *fixture) open(t *testing.T, since string) *sse {
	t.Helper()
	q := "/events?ticket=" + f.ticket(t)
	if since != "" {
		q += "&since=" + since
	}
	res := f.do(t, http.MethodGet, q, "")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("stream: %d %s", res.StatusCode, b)
	}
	s := &sse{res: res, r: bufio.NewReader(res.Body)}
	t.Cleanup(s.close)
	return s
}

func (s *sse) close() { s.res.Body.Close() }

// next reads the next event, skipping comments, failing after 5 s.
func (s *sse) next(t *testing.T) event {
	t.Helper()
	type result struct {
		ev  event
		err error
	}
	done := make(chan result, 1)
	go func() {
		var ev event
		for {
			line, err := s.r.ReadString('\n')
			if err != nil {
				done <- result{err: err}
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				if ev.kind != "" {
					done <- result{ev: ev}
					return
				}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.kind = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("reading the stream: %v", r.err)
		}
		return r.ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return event{}
}

// TestStreamAuthentication: the ticket route needs the token, the stream
// needs a ticket, and a ticket opens one stream only.
func TestStreamAuthentication(t *testing.T) {
	f := start(t, Options{})
	if res := f.do(t, http.MethodPost, "/events/ticket", ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("ticket without the token = %d, want 401", res.StatusCode)
	}
	if res := f.do(t, http.MethodPost, "/events/ticket", "wrong-token-wrong-token"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("ticket with a wrong token = %d, want 401", res.StatusCode)
	}
	for _, q := range []string{"/events", "/events?ticket=", "/events?ticket=forged", "/events?token=" + token} {
		res := f.do(t, http.MethodGet, q, "")
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "POST /events/ticket") {
			t.Errorf("GET %s = %d %s, want 401 naming the ticket route", q, res.StatusCode, body)
		}
	}
	tk := f.ticket(t)
	first := f.do(t, http.MethodGet, "/events?ticket="+tk, "")
	defer first.Body.Close()
	if first.StatusCode != 200 {
		t.Fatalf("first use = %d", first.StatusCode)
	}
	again := f.do(t, http.MethodGet, "/events?ticket="+tk, "")
	again.Body.Close()
	if again.StatusCode != http.StatusUnauthorized {
		t.Errorf("second use of a ticket = %d, want 401", again.StatusCode)
	}
}

func TestTicketsExpireAndAreBounded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tk := newTickets(func() time.Time { return now })
	a := tk.issue()
	now = now.Add(29 * time.Second)
	b := tk.issue()
	now = now.Add(2 * time.Second)
	if tk.redeem(a) {
		t.Error("a ticket 31 s old was accepted")
	}
	if !tk.redeem(b) || tk.redeem(b) {
		t.Error("a fresh ticket must work once")
	}
	var all []string
	for range 100 {
		all = append(all, tk.issue())
	}
	if len(tk.issued) != maxTickets {
		t.Errorf("%d tickets kept, want at most %d", len(tk.issued), maxTickets)
	}
	if tk.redeem(all[0]) || !tk.redeem(all[99]) {
		t.Error("the oldest tickets beyond the bound must be forgotten, the newest kept")
	}
}

// TestSendReachesOpenPageAndWaitsInHistory: a message for a chat is pushed
// to the open page at once and kept in the chat's history, where a page
// opened later finds it.
func TestSendReachesOpenPageAndWaitsInHistory(t *testing.T) {
	f := start(t, Options{})
	s := f.open(t, "")
	if ev := s.next(t); ev.kind != "hello" {
		t.Fatalf("first event %+v, want hello", ev)
	}
	if err := f.ch.Send(context.Background(), bus.Outbound{Channel: Name, ChatID: "home", Text: "Water the plants"}); err != nil {
		t.Fatal(err)
	}
	ev := s.next(t)
	var m Message
	if ev.kind != "message" || json.Unmarshal([]byte(ev.data), &m) != nil || m.Chat != "home" || m.Text != "Water the plants" || !m.Pushed || m.T == 0 {
		t.Fatalf("event %+v", ev)
	}
	if !strings.HasPrefix(ev.id, f.ch.hub.epoch+"-") {
		t.Errorf("event id %q has no epoch", ev.id)
	}
	s.close()

	// No page open: the next one waits in the history.
	if err := f.ch.Send(context.Background(), bus.Outbound{Channel: Name, ChatID: "home", Text: "Close the window"}); err != nil {
		t.Fatal(err)
	}
	res := f.do(t, http.MethodGet, "/web/history?chat=home", token)
	defer res.Body.Close()
	var h HistoryResponse
	if err := json.NewDecoder(res.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Session != "web:home" || len(h.Messages) != 2 || h.Messages[1].Text != "Close the window" || !h.Messages[1].Pushed {
		t.Fatalf("history %+v", h)
	}
	info, _ := f.db.Session("web:home")
	if info.Channel != Name || info.ChatID != "home" {
		t.Errorf("session route %q:%q, want web:home (so LastActive finds the page)", info.Channel, info.ChatID)
	}
	if res := f.do(t, http.MethodGet, "/web/history?chat=home", ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("history without the token = %d", res.StatusCode)
	}
	if res := f.do(t, http.MethodGet, "/web/history?chat=../x", token); res.StatusCode != http.StatusBadRequest {
		t.Errorf("history of a bad chat id = %d", res.StatusCode)
	}
}

// TestHistoryShowsTurnsAndPushedMessages: the page's history holds the
// person's messages and the answers, not tool traffic, and tells pushed
// messages from replies.
func TestHistoryShowsTurnsAndPushedMessages(t *testing.T) {
	f := start(t, Options{})
	key := SessionKey("home")
	turn := []chat.Message{
		{Role: "user", Content: "remind me", Time: 1},
		{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "cron", Arguments: "{}"}}, Time: 2},
		{Role: "tool", ToolCallID: "c1", Name: "cron", Content: "scheduled job 1", Time: 3},
		{Role: "assistant", Content: "Done.", Time: 4},
	}
	if err := f.db.Append(key, turn, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	if err := f.ch.Send(context.Background(), bus.Outbound{ChatID: "home", Text: "Reminder: water"}); err != nil {
		t.Fatal(err)
	}
	got, err := f.ch.history("home")
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, m := range got {
		desc = append(desc, fmt.Sprintf("%s:%s:%v", m.Role, m.Text, m.Pushed))
	}
	want := "user:remind me:false|assistant:Done.:false|assistant:Reminder: water:true"
	if strings.Join(desc, "|") != want {
		t.Errorf("history = %s, want %s", strings.Join(desc, "|"), want)
	}
}

func TestSendRefusesWhatIsNotAPageChat(t *testing.T) {
	f := start(t, Options{})
	for _, chat := range []string{"", "a b", "../etc", strings.Repeat("x", 65)} {
		if err := f.ch.Send(context.Background(), bus.Outbound{ChatID: chat, Text: "x"}); err == nil {
			t.Errorf("Send to chat %q accepted", chat)
		}
	}
}

// TestReconnectCatchesUp: a page that reconnects with its last id gets what
// it missed; one whose id is from another run of the gateway, or older than
// the ring, is told to reload.
func TestReconnectCatchesUp(t *testing.T) {
	f := start(t, Options{})
	s := f.open(t, "")
	hello := s.next(t)
	var h struct{ ID string }
	json.Unmarshal([]byte(hello.data), &h)
	s.close()
	for i := range 3 {
		f.ch.Publish("sensors", map[string]int{"round": i})
	}
	again := f.open(t, h.ID)
	if ev := again.next(t); ev.kind != "hello" {
		t.Fatalf("first event %+v", ev)
	}
	for i := range 3 {
		ev := again.next(t)
		if ev.kind != "sensors" || ev.data != fmt.Sprintf(`{"round":%d}`, i) {
			t.Fatalf("missed event %d = %+v", i, ev)
		}
	}
	stale := f.open(t, "0000dead-7")
	stale.next(t) // hello
	if ev := stale.next(t); ev.kind != "resync" {
		t.Errorf("a page of another epoch got %+v, want resync", ev)
	}
	for i := range ringEvents + 10 {
		f.ch.Publish("sensors", i)
	}
	old := f.open(t, h.ID)
	old.next(t)
	if ev := old.next(t); ev.kind != "resync" {
		t.Errorf("a page older than the ring got %+v, want resync", ev)
	}
}

// TestRingAndQueuesAreBounded: the ring keeps at most 256 events and 256
// KiB; a page that does not read is dropped, not buffered.
func TestRingAndQueuesAreBounded(t *testing.T) {
	h := newHub(slog.New(slog.DiscardHandler))
	slow, _, _, err := h.subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 10<<10)
	for i := range 1000 {
		h.publish("k", map[string]any{"i": i, "pad": big})
	}
	if len(h.ring) > ringEvents || h.ringSize > ringBytes {
		t.Errorf("ring holds %d events, %d bytes", len(h.ring), h.ringSize)
	}
	select {
	case <-slow.gone:
	default:
		t.Error("a page that read nothing was not dropped")
	}
	if h.count() != 0 {
		t.Errorf("%d pages after the drop", h.count())
	}
	h.publish("huge", strings.Repeat("y", maxEventData+1))
	if last := h.ring[len(h.ring)-1]; last.Kind == "huge" {
		t.Error("an event over the size bound was kept")
	}
	var subs []*sub
	for range MaxStreams {
		s, _, _, err := h.subscribe(0, false)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, _, _, err := h.subscribe(0, false); err != ErrTooMany {
		t.Errorf("page %d: err %v, want ErrTooMany", MaxStreams+1, err)
	}
	h.close()
	for _, s := range subs {
		select {
		case <-s.gone:
		default:
			t.Fatal("close left a page connected")
		}
	}
}

// TestStatusOnlyWhilePagesAreOpen: nobody looking costs nothing; a page
// gets the status when it connects and at each tick.
func TestStatusOnlyWhilePagesAreOpen(t *testing.T) {
	var calls atomic.Int32
	f := start(t, Options{StatusEvery: 50 * time.Millisecond, Status: func(context.Context) any {
		calls.Add(1)
		return map[string]bool{"ready": true}
	}})
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Errorf("status computed %d times with no page open", n)
	}
	s := f.open(t, "")
	s.next(t) // hello
	if ev := s.next(t); ev.kind != "status" || ev.data != `{"ready":true}` {
		t.Errorf("event %+v, want the status", ev)
	}
	if ev := s.next(t); ev.kind != "status" {
		t.Errorf("event %+v, want the next tick's status", ev)
	}
	if ok, msg := f.ch.Check(context.Background()); !ok || msg != "1 page open" {
		t.Errorf("check = %v %q", ok, msg)
	}
}

// TestStopEndsStreams: stopping the gateway closes the pages' streams
// instead of waiting for them.
func TestStopEndsStreams(t *testing.T) {
	f := start(t, Options{})
	s := f.open(t, "")
	s.next(t)
	if err := f.ch.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(s.res.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream stayed open after Stop")
	}
}

func TestValidChat(t *testing.T) {
	for chat, want := range map[string]bool{
		"home": true, "a": true, "Kitchen_2.v-1": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "a b": false, "a/b": false, "ä": false, "a\n": false, "a:b": false,
	} {
		if got := ValidChat(chat); got != want {
			t.Errorf("ValidChat(%q) = %v, want %v", chat, got, want)
		}
	}
}

// TestExchangeReachesOtherPages: a turn answered through /chat on a page's
// chat reaches every open page as its two messages, marked with the page
// that asked (which shows them from its answer); turns on sessions that
// are not a page chat's own stay out of the stream.
func TestExchangeReachesOtherPages(t *testing.T) {
	f := start(t, Options{})
	s := f.open(t, "")
	defer s.close()
	if ev := s.next(t); ev.kind != "hello" {
		t.Fatalf("first event %+v, want hello", ev)
	}
	asked, answered := time.UnixMilli(1_700_000_000_000), time.UnixMilli(1_700_000_001_500)
	// Not a page's: a session other than web:<chat> (whatever the channel
	// and chat id say), a chat id that is not a page's.
	f.ch.Exchange(bus.Inbound{Channel: Name, ChatID: "home", SessionKey: "rest:default", Text: "x"}, asked, "y", answered, "p1")
	f.ch.Exchange(bus.Inbound{Channel: Name, ChatID: "home", SessionKey: "webhome", Text: "x"}, asked, "y", answered, "p1")
	f.ch.Exchange(bus.Inbound{Channel: Name, ChatID: "../x", SessionKey: "web:../x", Text: "x"}, asked, "y", answered, "p1")
	f.ch.Exchange(bus.Inbound{Channel: Name, ChatID: "home", SessionKey: "web:home", Text: "Is the door shut?"}, asked, "It is.", answered, "p1")
	// The terminal's `perch agent -s web:kitchen`: no page asked.
	f.ch.Exchange(bus.Inbound{Channel: "cli", SessionKey: "web:kitchen", Text: "Thanks"}, asked, "", answered, strings.Repeat("p", 65))
	want := []Message{
		{Chat: "home", Role: chat.RoleUser, Text: "Is the door shut?", T: asked.UnixMilli(), Page: "p1"},
		{Chat: "home", Role: chat.RoleAssistant, Text: "It is.", T: answered.UnixMilli(), Page: "p1"},
		// An empty reply is not a message; an oversized page id is dropped.
		{Chat: "kitchen", Role: chat.RoleUser, Text: "Thanks", T: asked.UnixMilli()},
	}
	for i, w := range want {
		ev := s.next(t)
		var m Message
		if ev.kind != "message" || json.Unmarshal([]byte(ev.data), &m) != nil || m != w {
			t.Fatalf("event %d: %+v, want message %+v", i, ev, w)
		}
	}
}
