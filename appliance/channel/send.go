package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"
)

// FailKind says what a failed platform call calls for.
type FailKind int

const (
	// Transient failures (network, 5xx) are retried with backoff.
	Transient FailKind = iota
	// RateLimited failures (429) are retried after RetryAfter.
	RateLimited
	// TooLong means the platform refused the message's length: it is
	// split smaller, never sent again as is.
	TooLong
	// BadFormat means the platform refused the message's markup: it is
	// sent again as plain text.
	BadFormat
	// Permanent failures (chat gone, bot blocked, bad request) are not
	// retried.
	Permanent
)

func (k FailKind) String() string {
	switch k {
	case Transient:
		return "transient"
	case RateLimited:
		return "rate limited"
	case TooLong:
		return "too long"
	case BadFormat:
		return "bad format"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// SendError is a platform call's failure, classified by the platform's
// package so the framework knows whether and how to try again.
type SendError struct {
	Kind FailKind
	// RetryAfter is the wait the platform asked for (429 retry_after,
	// Retry-After), or a wait chosen by the platform package (a 409
	// conflict).
	RetryAfter time.Duration
	Err        error
}

func (e *SendError) Error() string { return e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// Fail classifies err as kind.
func Fail(kind FailKind, err error) error {
	if err == nil {
		return nil
	}
	return &SendError{Kind: kind, Err: err}
}

// RetryAfter classifies err as rate limited, to be tried again after d.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &SendError{Kind: RateLimited, RetryAfter: d, Err: err}
}

// PartialError is the failure of a message whose first Delivered units
// (text parts, then media) reached the chat: a retry sends only the rest.
type PartialError struct {
	Delivered int
	Err       error
}

func (e *PartialError) Error() string { return e.Err.Error() }
func (e *PartialError) Unwrap() error { return e.Err }

// Partial wraps err, the failure of a message's unit n, saying that units
// 0 to n-1 were delivered.
func Partial(n int, err error) error {
	if err == nil || n <= 0 {
		return err
	}
	return &PartialError{Delivered: n, Err: err}
}

// Delivered is how many units of a message err says were delivered.
func Delivered(err error) int {
	var pe *PartialError
	if errors.As(err, &pe) {
		return pe.Delivered
	}
	return 0
}

// KindOf returns err's FailKind (Transient for unclassified errors).
func KindOf(err error) FailKind {
	var se *SendError
	if errors.As(err, &se) {
		return se.Kind
	}
	return Transient
}

// Format describes how a platform shows text: its per-message limit, how
// it counts length, and how Markdown becomes its markup.
type Format struct {
	// Limit is the longest message the platform accepts, in its units.
	Limit int
	// Measure counts length as the platform does (Telegram: UTF-16 code
	// units; nil: runes).
	Measure func(string) int
	// Render turns the agent's Markdown into the platform's markup; nil
	// sends the text as it is.
	Render func(markdown string) string
	// MeasureRendered counts a rendered part as the platform counts it
	// against Limit (Telegram: the text its HTML shows, tags left out and
	// each entity one character; nil: Measure, markup and all).
	MeasureRendered func(string) int
	// Plain turns Markdown into the plain text sent when the platform
	// refuses the markup (nil: PlainText).
	Plain func(markdown string) string
}

func (f Format) measure(s string) int {
	if f.Measure != nil {
		return f.Measure(s)
	}
	return utf8.RuneCountInString(s)
}

func (f Format) measureRendered(s string) int {
	if f.MeasureRendered != nil {
		return f.MeasureRendered(s)
	}
	return f.measure(s)
}

// Part is one message of a reply.
type Part struct {
	// Text is the rendered message (markup when Formatted).
	Text string
	// Formatted says Text carries markup; Plain is then the same part as
	// plain text, for the fallback.
	Formatted bool
	Plain     string
}

// Prepare splits the agent's Markdown reply into parts within f.Limit, in
// order, each rendered for the platform and checked against the limit
// after rendering (markup makes text longer).
func Prepare(markdown string, f Format) []Part {
	plain := f.Plain
	if plain == nil {
		plain = PlainText
	}
	limit := f.Limit
	for depth := 0; ; depth++ {
		var out []Part
		worst := 0 // the longest rendered part past the limit
		for _, c := range splitMeasured(markdown, limit, f.measure, f.Render != nil) {
			p := Part{Text: c, Plain: plain(c)}
			if strings.TrimSpace(p.Plain) == "" {
				// Nothing shows (an empty code block, blank inline
				// code): Telegram refuses an empty message for good,
				// and the rest of the answer with it.
				continue
			}
			if f.Render != nil {
				p.Text, p.Formatted = f.Render(c), true
			}
			if n := f.measureRendered(p.Text); n > f.Limit {
				worst = max(worst, n)
			}
			out = append(out, p)
		}
		if worst > 0 && depth < 4 {
			// Markup grew a part past the limit: the whole reply is split
			// finer by the overshoot. Splitting only that part again
			// left a sliver of a message behind it (a code block went as
			// 4077, 78, 4077, 78 … units).
			limit = max(limit*f.Limit/worst-16, limit/2, 1)
			continue
		}
		fixed := out[:0:0]
		for _, p := range out {
			if f.measureRendered(p.Text) > f.Limit || f.measure(p.Plain) > f.Limit {
				// Pathological markup growth: plain text cut to size.
				for _, s := range splitMeasured(p.Plain, f.Limit, f.measure, false) {
					fixed = append(fixed, Part{Text: s, Plain: s})
				}
				continue
			}
			fixed = append(fixed, p)
		}
		return fixed
	}
}

// Sender sends a channel's messages through the platform with the house
// rules: 429 waits as long as the platform asks (within MaxWait), other
// transient failures are retried with backoff, a part refused for its
// markup goes again as plain text, one refused as too long is split
// smaller, and a failure for good is logged with channel and chat and
// kept as the channel's last error.
type Sender struct {
	Channel string
	// Log is the channel's logger, which names it (the intake's).
	Log   *slog.Logger
	State *State
	// Attempts bounds tries per call (default 5).
	Attempts int
	// MaxWait bounds a single wait a 429 asks for (default
	// DefaultMaxWait); a longer one fails the send for now, and the reply
	// waits in its inbox entry for the sweeper.
	MaxWait time.Duration
	// Backoff spaces transient retries (default 500 ms to 30 s).
	Backoff Backoff
}

// DefaultMaxWait is the longest 429 a send sits out. A channel's replies
// go out one after the other, so a chat the platform slowed down for a
// minute (a busy Telegram group, a Discord channel's bucket) held every
// other chat of the channel for that minute; past this wait the reply
// waits in the inbox instead, the sweeper sends it when the platform
// allows, and later replies to the same chat wait behind it.
const DefaultMaxWait = 5 * time.Second

// Do calls fn until it succeeds, fails for good, or runs out of attempts,
// waiting as its errors ask. what names the call in logs ("sendMessage").
func (s *Sender) Do(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	attempts := s.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	maxWait := s.MaxWait
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	b := s.Backoff
	if b.Min == 0 {
		b = Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second}
	}
	var err error
	for i := 0; i < attempts; i++ {
		if err = fn(ctx); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		var wait time.Duration
		switch KindOf(err) {
		case RateLimited:
			var se *SendError
			errors.As(err, &se)
			wait = se.RetryAfter
			if wait <= 0 {
				wait = b.Next()
			}
			if wait > maxWait {
				return fmt.Errorf("%s: rate limited for %s, longer than the %s this send waits: %w", what, wait, maxWait, err)
			}
		case Transient:
			wait = b.Next()
		default:
			return err
		}
		if i == attempts-1 {
			break
		}
		s.log().Debug("retrying a platform call", "call", what, "in", wait, "err", err)
		if !Sleep(ctx, wait) {
			return err
		}
	}
	return err
}

// SendParts sends parts in order through send, which gets each part's text
// and whether it carries markup, starting at part from (the parts before
// it reached the chat in an earlier attempt). A part refused for its
// markup is sent again as plain text; one refused as too long is split in
// halves and sent as plain text. chat names the destination in logs. A
// failure says, as a PartialError, how many parts were delivered.
func (s *Sender) SendParts(ctx context.Context, chat string, parts []Part, from int, f Format, send func(ctx context.Context, text string, formatted bool) error) error {
	for i := max(from, 0); i < len(parts); i++ {
		if err := s.sendPart(ctx, chat, parts[i], f, send, 0); err != nil {
			s.failed(chat, err)
			return Partial(i, err)
		}
		if s.State != nil {
			s.State.CountOut()
		}
	}
	return nil
}

func (s *Sender) sendPart(ctx context.Context, chat string, p Part, f Format, send func(ctx context.Context, text string, formatted bool) error, depth int) error {
	err := s.Do(ctx, "send", func(ctx context.Context) error { return send(ctx, p.Text, p.Formatted) })
	switch {
	case err == nil:
		return nil
	case KindOf(err) == BadFormat && p.Formatted:
		s.log().Info("the platform refused the reply's formatting; sending it as plain text", "chat", chat, "err", err)
		return s.sendPart(ctx, chat, Part{Text: p.Plain, Plain: p.Plain}, f, send, depth)
	case KindOf(err) == TooLong && depth < 4:
		s.log().Info("the platform refused a part as too long; splitting it smaller", "chat", chat, "err", err)
		half := max(f.measure(p.Plain)/2, 1)
		for _, c := range splitMeasured(p.Plain, half, f.measure, false) {
			if err := s.sendPart(ctx, chat, Part{Text: c, Plain: c}, f, send, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return err
}

// failed logs a send that failed and keeps it as the last error. A reply
// that failed for a while (the platform down or rate limiting) is kept and
// sent again, which the hub's log line says; only other failures are for
// good.
func (s *Sender) failed(chat string, err error) {
	switch k := KindOf(err); k {
	case Transient, RateLimited:
		s.log().Info("sending failed for now", "chat", chat, "kind", k.String(), "err", err)
	default:
		s.log().Warn("sending failed for good", "chat", chat, "kind", k.String(), "err", err)
	}
	if s.State != nil {
		s.State.Fail(fmt.Errorf("sending to chat %s failed: %w", chat, err))
	}
}

// log is the channel's logger, which names the channel.
func (s *Sender) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default().With("channel", s.Channel)
}
