package systemd

import (
	"testing"
	"time"
)

// The formatters mirror systemd's (format_bytes, format_timespan,
// format_timestamp_relative), so /admin/service reads like systemctl status.

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0B"}, {1023, "1023B"}, {1024, "1.0K"}, {1536, "1.5K"},
		{24_535_040, "23.3M"}, {1 << 30, "1.0G"}, {3*(1<<40) + (1<<40)/2, "3.5T"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.in); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatTimespan(t *testing.T) {
	tests := []struct {
		usec uint64
		want string
	}{
		{0, "0"}, {500, "500us"}, {12_000, "12ms"}, {1_234_567, "1.234s"},
		{61_500_000, "1min 1.500s"}, {3_600_000_000, "1h"}, {90_061_000_000, "1d 1h 1min 1s"},
	}
	for _, tt := range tests {
		if got := formatTimespan(tt.usec, 1000); got != tt.want {
			t.Errorf("formatTimespan(%d) = %q, want %q", tt.usec, got, tt.want)
		}
	}
}

func TestRelative(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{500 * time.Microsecond, "500us ago"},
		{5 * time.Second, "5s ago"},
		{90 * time.Second, "1min 30s ago"},
		{7 * time.Minute, "7min ago"},
		{2*time.Hour + 3*time.Minute + 10*time.Second, "2h 3min ago"},
		{7 * time.Hour, "7h ago"},
		{26 * time.Hour, "1 day 2h ago"},
		{3 * 24 * time.Hour, "3 days ago"},
		{10 * 24 * time.Hour, "1 week 3 days ago"},
		{400 * 24 * time.Hour, "1 year 1 month ago"},
		{-10 * time.Second, "10s left"},
	}
	for _, tt := range tests {
		if got := relative(tt.d); got != tt.want {
			t.Errorf("relative(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestRenderIgnoresMistypedProperties: a property of an unexpected type is
// left out rather than trusted or crashing.
func TestRenderIgnoresMistypedProperties(t *testing.T) {
	got := renderStatus("perch.service", map[string]any{
		"ActiveState": "active", "SubState": "running", "LoadState": "loaded",
		"MainPID": "812", "MemoryCurrent": int64(5),
	}, time.Unix(0, 0), time.UTC)
	want := "● perch.service\n     Loaded: loaded\n     Active: active (running)\n"
	if got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

func TestExitText(t *testing.T) {
	tests := []struct {
		code, status int32
		want         string
	}{
		{1, 0, "code=exited, status=0/SUCCESS"},
		{1, 226, "code=exited, status=226/NAMESPACE"},
		{1, 99, "code=exited, status=99"},
		{2, 9, "code=killed, signal=KILL"},
		{3, 11, "code=dumped, signal=SEGV"},
	}
	for _, tt := range tests {
		if got := exitText(tt.code, tt.status); got != tt.want {
			t.Errorf("exitText(%d, %d) = %q, want %q", tt.code, tt.status, got, tt.want)
		}
	}
}
