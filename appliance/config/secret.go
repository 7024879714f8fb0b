package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
)

// Secret is a credential from the config (API key, bot token, channel
// secret). Every way of printing it — fmt verbs, JSON, slog — shows only
// whether it is set, so a secret cannot reach a log line, an error body or the
// web page by accident. Value returns the real text for the one place that
// needs it (an Authorization header, the config file writer).
type Secret string

const redacted = "[redacted]"

// Value returns the secret itself.
func (s Secret) Value() string { return string(s) }

// IsSet reports whether the secret is non-empty.
func (s Secret) IsSet() bool { return s != "" }

// String masks the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString masks the secret for %#v.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.String()) }

// Format masks the secret for every verb, %x and %q included.
func (s Secret) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s.String())
	case 'v':
		if f.Flag('#') {
			fmt.Fprint(f, s.GoString())
			return
		}
		fmt.Fprint(f, s.String())
	default:
		fmt.Fprint(f, s.String())
	}
}

// LogValue masks the secret in slog records.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON masks the secret; use Encode to write a config file.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads the secret as a plain JSON string.
func (s *Secret) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Secret(v)
	return nil
}

// SetState is "set" or "not set", how status output shows a secret.
func (s Secret) SetState() string {
	if s.IsSet() {
		return "set"
	}
	return "not set"
}
