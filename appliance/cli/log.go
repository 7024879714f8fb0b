package cli

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
	"golang.org/x/sys/unix"
)

// newLogger writes human-readable records at level and above to w: colour
// on a terminal, plain under systemd (the journal adds its own timestamps).
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	opts := &tint.Options{Level: level, TimeFormat: time.DateTime, NoColor: !isTerminal(w)}
	if os.Getenv("JOURNAL_STREAM") != "" {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		}
	}
	return slog.New(tint.NewTextHandler(w, opts))
}

// isTerminal reports whether v (a reader or writer) is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
