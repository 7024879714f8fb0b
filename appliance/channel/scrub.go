package channel

import (
	"bytes"

	"github.com/perchhq/perch/appliance/config"
)

// Scrub replaces each of secrets in data, an answer from a platform, with
// [redacted]. An error answer's text ends up in the log, in /ready's
// details and on the page, and a proxy or a misconfigured api_base can
// answer with a page that echoes the request, Authorization header and
// all.
func Scrub(data []byte, secrets ...config.Secret) []byte {
	for _, s := range secrets {
		if v := s.Value(); len(v) >= 4 && bytes.Contains(data, []byte(v)) {
			data = bytes.ReplaceAll(data, []byte(v), []byte("[redacted]"))
		}
	}
	return data
}
