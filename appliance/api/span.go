package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseTime reads an RFC 3339 time or a span back from now ("24h", "7d");
// empty gives def.
func ParseTime(s string, now, def time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := ParseSpan(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a time (RFC 3339, e.g. 2026-03-01T06:00:00Z) nor a span back from now (24h, 7d, 1y)", s)
	}
	return now.Add(-d), nil
}

var spanUnits = map[byte]time.Duration{'d': 24 * time.Hour, 'w': 7 * 24 * time.Hour, 'y': 365 * 24 * time.Hour}

// ParseSpan reads a positive duration: Go's form ("90m", "1h30m"), whole
// days, weeks or years ("7d", "2w", "1y"), or bare seconds ("300").
func ParseSpan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	var err error
	if n, e := strconv.ParseInt(s, 10, 64); e == nil {
		d = time.Duration(n) * time.Second
	} else if u, ok := spanUnits[s[len(s)-1]]; ok && len(s) > 1 {
		n, e := strconv.ParseInt(s[:len(s)-1], 10, 32)
		if e != nil {
			err = e
		}
		d = time.Duration(n) * u
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 || d > 10*365*24*time.Hour {
		return 0, fmt.Errorf("%q is not a span: write 300 (seconds), 5m, 1h, 7d, 2w or 1y", s)
	}
	return d, nil
}

// spanNames are the units Span says a duration in, largest first.
var spanNames = []struct {
	d    time.Duration
	name string
}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}}

// Span says d as a person would, in the largest unit it is a whole number
// of: "1 hour", "10 minutes", "90 seconds", "2 days" (as the web page does).
// Go's form ("1h0m0s") is for durations below a second or not whole seconds.
func Span(d time.Duration) string {
	for _, u := range spanNames {
		if d >= u.d && d%u.d == 0 {
			n := int64(d / u.d)
			if n == 1 {
				return "1 " + u.name
			}
			return strconv.FormatInt(n, 10) + " " + u.name + "s"
		}
	}
	return d.String()
}
