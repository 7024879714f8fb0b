package appliance

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
	"golang.org/x/sys/unix"
)

// NewLogger writes human-readable records to w: colour on a terminal,
// plain under systemd (the journal adds its own timestamps).
func NewLogger(w io.Writer, debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isTerminal(f)
	}
	opts := &tint.Options{Level: level, TimeFormat: time.DateTime, NoColor: !tty}
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

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
