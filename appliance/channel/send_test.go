package channel

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

func quietSender(st *State) (*Sender, *bytes.Buffer) {
	var buf bytes.Buffer
	// As the intake's: the logger names the channel.
	return &Sender{Channel: "test", Log: slog.New(slog.NewTextHandler(&buf, nil)).With("channel", "test"), State: st,
		Backoff: Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}}, &buf
}

func TestDoHonoursRetryAfter(t *testing.T) {
	s, _ := quietSender(nil)
	calls := 0
	var at []time.Time
	err := s.Do(context.Background(), "send", func(context.Context) error {
		calls++
		at = append(at, time.Now())
		if calls == 1 {
			return RetryAfter(300*time.Millisecond, errors.New("429"))
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Do = %v after %d calls", err, calls)
	}
	if gap := at[1].Sub(at[0]); gap < 300*time.Millisecond {
		t.Errorf("retried after %s; the platform asked for 300ms", gap)
	}
}

func TestDoGivesUpOnPermanentAndLongWaits(t *testing.T) {
	s, _ := quietSender(nil)
	for _, tc := range []struct {
		name  string
		err   error
		calls int
	}{
		{"permanent", Fail(Permanent, errors.New("chat not found")), 1},
		{"bad format", Fail(BadFormat, errors.New("can't parse")), 1},
		{"too long", Fail(TooLong, errors.New("too long")), 1},
		{"transient", errors.New("connection reset"), 5},
	} {
		calls := 0
		err := s.Do(context.Background(), "send", func(context.Context) error { calls++; return tc.err })
		if err == nil || calls != tc.calls {
			t.Errorf("%s: %d calls, err %v; want %d calls and the error", tc.name, calls, err, tc.calls)
		}
	}
	s.MaxWait = time.Second
	calls := 0
	err := s.Do(context.Background(), "send", func(context.Context) error { calls++; return RetryAfter(time.Hour, errors.New("429")) })
	if err == nil || calls != 1 || !strings.Contains(err.Error(), "rate limited for 1h0m0s") {
		t.Errorf("an hour's wait: %d calls, %v", calls, err)
	}
}

func TestDoStopsWhenTheContextEnds(t *testing.T) {
	s, _ := quietSender(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	s.Do(ctx, "send", func(context.Context) error { return RetryAfter(time.Minute, errors.New("429")) })
	if time.Since(start) > time.Second {
		t.Error("Do waited past its context")
	}
}

func TestSendPartsFallsBackToPlainTextAndSplitsWhatIsTooLong(t *testing.T) {
	st := NewState("test")
	s, logs := quietSender(st)
	f := Format{Limit: 40, Render: TelegramHTML}
	parts := Prepare("**Hello** there, this reply is long enough to need two parts of text.", f)
	var got []string
	err := s.SendParts(context.Background(), "c1", parts, 0, f, func(_ context.Context, text string, formatted bool) error {
		if formatted {
			return Fail(BadFormat, errors.New("can't parse entities"))
		}
		if len([]rune(text)) > 20 {
			return Fail(TooLong, errors.New("message is too long"))
		}
		got = append(got, text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(got, ""), "<b>") || noSpace(strings.Join(got, "")) != noSpace("Hello there, this reply is long enough to need two parts of text.") {
		t.Errorf("sent %q", got)
	}
	if st.Status().MessagesOut != uint64(len(parts)) {
		t.Errorf("counted %d out, want %d", st.Status().MessagesOut, len(parts))
	}
	if !strings.Contains(logs.String(), "plain text") {
		t.Errorf("the fallback is not logged: %s", logs)
	}
}

func TestSendPartsLogsAndRecordsAFailureForGood(t *testing.T) {
	st := NewState("test")
	s, logs := quietSender(st)
	err := s.SendParts(context.Background(), "chat-7", []Part{{Text: "hi", Plain: "hi"}}, 0, Format{Limit: 10},
		func(context.Context, string, bool) error {
			return Fail(Permanent, errors.New("bot was blocked by the user"))
		})
	if err == nil || KindOf(err) != Permanent {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(logs.String(), "chat=chat-7") || !strings.Contains(logs.String(), "channel=test") {
		t.Errorf("the log line does not name channel and chat: %s", logs)
	}
	if le := st.Status().LastError; !strings.Contains(le, "chat-7") || !strings.Contains(le, "blocked") {
		t.Errorf("last error %q", le)
	}
}

func TestPrepareKeepsRenderedPartsWithinTheLimit(t *testing.T) {
	// Every "&" becomes "&amp;": five times longer rendered.
	md := strings.Repeat("a & b & c ", 200)
	f := Format{Limit: 100, Render: TelegramHTML}
	parts := Prepare(md, f)
	var plain []string
	for _, p := range parts {
		if len([]rune(p.Text)) > 100 {
			t.Fatalf("rendered part of %d runes", len([]rune(p.Text)))
		}
		plain = append(plain, p.Plain)
	}
	if noSpace(strings.Join(plain, "")) != noSpace(md) {
		t.Error("parts do not add up")
	}
}

// SendParts starts at the part it is told the chat has, and a failure
// names how many parts the chat has then, keeping the failure's kind.
func TestSendPartsResumesAndCountsWhatWasDelivered(t *testing.T) {
	s, _ := quietSender(NewState("test"))
	parts := []Part{{Text: "a", Plain: "a"}, {Text: "b", Plain: "b"}, {Text: "c", Plain: "c"}, {Text: "d", Plain: "d"}}
	var got []string
	err := s.SendParts(context.Background(), "c1", parts, 1, Format{Limit: 10}, func(_ context.Context, text string, _ bool) error {
		if text == "c" && len(got) == 1 {
			return Fail(Permanent, errors.New("chat gone"))
		}
		got = append(got, text)
		return nil
	})
	if strings.Join(got, "") != "b" || Delivered(err) != 2 || KindOf(err) != Permanent {
		t.Fatalf("sent %q, err %v (delivered %d)", got, err, Delivered(err))
	}
	if err := s.SendParts(context.Background(), "c1", parts, 2, Format{Limit: 10}, func(_ context.Context, text string, _ bool) error {
		got = append(got, text)
		return nil
	}); err != nil || strings.Join(got, "") != "bcd" {
		t.Errorf("sent %q, %v; want each part once", got, err)
	}
}

// Markup that grows a part past the limit makes every part a little
// smaller, rather than a full part and a sliver of one line after it: a
// long code block on Telegram came as 4077, 78, 4077, 78 and 1232 units.
func TestPrepareLeavesNoSliversWhenMarkupGrows(t *testing.T) {
	u16 := func(s string) int { return len(utf16.Encode([]rune(s))) }
	tg := Format{Limit: 4096, Measure: u16, Render: TelegramHTML}
	for name, md := range map[string]string{
		"code":   "Intro\n\n```python\n" + strings.Repeat("print('hello world') # comment\n", 300) + "```\n\nOutro",
		"escape": strings.Repeat("a & b < c > d ", 600),
	} {
		parts := Prepare(md, tg)
		var sizes []int
		for _, p := range parts {
			sizes = append(sizes, u16(p.Text))
		}
		for i, n := range sizes {
			// The first may be the text before a code block too long
			// to join it, the last what is left.
			if n > tg.Limit || (i > 0 && i < len(sizes)-1 && n < tg.Limit/2) {
				t.Errorf("%s: parts of %v units; want each within the limit and none between the first and the last under half of it", name, sizes)
				break
			}
		}
	}
}

// TestALongRunOfStarsIsText: a line of thousands of * or _ (a rule, a
// form's blanks) is text. Read as spans nested thousands deep, with each
// cut closing and reopening all of them, 5,000 stars went out as 112
// Telegram messages of "**" each (1,335 on Discord), after seconds of
// work in the channel's only sender, and 16 KB did not finish.
func TestALongRunOfStarsIsText(t *testing.T) {
	for _, f := range []struct {
		name string
		f    Format
	}{
		{"telegram", Format{Limit: 4096, Render: TelegramHTML}},
		{"slack", Format{Limit: 4000, Render: SlackMrkdwn}},
		{"discord", Format{Limit: 2000, Render: DiscordMarkdown}},
	} {
		for _, text := range []string{strings.Repeat("*", 16000), strings.Repeat("_", 8000), "Sign here: " + strings.Repeat("_", 40) + " **today**"} {
			start := time.Now()
			parts := Prepare(text, f.f)
			took := time.Since(start)
			want := (len(text) + f.f.Limit - 1) / f.f.Limit
			if len(parts) > want || took > time.Second {
				t.Errorf("%s: %d bytes of %q went out as %d parts (want %d) after %v", f.name, len(text), text[:1], len(parts), want, took)
			}
			var shown strings.Builder
			for _, p := range parts {
				shown.WriteString(p.Plain)
			}
			if got := noSpace(shown.String()); got != noSpace(strings.ReplaceAll(text, "**today**", "today")) {
				t.Errorf("%s: %q shows as %.60q…", f.name, text[:min(len(text), 40)], got)
			}
		}
	}
	if got := TelegramHTML("Sign here: ______ **today** and ****"); got != "Sign here: ______ <b>today</b> and ****" {
		t.Errorf("blanks and a bold word: %q", got)
	}
}

// TestAPartThatShowsNothingIsNotSent: an empty code block renders as
// <pre></pre>, which Telegram refuses as an empty message, for good: the
// reply was dropped, the text around it too.
func TestAPartThatShowsNothingIsNotSent(t *testing.T) {
	f := Format{Limit: 4096, Render: TelegramHTML}
	for _, md := range []string{strings.Repeat("`", 69), "```\n```", "` ` ` `"} {
		if parts := Prepare(md, f); len(parts) != 0 {
			t.Errorf("%q: %d parts, the first %q; want none", md, len(parts), parts[0].Text)
		}
	}
	f.Limit = 20
	parts := Prepare("before the block\n```\n```\nafter the block", f)
	for _, p := range parts {
		if strings.TrimSpace(p.Plain) == "" {
			t.Errorf("a blank part among %+v", parts)
		}
	}
	if len(parts) == 0 {
		t.Error("the text around the empty block is gone")
	}
}
